// The rules a submission must keep, enforced rather than stated (docs/instructor-guide.md,
// "Rules the grader enforces"): a student edits only inside the BEGIN/END STUDENT CODE regions,
// and an exercise calls none of the kit functions its spec forbids ([forbidden] in grade.toml).
#pragma once

#include <string>
#include <vector>

#include "ddplab/grader/spec.h"

namespace ddplab::grader {

/// Where `submission` first differs from `skeleton` outside the STUDENT CODE regions, as
/// "name:line: edited outside the STUDENT CODE regions: ..." (the line is the submission's), or ""
/// when they agree. Tolerated: whitespace at line ends (spaces, tabs, the CR of CRLF files) and
/// blank lines, which change nothing the compiler sees; everything else outside the regions —
/// an include, a helper function, a changed signature, a renamed or retitled marker — is an edit.
/// A malformed marker in the submission is reported with its line the same way.
/// `reference_is_skeleton` false: the reference is the kit's solution, whose text outside the
/// regions is the skeleton's (a kit test keeps it so) but whose line numbers are not, so the
/// message quotes its line without a number (a student's own tree, whose labs/ file is the edited
/// one, is checked against solutions/).
std::string outside_edit(const std::string& name, const std::string& skeleton_text, const std::string& submission_text,
                         bool reference_is_skeleton = true);

/// outside_edit for every manifest file of `spec`: the submission's copy in `submission_dir`
/// against the skeleton in `skeleton_dir` (files the submission lacks are the skeleton's, so
/// they agree), or against the solution there with `reference_is_skeleton` false (files the kit's
/// solutions lack are not checked). One entry per file that differs, in manifest order.
std::vector<std::string> submission_region_edits(const LabSpec& spec, const std::string& skeleton_dir,
                                                 const std::string& submission_dir, bool reference_is_skeleton = true);

/// One undefined symbol of a compiled object: the archive member it is in ("lab01_student.cpp"
/// for lab01_student.cpp.o) and its demangled name.
struct UndefinedSymbol {
  std::string file;
  std::string symbol;
};

/// The undefined symbols of an object file or static library, from `nm -C --undefined-only`.
/// Throws ddplab::Error if nm cannot be run or fails.
std::vector<UndefinedSymbol> undefined_symbols(const std::string& path);
/// Parses nm -C --undefined-only output (archive member headers "x.cpp.o:" and "  U name" lines).
std::vector<UndefinedSymbol> parse_nm_undefined(const std::string& nm_output);

/// The qualified name of the function a demangled symbol names, without parameters, template
/// arguments or return type: "ddplab::evaluate_model" for "ddplab::evaluate_model(ddplab::DeepFM&,
/// ...)"; "" for a symbol that is no function (vtable for ..., typeinfo for ..., a variable).
std::string function_of_symbol(const std::string& demangled);

/// A call the spec forbids: `exercise` may not call `function` (as [forbidden] wrote it), and
/// the compiled `file` references it as `symbol`.
struct ForbiddenCall {
  std::string exercise;
  std::string function;
  std::string file;
  std::string symbol;
};

/// The forbidden calls among `undefined`. A [forbidden] entry names a function
/// ("ddplab::evaluate_model", every overload) or a class or namespace, whose every member
/// function it forbids ("ddplab::dist::GradSync").
std::vector<ForbiddenCall> forbidden_calls(const LabSpec& spec, const std::vector<UndefinedSymbol>& undefined);

}  // namespace ddplab::grader

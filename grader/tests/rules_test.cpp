// The enforced rules without a lab run: a submission's edits outside its STUDENT CODE regions
// (what is an edit, what is tolerated, which line is named), the [forbidden] table of a spec, and
// the forbidden calls found among nm's undefined symbols. The whole path (grading a submission
// that breaks a rule) is the grade.planted.lab01_baseline.{edit_outside_region,calls_evaluate_model}
// self-tests.
#include "ddplab/grader/rules.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "ddplab/error.h"
#include "ddplab/grader/grade.h"
#include "ddplab/grader/spec.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace ddplab::grader;

namespace {

const std::string kSkeleton =
    "// Lab 09\n"
    "#include \"lab09.h\"\n"
    "\n"
    "int f() {\n"
    "  // BEGIN STUDENT CODE (09.1: the answer)\n"
    "  throw ddplab::NotImplemented(\"09.1\", \"the answer\");\n"
    "  // END STUDENT CODE\n"
    "}\n"
    "\n"
    "int g() {\n"
    "  // BEGIN STUDENT CODE (09.2: the question)\n"
    "  throw ddplab::NotImplemented(\"09.2\", \"the question\");\n"
    "  // END STUDENT CODE\n"
    "}\n";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

std::string edit(const std::string& submission) { return outside_edit("lab09_student.cpp", kSkeleton, submission); }

TEST(Regions, EditsInsideTheRegionsAreTheStudents) {
  const std::string s =
      replaced(kSkeleton, "  throw ddplab::NotImplemented(\"09.1\", \"the answer\");\n",
               "  int x = 6;\n\n  // a comment, an #include-free helper lambda, anything\n  return x * 7;\n");
  EXPECT_EQ(edit(s), "");
  EXPECT_EQ(edit(kSkeleton), "");
}

TEST(Regions, LineEndWhitespaceCrlfAndBlankLinesAreTolerated) {
  std::string crlf;
  for (char c : kSkeleton) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  EXPECT_EQ(edit(crlf), "");
  EXPECT_EQ(edit(replaced(kSkeleton, "int f() {\n", "int f() {   \t\n")), "");
  EXPECT_EQ(edit(replaced(kSkeleton, "}\n\nint g", "}\n\n\n\nint g")), "");
  EXPECT_EQ(edit(kSkeleton + "\n\n"), "");
  EXPECT_EQ(edit(replaced(kSkeleton, "\nint f", "int f")), "");  // a blank line removed
}

TEST(Regions, AnAddedLineIsNamedWithItsLine) {
  EXPECT_EQ(edit(replaced(kSkeleton, "#include \"lab09.h\"\n", "#include \"lab09.h\"\n#include <cmath>\n")),
            "lab09_student.cpp:3: edited outside the STUDENT CODE regions: line added: `#include <cmath>`");
  // A helper function between two exercises: its first line.
  EXPECT_EQ(edit(replaced(kSkeleton, "}\n\nint g", "}\n\nint helper() { return 1; }\nint g")),
            "lab09_student.cpp:10: edited outside the STUDENT CODE regions: line added: `int helper() { return 1; }`");
  EXPECT_EQ(edit(kSkeleton + "int extra;\n"),
            "lab09_student.cpp:15: edited outside the STUDENT CODE regions: line added: `int extra;`");
}

TEST(Regions, AChangedOrRemovedLineIsNamed) {
  EXPECT_EQ(edit(replaced(kSkeleton, "int g() {", "long g() {")),
            "lab09_student.cpp:10: edited outside the STUDENT CODE regions: `long g() {` where the skeleton's line 10 "
            "is `int g() {`");
  EXPECT_EQ(edit(replaced(kSkeleton, "#include \"lab09.h\"\n", "")),
            "lab09_student.cpp:2: edited outside the STUDENT CODE regions: the skeleton's line 2 `#include "
            "\"lab09.h\"` is missing");
  EXPECT_EQ(edit(kSkeleton.substr(0, kSkeleton.size() - 2)),  // the last "}" gone
            "lab09_student.cpp:14: edited outside the STUDENT CODE regions: the skeleton's line 14 `}` is missing");
  // Leading whitespace counts: only line ends are tolerated.
  EXPECT_NE(edit(replaced(kSkeleton, "int f() {", "  int f() {")), "");
}

TEST(Regions, MarkersAreOutsideTextToo) {
  // Region identity is id and title: a retitled region is an edit.
  EXPECT_EQ(edit(replaced(kSkeleton, "(09.2: the question)", "(09.2: my question)")),
            "lab09_student.cpp:11: edited outside the STUDENT CODE regions: `// BEGIN STUDENT CODE (09.2: my "
            "question)` where the skeleton's line 11 is `// BEGIN STUDENT CODE (09.2: the question)`");
  // Two regions merged into one (the END and BEGIN between them deleted, code moved out of them).
  const std::string merged =
      replaced(kSkeleton, "  // END STUDENT CODE\n}\n\nint g() {\n  // BEGIN STUDENT CODE (09.2: the question)\n", "");
  EXPECT_NE(edit(merged), "");
  const std::string broken =
      replaced(kSkeleton, "// BEGIN STUDENT CODE (09.1: the answer)", "// BEGIN STUDENT CODE 09.1");
  EXPECT_EQ(edit(broken),
            "lab09_student.cpp:5: malformed marker, expected `// BEGIN STUDENT CODE (NN.M: title)` (the BEGIN/END "
            "STUDENT CODE markers must stay as the skeleton has them)");
}

TEST(Regions, EverySubmittedManifestFileIsCompared) {
  const ddplab::testing::ScratchDir scratch;
  const fs::path dir = scratch.dir();
  fs::create_directories(dir / "skel");
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "skel" / "a.cpp") << kSkeleton;
  std::ofstream(dir / "skel" / "b.cpp") << kSkeleton;
  std::ofstream(dir / "sub" / "a.cpp") << kSkeleton;
  std::ofstream(dir / "sub" / "b.cpp") << "#pragma once\n" + kSkeleton;
  LabSpec spec;
  spec.manifest = {"a.cpp", "b.cpp", "c.cpp"};  // c.cpp: not submitted, the skeleton's is used
  const auto edits = submission_region_edits(spec, (dir / "skel").string(), (dir / "sub").string());
  ASSERT_EQ(edits.size(), 1u);
  EXPECT_EQ(edits[0], "b.cpp:1: edited outside the STUDENT CODE regions: line added: `#pragma once`");
}

// The harness: a submission that breaks the rule fails every check with the first edit, and is
// neither built nor run (the fake build folder here could build nothing).
/// A fake kit for the harness's rule checks, with nothing built (a build would fail: every
/// binary is /x): `dir`/kit/labs/lab09_x, a build folder whose targets.json names the lab's
/// `tree` targets, a spec with one unit_tests check per exercise, and options grading `tree`.
struct FakeKit {
  ddplab::testing::ScratchDir scratch;
  fs::path dir, spec_path;
  GradeOptions o;
  FakeKit(const std::string& name, const std::string& tree, const std::vector<std::string>& exercises)
      : scratch(name), dir(scratch.dir()) {
    fs::create_directories(dir / "kit/labs/lab09_x");
    fs::create_directories(dir / "build/grader");
    std::ofstream(dir / "build/grader/targets.json")
        << R"({"tree": "solutions", "lab09_x/)" << tree << R"(": {"program": "/x", "tests": "/x"}})";
    spec_path = dir / "grade.toml";
    std::ofstream spec(spec_path);
    spec << "[lab]\ntitle = \"Lab 09\"\nfolder = \"lab09_x\"\nprogram = \"lab09_x\"\n"
            "manifest = [\"lab09_student.cpp\"]\nexercises = [";
    for (size_t i = 0; i < exercises.size(); ++i) spec << (i ? ", " : "") << "\"" << exercises[i] << "\"";
    spec << "]\n";
    for (const auto& e : exercises) {
      const std::string id = "ex" + e.substr(0, 2) + "_" + e.substr(3);  // 09.1 -> ex09_1
      spec << "\n[[check]]\nid = \"" << id << "\"\nkind = \"unit_tests\"\nname = \"check " << e << "\"\nexercise = \""
           << e << "\"\nfilter = \"T" << e << ".*\"\npoints = 5\n";
    }
    o.source_dir = (dir / "kit").string();
    o.build_dir = (dir / "build").string();
    o.tree = tree;
    o.data_dir = (dir / "data").string();
    o.out_dir = (dir / "out").string();
    o.sandbox = "none";
    o.quiet = true;
  }
  LabResult grade() const { return grade_lab(load_spec(spec_path.string()), o); }
};

TEST(Regions, TheGraderRejectsAnEditedSubmissionBeforeBuildingIt) {
  FakeKit kit("ddplab_rules_harness", "submission", {"09.1", "09.2"});
  const fs::path& dir = kit.dir;
  fs::create_directories(dir / "alice");
  std::ofstream(dir / "kit/labs/lab09_x/lab09_student.cpp") << kSkeleton;
  std::ofstream(dir / "alice/lab09_student.cpp") << replaced(kSkeleton, "int g() {", "int g() { // mine");
  kit.o.submission = (dir / "alice").string();
  const LabResult r = kit.grade();
  const std::string want =
      "lab09_student.cpp:10: edited outside the STUDENT CODE regions: `int g() { // mine` where "
      "the skeleton's line 10 is `int g() {`";
  EXPECT_EQ(r.rule_errors, std::vector<std::string>{want});
  EXPECT_TRUE(r.build_error.empty()) << "it was built: " << r.build_error;
  ASSERT_EQ(r.checks.size(), 2u);
  for (const auto& c : r.checks) {
    EXPECT_EQ(c.status, Status::kFailed);
    EXPECT_EQ(c.score, 0);
    EXPECT_EQ(c.observed, want);
    EXPECT_NE(c.diagnosis.find("only the code between `// BEGIN STUDENT CODE` and `// END STUDENT CODE` may change"),
              std::string::npos);
  }
  EXPECT_EQ(r.score, 0);
}

// A student's own tree (`build/labs/bin/ddplab grade lab09`): their labs/ file is the edited one,
// so it is checked against the kit's solution, whose text outside the regions is the skeleton's;
// the same rejection as a submission's, naming the student's line and the kit's text.
TEST(Regions, AStudentsOwnTreeIsHeldToTheSameRule) {
  FakeKit kit("ddplab_rules_tree", "labs", {"09.1"});
  const fs::path& dir = kit.dir;
  fs::create_directories(dir / "kit/solutions/lab09_x");
  const std::string solution =
      replaced(replaced(kSkeleton, "  throw ddplab::NotImplemented(\"09.1\", \"the answer\");\n", "  return 42;\n"),
               "  throw ddplab::NotImplemented(\"09.2\", \"the question\");\n", "  int q = 6;\n  return q * 9;\n");
  std::ofstream(dir / "kit/solutions/lab09_x/lab09_student.cpp") << solution;
  kit.o.build = false;
  // A student's work inside the regions (one line more than the solution's) and g's signature
  // changed: named at the student's line, with the kit's text it replaced.
  std::ofstream(dir / "kit/labs/lab09_x/lab09_student.cpp")
      << replaced(replaced(kSkeleton, "  throw ddplab::NotImplemented(\"09.1\", \"the answer\");\n",
                           "  int a = 40;\n  return a + 2;\n"),
                  "int g() {", "int g(void) {");
  const LabResult r = kit.grade();
  const std::string want =
      "lab09_student.cpp:11: edited outside the STUDENT CODE regions: `int g(void) {` where the kit has `int g() {`";
  EXPECT_EQ(r.rule_errors, std::vector<std::string>{want});
  ASSERT_EQ(r.checks.size(), 1u);
  EXPECT_EQ(r.checks[0].status, Status::kFailed);
  EXPECT_EQ(r.checks[0].observed, want);
  EXPECT_NE(r.checks[0].diagnosis.find("as in a submission"), std::string::npos) << r.checks[0].diagnosis;

  // Edits inside the regions only: the rule holds and grading goes on, to the data set, which
  // this fake kit does not have.
  std::ofstream(dir / "kit/labs/lab09_x/lab09_student.cpp")
      << replaced(kSkeleton, "  throw ddplab::NotImplemented(\"09.1\", \"the answer\");\n", "  return 7;\n");
  try {
    EXPECT_TRUE(kit.grade().rule_errors.empty());
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("meta.json"), std::string::npos) << e.what();
  }
}

// The kit's own labs: every solution file agrees with its skeleton outside the regions under the
// submission rule too (else the reference solution, submitted, would be rejected).
TEST(Regions, EverySolutionPassesTheSubmissionRule) {
  for (const auto& spec : load_all_specs(DDPLAB_TEST_SOURCE_ROOT)) {
    const fs::path root = DDPLAB_TEST_SOURCE_ROOT;
    EXPECT_EQ(submission_region_edits(spec, (root / "labs" / spec.folder).string(),
                                      (root / "solutions" / spec.folder).string()),
              std::vector<std::string>{})
        << spec.id;
  }
}

/// The ConfigError message load_spec gives for a self-test spec with `forbidden` appended ("" if none).
std::string spec_error(const std::string& forbidden, LabSpec* out = nullptr, const std::string& top = "") {
  const ddplab::testing::ScratchDir scratch;
  const fs::path p = scratch.path("grade.toml");
  std::ofstream(p) << top
                   << "[lab]\ntitle = \"Lab 09\"\nfolder = \"lab09_x\"\nprogram = \"lab09_x\"\n"
                      "manifest = [\"lab09_student.cpp\"]\nexercises = [\"09.1\", \"09.2\"]\n\n"
                      "[[check]]\nid = \"t\"\nkind = \"unit_tests\"\nname = \"t\"\nexercise = \"09.1\"\n"
                      "filter = \"X.*\"\npoints = 1\n\n"
                   << forbidden;
  std::string error;
  try {
    const LabSpec s = load_spec(p.string());
    if (out) *out = s;
  } catch (const ddplab::ConfigError& e) {
    error = e.what();
  }
  return error;
}

TEST(Forbidden, TheSpecTableIsValidated) {
  LabSpec s;
  EXPECT_EQ(spec_error("[forbidden]\n\"09.1\" = [\"ddplab::evaluate_model\", \"ddplab::dist::GradSync\"]\n", &s), "");
  EXPECT_EQ(s.forbidden.at("09.1"), (std::vector<std::string>{"ddplab::evaluate_model", "ddplab::dist::GradSync"}));
  EXPECT_NE(spec_error("[forbidden]\n\"09.7\" = [\"f\"]\n")
                .find(":17: [forbidden] '09.7' is not one of the lab's "
                      "exercises (09.1, 09.2)"),
            std::string::npos)
      << spec_error("[forbidden]\n\"09.7\" = [\"f\"]\n");
  EXPECT_NE(spec_error("[forbidden]\n\"09.1\" = [\"ddplab::evaluate_model(int)\"]\n").find("qualified name"),
            std::string::npos);
  EXPECT_NE(spec_error("[forbidden]\n\"09.1\" = []\n").find("non-empty array"), std::string::npos);
  EXPECT_NE(spec_error("", nullptr, "forbidden = 3\n").find(":1: [forbidden] must be a table"), std::string::npos);
}

TEST(Forbidden, FunctionNamesOfDemangledSymbols) {
  EXPECT_EQ(function_of_symbol("ddplab::evaluate_model(ddplab::DeepFM&, ddplab::data::Dataset const&, unsigned long, "
                               "long, c10::Device)"),
            "ddplab::evaluate_model");
  EXPECT_EQ(function_of_symbol("ddplab::dist::GradSync::finish()"), "ddplab::dist::GradSync::finish");
  EXPECT_EQ(function_of_symbol("std::vector<float, std::allocator<float> >::reserve(unsigned long)"),
            "std::vector<float, std::allocator<float> >::reserve");
  EXPECT_EQ(function_of_symbol("void ddplab::util::fill<float>(float*, unsigned long)"), "ddplab::util::fill");
  EXPECT_EQ(function_of_symbol("vtable for ddplab::data::BatchLoader"), "");
  EXPECT_EQ(function_of_symbol("typeinfo for ddplab::Error"), "");
  EXPECT_EQ(function_of_symbol("ddplab::some_global"), "");
  EXPECT_EQ(function_of_symbol("non-virtual thunk to ddplab::dist::GradSync::reduce()"),
            "ddplab::dist::GradSync::reduce");
}

TEST(Forbidden, NmOutputIsReadPerArchiveMember) {
  const auto u = parse_nm_undefined(
      "\nlab01_student.cpp.o:\n                 U ddplab::evaluate_model(ddplab::DeepFM&)\n"
      "                 U vtable for ddplab::data::BatchLoader\n\nhelpers.cpp.o:\n                 U memcpy\n");
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].file, "lab01_student.cpp");
  EXPECT_EQ(u[0].symbol, "ddplab::evaluate_model(ddplab::DeepFM&)");
  EXPECT_EQ(u[2].file, "helpers.cpp");
  EXPECT_EQ(u[2].symbol, "memcpy");
}

TEST(Forbidden, CallsAreMatchedByFunctionClassOrNamespace) {
  LabSpec spec;
  spec.forbidden = {{"02.1", {"ddplab::dist::detect_environment"}},
                    {"02.3", {"ddplab::dist::GradSync", "ddplab::dist::make_grad_sync"}}};
  const std::vector<UndefinedSymbol> u =
      {{"lab02_student.cpp", "ddplab::dist::detect_environment(std::function<...> const&)"},
       {"lab02_student.cpp", "ddplab::dist::detect_environment_twice()"},  // another function
       {"lab02_student.cpp", "ddplab::dist::GradSync::finish()"},
       {"lab02_student.cpp", "vtable for ddplab::dist::GradSync"},  // data, not a call
       {"lab02_student.cpp", "ddplab::Error::Error(std::string const&, char const*, int)"}};
  const auto calls = forbidden_calls(spec, u);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].exercise, "02.1");
  EXPECT_EQ(calls[0].function, "ddplab::dist::detect_environment");
  EXPECT_EQ(calls[1].exercise, "02.3");
  EXPECT_EQ(calls[1].function, "ddplab::dist::GradSync");
  EXPECT_EQ(calls[1].symbol, "ddplab::dist::GradSync::finish()");
}

TEST(Forbidden, NmReadsARealObject) {
  // The grader's own library calls fmt and nlohmann: nm works here and names undefined symbols.
  const auto u = undefined_symbols(DDPLAB_TEST_GRADER_LIBRARY);
  EXPECT_FALSE(u.empty());
  EXPECT_THROW(undefined_symbols("/nonexistent/libx.a"), ddplab::Error);
}

// A forbidden call is only visible as an undefined symbol if the kit defines the function out of
// line (an inline one is compiled into the student's object): every [forbidden] entry of every
// lab must name functions the kit's libraries define, or it would never fire.
TEST(Forbidden, EveryLabsForbiddenFunctionIsDefinedOutOfLineByTheKit) {
  std::set<std::string> defined;
  std::istringstream libs(DDPLAB_TEST_KIT_LIBRARIES);
  for (std::string lib; std::getline(libs, lib, '|');) {
    const std::string cmd = "nm -C --defined-only " + lib;
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr) << cmd;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p)) {
      std::string line(buf);
      if (!line.empty() && line.back() == '\n') line.pop_back();
      const auto sp = line.find(' ', line.find(' ') + 1);  // "0000000000000000 T name"
      if (sp == std::string::npos || line.size() < 19 || line[17] != 'T') continue;
      const std::string fn = function_of_symbol(line.substr(sp + 1));
      if (!fn.empty()) defined.insert(fn);
    }
    ASSERT_EQ(::pclose(p), 0) << cmd;
  }
  size_t entries = 0;
  for (const auto& spec : load_all_specs(DDPLAB_TEST_SOURCE_ROOT)) {
    for (const auto& [exercise, functions] : spec.forbidden) {
      for (const auto& f : functions) {
        ++entries;
        const bool found = std::any_of(defined.begin(), defined.end(),
                                       [&](const std::string& d) { return d == f || d.rfind(f + "::", 0) == 0; });
        EXPECT_TRUE(found) << spec.path << ": [forbidden] " << exercise << " names " << f
                           << ", which no kit library defines out of line";
      }
    }
  }
  EXPECT_GE(entries, 6u);  // labs 01-03 forbid at least the ones issue 11 names
}

}  // namespace

// Check plug-ins: each kind of check is one file in grader/src/checks/ that ends with a descriptor
// (CheckKind) declaring its parameters, their types and defaults, its default diagnosis and its
// function; grader/src/checks/registry.cpp lists the descriptors. Specs are validated against them.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddplab/grader/grade.h"

namespace ddplab::grader {

/// The type of a check parameter, as the spec's TOML value must have it.
enum class ParamType { kNumber, kInteger, kBool, kString, kStringList };
/// "number", "integer", "bool", "string", "string list" (the names the instructor guide uses).
const char* param_type_name(ParamType t);

/// Whether a parameter must be written, has a default, or may be left out without one.
enum class Presence { kDefault, kRequired, kOptional };

/// One parameter a kind accepts.
struct ParamSpec {
  ParamSpec(std::string name_, ParamType type_, nlohmann::json default_value_, std::string meaning_,
            Presence presence_ = Presence::kDefault, std::vector<std::string> choices_ = {})
      : name(std::move(name_)),
        type(type_),
        default_value(std::move(default_value_)),
        meaning(std::move(meaning_)),
        presence(presence_),
        choices(std::move(choices_)) {}

  std::string name;
  ParamType type = ParamType::kNumber;
  nlohmann::json default_value;  ///< filled in when the spec leaves it out (Presence::kDefault)
  std::string meaning;           ///< one line, for the instructor guide
  Presence presence = Presence::kDefault;
  std::vector<std::string> choices;  ///< allowed values of a string parameter (empty: any)
};

/// How many runs a kind reads (`run = "x"` or `runs = [...]`).
enum class RunArity { kNone, kOne, kOneOrMore, kTwo };

/// Fills result.status, observed, diagnosis, details. A check that cannot judge because a run it
/// reads failed reports that failure (status failed, or not attempted when the run stopped at a
/// skeleton stub) — never a pass.
using CheckFn = std::function<void(const CheckSpec& spec, GradeContext& ctx, CheckResult& result)>;
/// A kind's own consistency rules between its parameters and the lab's runs, checked when the spec
/// is loaded: returns the problem ("" if none), without file and line (the caller adds them).
using CheckRulesFn = std::function<std::string(const CheckSpec& spec, const LabSpec& lab)>;

/// A self-describing check kind.
struct CheckKind {
  std::string name;         ///< `kind = "..."` in the spec
  std::string passes_when;  ///< one line, for the instructor guide
  RunArity runs = RunArity::kOne;
  std::vector<ParamSpec> params;
  /// The default of the spec's `diagnosis`. Kinds that word each way of failing separately
  /// declare `diagnosis_<failure>` parameters instead; a spec's `diagnosis` then sets those it
  /// does not set itself.
  std::string diagnosis;
  CheckFn run;
  CheckRulesFn rules;  ///< optional
  /// RunArity::kTwo: what the two runs are, as the guide and spec errors name them ("oracle,
  /// candidate"); empty: one rank and N ranks.
  std::string run_roles = "";
  /// Its figure is a time or a throughput ratio, which a shared machine makes noisy: a failure is
  /// measured again (harness.cpp) and calibration takes the median of several (calibrate.cpp).
  bool timing = false;
};

/// The registered kinds (registry.cpp), in the order the instructor guide lists them.
const std::vector<const CheckKind*>& check_registry();
/// The kind named `name`, or nullptr.
const CheckKind* find_kind(const std::string& name);
/// Whether the kind named `kind` is a timing kind (CheckKind::timing: scaling, exposed_comm,
/// data_wait); the other kinds' figures are exact or statistical.
bool is_timing_kind(const std::string& kind);
/// The cores a timing measurement of check `c` needs: 2 (a rank and its loader or communication
/// thread), or the most ranks of the runs it reads.
int measurement_threads(const CheckSpec& c, const LabSpec& spec);
/// The named figures a check of kind `kind` records for a [[leaderboard]] (CheckResult::figures):
/// scaling: "efficiency", "unique_samples_per_s"; auc: "auc". Empty for the other kinds.
std::vector<std::string> leaderboard_figures(const std::string& kind);

/// Validates a parsed [[check]] against its kind and fills in every parameter's default, so a
/// check reads each declared parameter with the typed accessors of CheckSpec. Throws ConfigError
/// "file:line: check "name" (kind): ..." for an unknown kind, an unknown parameter (listing the
/// known ones), a wrong type, a missing required parameter, a value outside its choices, the wrong
/// number of runs or a broken kind rule. load_spec calls it for every check.
void validate_check(const LabSpec& lab, CheckSpec& spec);

/// A result for `spec` with its id, name, kind, exercise, visibility and max score filled in, not
/// yet judged (status failed, score 0).
CheckResult result_of(const CheckSpec& spec);

/// Runs one (validated) check. Whatever the student's outputs make the check throw becomes a
/// failed check saying they are missing or malformed; a ConfigError is rethrown.
CheckResult run_check(const CheckSpec& spec, GradeContext& ctx);

}  // namespace ddplab::grader

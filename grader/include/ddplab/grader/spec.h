// A lab's grading spec: the instructor-editable TOML file labs/<lab>/grade.toml that says which
// files a student may change, which runs to make, and which checks to score with what points and
// thresholds. Format reference: docs/instructor-guide.md ("The spec format").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddplab::grader {

/// Who sees a check's result on Gradescope (its `visibility` values).
enum class Visibility { kVisible, kHidden, kAfterDueDate, kAfterPublished };
Visibility parse_visibility(const std::string& s, const std::string& where);
const char* visibility_name(Visibility v);

/// One program run: `ranks` processes through the kit's launcher, on the data set the grader is
/// given. The grader adds --data, --report and (if save_model) --save-model itself.
struct RunSpec {
  std::string name;               ///< referenced by checks ("train", "ddp2")
  std::string program;            ///< "lab" (the lab's program, the default) or "reference" (ddp_train)
  int ranks = 1;
  std::vector<std::string> args;  ///< extra program arguments
  double timeout_s = 0;           ///< 0: [limits] run_timeout_s
  bool save_model = false;        ///< rank 0 saves the final model for the grader to evaluate
};

/// One scored check. Fields besides the common ones live in `params` (kind-specific; each check
/// plug-in validates its own and names the spec file and check on a bad value).
struct CheckSpec {
  std::string kind;       ///< plug-in name: unit_tests, run_ok, phases, consistency, coverage, ...
  std::string name;       ///< shown to students
  std::string exercise;   ///< the exercise it grades ("" = the whole lab)
  double points = 0;
  Visibility visibility = Visibility::kVisible;
  std::vector<std::string> runs;  ///< names of the runs it reads (`run` or `runs` in TOML)
  std::string diagnosis;  ///< the likely cause shown when it fails (plug-ins have defaults)
  nlohmann::json params;  ///< every other key of the [[check]] table
  int line = 0;           ///< line of the [[check]] in the spec, for error messages
};

struct LabSpec {
  std::string path;       ///< the spec file
  std::string id;         ///< "lab01"
  std::string title;
  std::string folder;     ///< "lab01_baseline": labs/<folder>, solutions/<folder>
  std::string program;    ///< CMake target of the lab program
  std::vector<std::string> manifest;   ///< the files a student may change (relative to the folder)
  std::vector<std::string> exercises;  ///< exercise ids, in order
  double memory_limit_mb = 4096;       ///< per rank, address space
  double run_timeout_s = 120;          ///< default per run
  double test_timeout_s = 120;         ///< per unit-test check
  std::vector<RunSpec> runs;
  std::vector<CheckSpec> checks;

  const RunSpec& run(const std::string& name) const;
  double max_score() const;
};

/// Parses and validates a spec; throws ddplab::ConfigError "file:line: ..." on any problem
/// (unknown keys, missing fields, a check naming an unknown run, duplicate names, bad values).
LabSpec load_spec(const std::string& path);

/// The specs of every lab in the kit (labs/*/grade.toml), sorted by id.
std::vector<LabSpec> load_all_specs(const std::string& source_root);

/// Finds a lab by id ("lab02", "02", "2") or folder name; throws ConfigError listing the labs.
LabSpec find_spec(const std::string& source_root, const std::string& lab);

}  // namespace ddplab::grader

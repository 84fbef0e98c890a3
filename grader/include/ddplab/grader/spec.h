// A lab's grading spec: the instructor-editable TOML file labs/<lab>/grade.toml that says which
// files a student may change, which runs to make, and which checks to score with what points and
// thresholds. Format reference: docs/instructor-guide.md ("The spec format").
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
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
  std::string name;  ///< referenced by checks ("train", "ddp2")
  int ranks = 1;
  std::vector<std::string> args;  ///< extra program arguments
  double timeout_s = 0;           ///< 0: [limits] run_timeout_s
  bool save_model = false;        ///< rank 0 saves the final model for the grader to evaluate
  /// The run is meant to stop with an error (a named failure the lab teaches): exiting non-zero on
  /// its own makes it usable for the checks that read it, finishing makes them fail.
  bool expect_failure = false;
  /// A data set of the run's own (an overlay's private test data), an absolute path; "" = the
  /// grading's --data.
  std::string data;
  /// Who starts its ranks (`backend` in TOML: auto, c10d or mpi, as `ddplab launch --backend`);
  /// "" = the lab's.
  std::string backend;
};

/// Thrown when a check reads a parameter its kind does not declare: a bug in the grader.
class UndeclaredParameter : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// One scored check. Its kind-specific parameters live in `params`, validated against the kind's
/// descriptor (checks.h) with every default filled in, and are read with the typed accessors.
struct CheckSpec {
  std::string id;        ///< stable, snake_case, unique in the lab: calibration and --check use it
  std::string kind;      ///< plug-in name: unit_tests, run_ok, phases, consistency, coverage, ...
  std::string name;      ///< shown to students (may be reworded; `id` stays)
  std::string exercise;  ///< the exercise it grades ("" = the whole lab)
  /// Other exercises whose student code this check also runs (`builds_on` in TOML): when a check
  /// of one of them fails too, this one's diagnosis says to fix that exercise first.
  std::vector<std::string> builds_on;
  double points = 0;
  Visibility visibility = Visibility::kVisible;
  std::vector<std::string> runs;  ///< names of the runs it reads (`run` or `runs` in TOML)
  std::string diagnosis;          ///< the likely cause shown when it fails (the kind's default if not given)
  bool diagnosis_given = false;   ///< `diagnosis` was written in the spec, not taken from the kind
  nlohmann::json params = nlohmann::json::object();  ///< every other key of the [[check]] table
  std::map<std::string, int> param_lines;            ///< line of each parameter the spec wrote
  int line = 0;                                      ///< line of the [[check]] in the spec, for error messages

  // Typed reads of declared parameters (UndeclaredParameter for any other).
  double number(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  bool flag(const std::string& key) const;
  std::string text(const std::string& key) const;
  std::vector<std::string> texts(const std::string& key) const;
};

/// A `[[leaderboard]]` entry: a figure of one graded check that Gradescope's leaderboard shows
/// (results.json), measured `ddplab grade --leaderboard N` times (the check's runs made again each
/// time) and given as the median of the N with their spread.
struct LeaderboardSpec {
  std::string name;            ///< the leaderboard's column ("unique samples/s on 2 ranks")
  std::string check;           ///< id of the check whose figure it is
  std::string figure;          ///< which of its figures (leaderboard_figures(kind), checks.h)
  std::string order = "desc";  ///< desc: the highest first; asc: the lowest first
  std::vector<std::string>
      gates;  ///< checks that must pass for the entry to count (`requires` in TOML: the AUC a figure is "at")
  int line = 0;
};

/// A lab's spec. For labs/<folder>/grade.toml, `id`, `folder` and `program` are the folder's name,
/// `manifest` the files in solutions/<folder>/ and `exercises` the ids of their STUDENT CODE
/// regions; a spec elsewhere (the grader's self-tests) declares them in [lab].
struct LabSpec {
  std::string path;  ///< the spec file
  std::string id;    ///< "lab01_baseline": the folder's name
  std::string title;
  std::string folder;                  ///< "lab01_baseline": labs/<folder>, solutions/<folder>
  std::string program;                 ///< CMake target of the lab program
  std::vector<std::string> manifest;   ///< the files a student may change (relative to the folder)
  std::vector<std::string> exercises;  ///< exercise ids, in order
  double memory_limit_mb = 4096;       ///< per rank, address space
  double run_timeout_s = 120;          ///< default per run
  double test_timeout_s = 120;         ///< per unit-test check
  /// [lab] backend: who starts the multi-rank runs and what their collectives go over — "auto"
  /// (Open MPI's shared memory through mpirun where the kit has it, else c10d), or pinned: "c10d"
  /// (the kit's launcher, Gloo on CPU) where the lesson is c10d's own (its rendezvous, its store's
  /// diagnosis of a hang), "mpi". `ddplab grade --backend` overrides "auto" only.
  std::string backend = "auto";
  std::vector<RunSpec> runs;
  std::vector<CheckSpec> checks;
  /// [forbidden]: per exercise id, the kit functions (or classes, namespaces) its code may not
  /// call, as qualified names ("ddplab::evaluate_model"). Found in the compiled student library's
  /// undefined symbols (rules.h); a call fails every check of that exercise.
  std::map<std::string, std::vector<std::string>> forbidden;
  std::vector<LeaderboardSpec> leaderboard;  ///< [[leaderboard]], in order

  const RunSpec& run(const std::string& name) const;
  double max_score() const;
};

/// Parses and validates a spec; throws ddplab::ConfigError "file:line: ..." on any problem
/// (unknown keys, missing fields, a check naming an unknown run, duplicate ids or names, bad
/// values, a check parameter its kind does not declare or of the wrong type, a lab folder whose
/// skeleton and solution do not hold the same files, a [forbidden] entry for an exercise the lab
/// does not have or that is no qualified C++ name).
LabSpec load_spec(const std::string& path);
/// load_spec with overlays: TOML files an instructor keeps outside the students' clone, each with
/// an `[overlay]` table naming the lab (`lab = "lab03_sampler"`) and [[run]] / [[check]] tables that
/// are added to the lab's (hidden checks, runs on private data: `data = "/path"`, relative paths
/// from the overlay's folder). Everything is validated as one spec: a duplicate run name or check
/// id, a check reading an unknown run, is an error naming the overlay's file and line. Throws
/// ConfigError if an overlay names another lab.
LabSpec load_spec(const std::string& path, const std::vector<std::string>& overlays);

/// The spec files of the kit: labs/*/grade.toml, sorted.
std::vector<std::string> spec_paths(const std::string& source_root);
/// The specs of every lab in the kit (labs/*/grade.toml), sorted by id.
std::vector<LabSpec> load_all_specs(const std::string& source_root);

/// Finds a lab by id ("lab03_sampler"), by an unambiguous prefix ("lab03", "03", "3") or by the
/// path of a grade.toml; throws ConfigError listing the labs.
LabSpec find_spec(const std::string& source_root, const std::string& lab,
                  const std::vector<std::string>& overlays = {});
/// The lab an overlay file is for (its [overlay] lab); throws ConfigError naming the file if it has none.
std::string overlay_lab(const std::string& overlay_path);

}  // namespace ddplab::grader

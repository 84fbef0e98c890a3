// The grader's harness: takes a submission (or a built tree), builds it, makes the spec's runs
// under the kit's launcher with timeouts and resource limits, scores the checks, and writes the
// results (terminal, Gradescope results.json, JUnit XML, HTML). Checks are plug-ins (checks.h);
// the harness owns building, launching, timeouts, parsing and scoring.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddplab/grader/spec.h"

namespace ddplab::grader {

struct Sandbox;  // sandbox.h

enum class Status { kPassed, kFailed, kNotAttempted, kError };
const char* status_name(Status s);

/// The outcome of one check.
struct CheckResult {
  std::string id, name, kind, exercise;
  Visibility visibility = Visibility::kVisible;
  double score = 0, max_score = 0;
  Status status = Status::kFailed;
  std::string observed;   ///< what the grader measured ("rank 0 and 1 digests differ at start")
  std::string diagnosis;  ///< the likely cause, in the course's terms ("" when passed)
  std::string details;    ///< longer output (test failures, log tails)
  double seconds = 0;
  std::optional<double> figure;  ///< the measured figure a calibration stores (AUC, efficiency)
  /// Named figures a leaderboard may show (leaderboard_figures of the kind, checks.h): a scaling
  /// check's "efficiency" and "unique_samples_per_s" (the N-rank run's).
  std::map<std::string, double> figures;
  /// The exercise ids this check's diagnosis already sends the student to first (builds_on), so
  /// that the rule that blames earlier exercises names each once: by id, never by its wording.
  std::vector<std::string> blamed;
  /// A failed timing check whose verdict no timing can change (lab 03's repeated samples,
  /// counted exactly): the harness does not measure it again.
  bool exact = false;
};

/// One rank's outcome of a run.
struct RankOutcome {
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  std::optional<nlohmann::json> report;  ///< the rank's run report, if it wrote a valid one
  std::string report_error;              ///< why there is no report (missing, garbage, wrong schema)
};

/// The outcome of one [[run]].
struct RunOutcome {
  std::string name;
  int ranks = 0;
  int exit_code = 0;  ///< the launcher's: 0, the first failing rank's status, 124 on timeout
  bool timed_out = false;
  int first_failed_rank = -1;
  std::string summary;  ///< the launcher's one-line account
  double seconds = 0;
  std::vector<RankOutcome> rank;
  std::vector<std::string> args;           ///< the program arguments used (sample counts capped to the data set)
  std::string dir;                         ///< reports, model and logs of this run
  std::string data_dir;                    ///< the data set it trained on (its spec's `data`, else --data)
  std::string model;                       ///< the saved model, if asked for and written
  std::string log_tail;                    ///< the last lines of output (for failed runs)
  std::vector<std::string> not_attempted;  ///< exercise ids the program reported as not attempted
  bool expect_failure = false;             ///< the spec's: the run is meant to stop with an error
  std::string backend;                     ///< how its ranks were started: "c10d" or "mpi" (LaunchResult)
  bool ok() const { return exit_code == 0 && !timed_out; }
};

/// Where things are and how to grade.
struct GradeOptions {
  std::string source_dir;                ///< the kit's source tree (grade.toml, skeletons)
  std::string build_dir;                 ///< a configured build of the kit (its bin/ holds the labs' programs)
  std::string tree;                      ///< which lab binaries to grade: "labs", "solutions" or "submission"
  std::string submission;                ///< a folder or .zip (tree "submission"); its manifest files are used
  std::string data_dir;                  ///< the data set runs train on
  std::string out_dir;                   ///< results of this lab go to out_dir/<lab id>/
  std::string calibration;               ///< calibration file (reference figures on this machine); "" = default
  std::vector<std::string> only_checks;  ///< grade only checks with one of these ids, or whose name contains one
  double run_timeout_s = 0;              ///< overrides the spec's [limits] run_timeout_s (0: the spec's)
  double test_timeout_s = 0;             ///< overrides the spec's [limits] test_timeout_s (0: the spec's)
  std::string sandbox = "auto";          ///< how student programs run: auto, required, bwrap, user or none (sandbox.h)
  /// `--backend`: who starts the multi-rank runs of labs and runs whose spec says "auto" (c10d,
  /// mpi or auto); a pinned lab or run keeps its own. "" = the spec's.
  std::string backend;
  /// What a submission must not read besides solutions/ and the calibration: the instructor's
  /// overlays and other submissions (a batch's folder). Hidden from its build; in the
  /// unprivileged-user sandbox, checked unreadable before grading.
  std::vector<std::string> private_paths;
  /// How often a failed timing check (scaling, exposed_comm, data_wait) is measured in all before
  /// it counts as failed: its runs are made again each time. calibrate() sets 1 and takes the
  /// median of several measurements itself (a retry on failure would keep only lucky figures).
  int timing_attempts = 3;
  /// Before measuring a failed timing check again, wait for the machine to give the runs their
  /// cores (contention.h), up to this long in all for one lab; 0: measure again at once.
  double quiet_wait_s = 120;
  /// Measure each [[leaderboard]] figure this many times (its check's runs made again for each
  /// after the first) and report the median and the spread; 0: no leaderboard.
  int leaderboard_repeats = 0;
  /// Run the unit-test checks' binaries built under the lab's sanitizer (AddressSanitizer and
  /// UBSan; ThreadSanitizer where the students write threads, lab 08): a memory error, undefined
  /// behaviour or a data race in the tested code fails the check with the sanitizer's report.
  bool sanitize = false;
  bool build = true;  ///< (re)build the lab's targets before grading
  bool color = false;
  bool quiet = false;  ///< no progress lines
};

/// Reference figures of this machine (the solutions' own results), used by checks that judge a
/// submission relative to the reference (AUC, scaling efficiency). Keyed by machine.
struct Calibration {
  std::string machine;
  nlohmann::json values = nlohmann::json::object();  ///< "<lab id>/<check id>" -> figure
  /// "<lab id>/<check id>" -> every measurement of a timing figure, whose median `values` holds
  /// (for the instructor to see the spread; grading reads only `values`).
  nlohmann::json measurements = nlohmann::json::object();
  /// load_calibration: the machine and data set the file was measured on ("" without a file);
  /// its values are used only when this equals `machine`.
  std::string file_machine;
  std::optional<double> get(const std::string& lab, const std::string& check_id) const;
};

/// The data set to grade on: `given`, else $DDPLAB_DATA, else <source_dir>/data/ctr-small, made
/// absolute. Throws ConfigError (saying how to generate one) if it holds no data set.
std::string resolve_data_dir(const std::string& given, const std::string& source_dir);
/// The build folder of the running program (<build>/bin/<program>).
std::string this_build_dir();

/// A stable description of this machine: CPU model and usable cores (not the host name, which a
/// container changes every time).
std::string machine_id();
/// What calibration figures are valid for: this machine (machine_id()) and the data set the runs
/// train on, by content (its meta.json), not by path.
std::string calibration_key(const std::string& data_dir, const std::string& backend = "");
/// What the multi-rank runs of a lab left at "auto" go over under `ddplab grade --backend
/// <backend>` ("" = auto): "mpi" where Open MPI's mpirun can start them here, else "c10d".
std::string multi_rank_backend(const std::string& backend);
std::string default_calibration_path(const std::string& build_dir);
/// The figures stored for `key` in `path` (none if the file is absent or holds another key).
Calibration load_calibration(const std::string& path, const std::string& key);
void save_calibration(const std::string& path, const Calibration& c);

/// The binaries of one lab in one tree.
struct LabBinaries {
  std::string program;
  std::string tests;
  std::string student;  ///< the static library compiled from the student files ("" if the build does not say)
  /// With GradeOptions::sanitize: `tests` is the sanitized binary, built with these -fsanitize
  /// values ("address,undefined" or "thread"); "" otherwise.
  std::string sanitizer;
};

/// Everything a check may look at.
struct GradeContext {
  const LabSpec& spec;
  const GradeOptions& options;
  const LabBinaries& bin;
  const Calibration& calibration;
  std::map<std::string, RunOutcome> runs;
  std::string work_dir;              ///< scratch for checks (test outputs)
  const Sandbox* sandbox = nullptr;  ///< how student programs run (nullptr: unconfined)
};

/// The graded lab.
/// One [[leaderboard]] entry as measured: the median of its measurements and their spread.
struct LeaderboardResult {
  std::string name, order;
  std::vector<double> values;  ///< every measurement, in order
  double median = 0;
  double spread = 0;     ///< max - min of the values
  bool counted = false;  ///< false: a required check failed, or the figure could not be measured
  std::string why;       ///< when not counted: why
};

/// The median and the spread (max - min) of r.values into r.
void summarize(LeaderboardResult& r);

struct LabResult {
  std::string lab, title;
  std::vector<LeaderboardResult> leaderboard;  ///< with --leaderboard N, the spec's entries
  std::vector<CheckResult> checks;
  std::vector<std::string> not_attempted;  ///< exercise ids not attempted
  double score = 0, max_score = 0;
  double seconds = 0;
  std::string build_error;  ///< set when the submission did not build (every check then fails)
  /// Set when the submission breaks a rule checked before building — edits outside the STUDENT
  /// CODE regions, "file:line: ..." per file (every check then fails, nothing is built or run).
  std::vector<std::string> rule_errors;
  std::string out_dir;
  /// Run name -> how its ranks were started ("c10d" or "mpi"), for the runs this grading made.
  std::map<std::string, std::string> run_backends;
};

/// The run's arguments with --train-samples/--eval-samples capped to the data set in `data_dir`.
std::vector<std::string> effective_args(const RunSpec& run, const std::string& data_dir);

/// Grades one lab. Never throws for anything the student's code does (crash, hang, garbage):
/// those are failed checks. Throws ConfigError for a bad spec or options, Error if the grader
/// itself cannot work (no build directory, cannot write results).
LabResult grade_lab(const LabSpec& spec, const GradeOptions& options);

/// A failed check that `builds_on` other exercises, one of whose checks failed (or was not
/// attempted) too, gets a diagnosis that starts by sending the student to that exercise first.
void blame_earlier_exercises(const LabSpec& spec, std::vector<CheckResult>& checks);

/// The spec as graded with `options`: only the selected checks and the runs they read, limits
/// overridden. Throws ConfigError if the selection matches no check.
LabSpec effective_spec(const LabSpec& spec, const GradeOptions& options);

/// Copies the manifest files of `spec` from `submission` (folder or .zip; found at the top, in
/// <folder>/ or at any depth by file name) into `dest`; files it lacks come from the skeleton.
/// Returns a line per file saying where it came from. Throws Error for an unreadable zip.
std::vector<std::string> collect_submission(const LabSpec& spec, const std::string& source_dir,
                                            const std::string& submission, const std::string& dest);

// ---- outputs (outputs.cpp) ----

/// Gradescope's results.json for one or more labs (scores summed).
nlohmann::json gradescope_results(const std::vector<LabResult>& labs);
/// "unique samples/s on 2 ranks: 1.234e+04 (median of 3 measurement(s): ...; spread ...)", or why
/// the entry does not count.
std::string leaderboard_text(const LeaderboardResult& l);
/// JUnit XML: one testsuite per lab, one testcase per check.
std::string junit_xml(const std::vector<LabResult>& labs);
/// A self-contained HTML report.
std::string html_report(const std::vector<LabResult>& labs);
/// The terminal summary (ANSI colours if `color`).
std::string terminal_summary(const std::vector<LabResult>& labs, bool color);
/// Writes results.json, junit.xml and report.html into `dir` (each atomically).
void write_outputs(const std::vector<LabResult>& labs, const std::string& dir);

}  // namespace ddplab::grader

// The grading harness's parts, one file per job; grade_lab (harness.cpp) drives them in order:
//   intake.cpp           the submission (or a tree) in: region rule first, then built; its binaries
//   sandbox_policy.cpp   what a lab's graded programs may see, and naming a hidden file they reached for
//   runs.cpp             a [[run]] made under the launcher; a failed timing check measured again
//   exercise_status.cpp  what a check says of its exercise: forbidden calls, not attempted, half done
//   calibration.cpp      this machine's reference figures, keyed, stored and loaded
// Internal to the grader library: tests reach these through grade.h's public functions.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddplab/grader/grade.h"
#include "ddplab/grader/regions.h"
#include "ddplab/grader/rules.h"
#include "ddplab/grader/sandbox.h"

namespace ddplab::grader::parts {

/// Progress messages of one lab's grading ("grade <lab>: ..." unless --quiet).
using Say = std::function<void(const std::string&)>;

// ---- files and helper commands (intake.cpp) ----

/// The whole file; throws Error naming it if it cannot be read.
std::string read_text(const std::filesystem::path& path);
/// The last `n` lines of `text`, each ending with a newline.
std::string tail_lines(const std::string& text, size_t n);
/// Runs a helper command (cmake, unzip) to completion, its output collected; returns its exit code.
int run_command(const std::vector<std::string>& cmd, double timeout_s, std::string& output);

// ---- intake (intake.cpp) ----

/// Reads <build>/grader/targets.json (written by CMake): the binaries of each lab per tree.
nlohmann::json load_targets(const std::string& build_dir);

/// What intake hands to the runs: the binaries to grade, the graded files' regions as read where
/// they are graded, and the calls the spec forbids that the student library makes.
struct Intake {
  LabBinaries bin;
  std::vector<MarkedFile> graded_files;
  std::vector<ForbiddenCall> forbidden;
  /// When result.rule_errors is set: whose text to put back (", as in a submission: restore the kit's").
  std::string restore;
};

/// Takes o.tree in: a submission is laid over the build's one slot (locked), its region rule
/// checked, then built sandboxed and its binaries copied to <out>/bin; a student's tree is checked
/// against the solution and built when o.build. Sets result.rule_errors (nothing built) or
/// result.build_error (nothing to run) when grading cannot go on.
Intake take_in(const LabSpec& spec, const GradeOptions& o, const nlohmann::json& targets, const Sandbox& sandbox,
               const std::filesystem::path& out, LabResult& result, const Say& say);

// ---- sandbox policy (sandbox_policy.cpp) ----

/// The sandbox a lab's programs run in: the data sets (the options' and any run's own) and the
/// kit's libraries readable; as another uid, the solutions, the calibration, the instructor's
/// private paths and the reference binaries unreadable. Throws for --sandbox required/bwrap/user
/// on a machine that cannot provide it.
Sandbox lab_sandbox(const LabSpec& spec, const GradeOptions& o, const nlohmann::json& targets,
                    const std::string& calibration_path);
/// A failed check whose program reached for a file the sandbox hides says so first.
void name_sandbox_cause(const Sandbox& sandbox, const GradeOptions& o, const LabBinaries& bin, CheckResult& r);

// ---- runs (runs.cpp) ----

/// Makes `run` under the kit's launcher in `dir` (emptied first): its ranks' reports read, its
/// output kept in output.txt, per-rank logs kept only when it failed. Never throws for what the
/// program does.
RunOutcome make_run(const RunSpec& run, GradeContext& ctx, const std::filesystem::path& dir);

/// Runs check `c`; a failed timing check is measured again — its runs re-made in `runs_dir`, after
/// waiting (from `quiet_wait_left`, shared by the lab's checks) for a machine that gives them
/// their cores — up to o.timing_attempts in all. The first passing attempt counts, else the last;
/// the observation says how many were taken. The threshold never moves.
CheckResult measure_check(const CheckSpec& c, GradeContext& ctx, const std::filesystem::path& runs_dir,
                          double& quiet_wait_left, const Say& say);
/// The [[leaderboard]] entries measured o.leaderboard_repeats times each: the graded check's
/// figure first, then, per further measurement, the check's runs made again and the check graded
/// again (once for all the entries of one check). An entry is not counted (with the reason) when
/// a check it requires did not pass or its figure is missing.
std::vector<LeaderboardResult> measure_leaderboard(const std::vector<LeaderboardSpec>& entries,
                                                   const std::vector<CheckResult>& graded, GradeContext& ctx,
                                                   const std::filesystem::path& runs_dir, const Say& say);

// ---- exercise status (exercise_status.cpp) ----

using Progress = std::map<std::string, ExerciseProgress>;

/// The progress of `exercise` if any of its regions was edited, else nullptr.
const ExerciseProgress* edited(const Progress& progress, const std::string& exercise);
/// Whether `exercise` has regions in the graded files and every one of them is still the
/// skeleton's stub (false for "" and for an exercise the files do not show: unknown is not untouched).
bool untouched(const Progress& progress, const std::string& exercise);
/// Whether no exercise of the graded files is begun (every one untouched; false when none is known).
bool nothing_begun(const Progress& progress);
/// Whether `c` is graded "not attempted" without running anything: its exercise is untouched, or
/// it has none and no exercise of the lab is begun.
bool not_begun_check(const Progress& progress, const CheckSpec& c);
/// The result of such a check: "not attempted", nothing measured.
CheckResult not_begun(const CheckSpec& c);
/// The runs of `runs` that `checks` use, with the earlier runs those name in their arguments
/// ({run:NAME}), in the spec's order.
std::vector<RunSpec> runs_used_by(const std::vector<RunSpec>& runs, const std::vector<CheckSpec>& checks);
/// Fails a check of an exercise that calls a function the spec forbids it, whatever it measured.
void apply_forbidden(const std::vector<ForbiddenCall>& forbidden, CheckResult& r);
/// A "not attempted" check of an exercise that was edited is a failure: of the exercise it builds
/// on that still holds stubs, or of its own half-done regions.
void settle_attempt(const CheckSpec& c, const Progress& progress, CheckResult& r);
/// Adds `exercise` to `list` once.
void add_once(std::vector<std::string>& list, const std::string& exercise);

}  // namespace ddplab::grader::parts

// The grading jobs `ddplab grade` runs besides grading one tree or submission: a folder of
// submissions into a gradebook, and the calibration of the reference figures on this machine.
// Library code, so the CLI is options -> one call and the tests need no argv.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ddplab/grader/contention.h"
#include "ddplab/grader/grade.h"

namespace ddplab::grader {

/// Grades every lab of `specs` with `options`, in order.
std::vector<LabResult> grade_labs(const std::vector<LabSpec>& specs, const GradeOptions& options);

/// How a batch or a calibration grades one set of labs (grade_labs; the tests pass a stand-in).
using GradeFn = std::function<std::vector<LabResult>(const std::vector<LabSpec>&, const GradeOptions&)>;
/// Where progress lines go ("== alice", the summaries, warnings).
using PrintFn = std::function<void(const std::string&)>;

/// One gradebook row: one student's result in one lab.
struct GradebookRow {
  std::string student, lab;
  double score = 0, max_score = 0;
  std::vector<std::string> not_attempted;  ///< exercise ids
  bool build_error = false;                ///< the submission did not compile
  std::string error;                       ///< why it could not be graded at all (a corrupt zip) or was rejected
                                           ///< ("rejected: file:line: edited outside ..."), else ""
};

struct Gradebook {
  std::vector<GradebookRow> rows;
  /// student,lab,score,max_score,not_attempted,build_error — one line per row; fields with commas,
  /// quotes or newlines quoted (RFC 4180); not_attempted space-separated; build_error "yes", or the
  /// error of a submission that could not be graded.
  std::string csv() const;
};

/// The submissions of a batch folder: its sub-folders and .zip files, sorted by name. Throws
/// ConfigError for a missing folder or one with no submission in it.
std::vector<std::string> batch_submissions(const std::string& dir);
/// A submission's student: its folder's name, or the zip's name without ".zip".
std::string student_of(const std::string& submission);

/// Grades every submission of `dir` as tree "submission": each student's results go to
/// options.out_dir/<student>/, and options.out_dir/gradebook.csv gets one row per student and
/// lab. A submission that cannot be graded (a corrupt zip) gets rows carrying its error and the
/// batch goes on; a ConfigError (a spec or option problem) stops it.
Gradebook grade_batch(const std::vector<LabSpec>& specs, GradeOptions options, const std::string& dir,
                      const PrintFn& print, const GradeFn& grade = grade_labs);

/// Stores each figure the checks of `result` measured under "<lab id>/<check id>".
void record_figures(Calibration& calibration, const LabResult& result);

/// The ids of the checks of `spec` that judge relative to the reference (their kind has a
/// `reference` parameter: auc, scaling, data_wait): what calibration measures.
std::vector<std::string> calibrated_checks(const LabSpec& spec);
/// What the calibration file at `path` lacks for grading `specs` on this machine and data set
/// (`key`, calibration_key()): one line per missing "<lab>/<check>", or one line saying the file is
/// absent or was measured on another machine or data set. Empty: it is current.
std::vector<std::string> calibration_gaps(const std::vector<LabSpec>& specs, const std::string& path,
                                          const std::string& key);

/// Grades the reference solutions (tree "solutions", results under options.out_dir/calibration)
/// on their calibrated checks only (only the runs those read are made; a lab without one is
/// skipped) and writes their figures for this machine and data set to `path`, keeping other labs'
/// figures; returns the calibration. A timing figure (is_timing_kind) is the median of three
/// measurements, each graded without re-measuring on failure, and all three are stored too.
/// Warns through `print` when a solution fails one of them here.
/// Waits until the machine gives `threads` cores to a measurement, for at most `max_wait_s`;
/// returns what it found (the default: contention.h's wait_for_quiet_cores).
using QuietFn = std::function<QuietWait(int threads, double max_wait_s, const PrintFn& say)>;

/// Each measurement of a timing figure first waits (quiet, up to options.quiet_wait_s in all for
/// a lab) for the machine to give its runs their cores, as a grading does before it measures a
/// failed timing check again.
Calibration calibrate(const std::vector<LabSpec>& specs, GradeOptions options, const std::string& path,
                      const PrintFn& print, const GradeFn& grade = grade_labs,
                      const QuietFn& quiet = wait_for_quiet_cores);

}  // namespace ddplab::grader

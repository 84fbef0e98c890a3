// Calibration: the reference solutions graded on this machine and data set, their measured
// figures stored for the relative checks (auc, scaling) of every later grading.
#include <filesystem>

#include <fmt/format.h>

#include "ddplab/grader/batch.h"

namespace fs = std::filesystem;

namespace ddplab::grader {

void record_figures(Calibration& calibration, const LabResult& result) {
  for (const auto& c : result.checks) {
    if (c.figure) calibration.values[result.lab + "/" + c.id] = *c.figure;
  }
}

Calibration calibrate(const std::vector<LabSpec>& specs, GradeOptions options, const std::string& path,
                      const PrintFn& print, const GradeFn& grade) {
  options.tree = "solutions";
  options.submission.clear();
  options.out_dir = (fs::path(options.out_dir) / "calibration").string();
  Calibration cal = load_calibration(path, calibration_key(options.data_dir));
  print(fmt::format("calibrating on {}\n", cal.machine));
  for (const auto& s : specs) {
    for (const auto& r : grade({s}, options)) {
      record_figures(cal, r);
      for (const auto& c : r.checks) {
        if (c.figure) print(fmt::format("  {}/{} ({}): {:.4f}\n", r.lab, c.id, c.name, *c.figure));
      }
      if (r.score < r.max_score) {
        print(fmt::format("warning: the reference solution of {} scores {} / {} on this machine:\n{}", r.lab, r.score,
                          r.max_score, terminal_summary({r}, false)));
      }
    }
  }
  save_calibration(path, cal);
  print(fmt::format("calibration written to {}\n", path));
  return cal;
}

}  // namespace ddplab::grader

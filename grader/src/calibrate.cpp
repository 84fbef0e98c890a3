// Calibration: the reference solutions graded on this machine and data set, their measured
// figures stored for the relative checks (auc, scaling, data_wait) of every later grading. Only
// those checks are graded (and only the runs they read made): the others' figures are never read.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "ddplab/grader/batch.h"
#include "ddplab/grader/checks.h"

namespace fs = std::filesystem;

namespace ddplab::grader {

void record_figures(Calibration& calibration, const LabResult& result) {
  for (const auto& c : result.checks) {
    if (c.figure) calibration.values[result.lab + "/" + c.id] = *c.figure;
  }
}

std::vector<std::string> calibrated_checks(const LabSpec& spec) {
  std::vector<std::string> ids;
  for (const auto& c : spec.checks) {
    const CheckKind* kind = find_kind(c.kind);
    if (kind && std::any_of(kind->params.begin(), kind->params.end(),
                            [](const ParamSpec& p) { return p.name == "reference"; })) {
      ids.push_back(c.id);
    }
  }
  return ids;
}

std::vector<std::string> calibration_gaps(const std::vector<LabSpec>& specs, const std::string& path,
                                          const std::string& key) {
  if (!fs::exists(path)) return {fmt::format("{} does not exist", path)};
  const Calibration cal = load_calibration(path, key);
  if (cal.file_machine != key) {
    return {fmt::format("{} was measured on another machine or data set ({}; here: {})", path, cal.file_machine, key)};
  }
  std::vector<std::string> gaps;
  for (const auto& s : specs) {
    for (const auto& id : calibrated_checks(s)) {
      if (!cal.get(s.id, id)) gaps.push_back(fmt::format("{} holds no figure for {}/{}", path, s.id, id));
    }
  }
  return gaps;
}

Calibration calibrate(const std::vector<LabSpec>& specs, GradeOptions options, const std::string& path,
                      const PrintFn& print, const GradeFn& grade) {
  options.tree = "solutions";
  options.submission.clear();
  options.out_dir = (fs::path(options.out_dir) / "calibration").string();
  Calibration cal = load_calibration(path, calibration_key(options.data_dir));
  print(fmt::format("calibrating on {}\n", cal.machine));
  for (const auto& s : specs) {
    GradeOptions go = options;
    go.only_checks = calibrated_checks(s);
    if (go.only_checks.empty()) {
      print(fmt::format("  {}: no check is relative to the reference: nothing to calibrate\n", s.id));
      continue;
    }
    for (const auto& r : grade({s}, go)) {
      record_figures(cal, r);
      for (const auto& c : r.checks) {
        if (c.figure) print(fmt::format("  {}/{} ({}): {:.4f}\n", r.lab, c.id, c.name, *c.figure));
      }
      if (r.score < r.max_score) {
        print(fmt::format("warning: the reference solution of {} scores {} / {} on its calibrated checks here:\n{}",
                          r.lab, r.score, r.max_score, terminal_summary({r}, false)));
      }
    }
  }
  save_calibration(path, cal);
  print(fmt::format("calibration written to {}\n", path));
  return cal;
}

}  // namespace ddplab::grader

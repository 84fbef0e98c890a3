// Calibration: the reference solutions graded on this machine and data set, their measured
// figures stored for the relative checks (auc, scaling, data_wait) of every later grading. Only
// those checks are graded (and only the runs they read made): the others' figures are never read.
// A timing figure (scaling, data_wait) is the median of several measurements.
#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/grader/batch.h"
#include "ddplab/grader/checks.h"
#include "ddplab/grader/contention.h"

namespace fs = std::filesystem;

namespace ddplab::grader {

namespace {
/// How many times calibration measures each timing figure (odd: the median is one of them).
constexpr int kCalibrationMeasurements = 3;
}  // namespace

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
                      const PrintFn& print, const GradeFn& grade, const QuietFn& quiet) {
  options.tree = "solutions";
  options.submission.clear();
  options.out_dir = (fs::path(options.out_dir) / "calibration").string();
  // Measured once each, as they come: re-measuring a figure below the old calibration's would
  // keep only the lucky ones and ratchet the reference up.
  options.timing_attempts = 1;
  Calibration cal = load_calibration(path, calibration_key(options.data_dir, options.backend));
  print(fmt::format("calibrating on {}\n", cal.machine));
  for (const auto& s : specs) {
    GradeOptions go = options;
    go.only_checks = calibrated_checks(s);
    if (go.only_checks.empty()) {
      print(fmt::format("  {}: no check is relative to the reference: nothing to calibrate\n", s.id));
      continue;
    }
    // Like a grading's re-measurement, each measurement of a timing figure waits (up to
    // --quiet-wait in all for the lab) until the machine gives the runs their cores: a reference
    // measured while a neighbour holds a core would set every later grading's bar too low.
    int threads = 0;
    for (const auto& c : s.checks) {
      if (is_timing_kind(c.kind) &&
          std::find(go.only_checks.begin(), go.only_checks.end(), c.id) != go.only_checks.end()) {
        threads = std::max(threads, measurement_threads(c, s));
      }
    }
    double quiet_left = options.quiet_wait_s;
    auto wait_quiet = [&](int measurement) {
      if (threads < 2 || quiet_left <= 0 || !quiet) return;
      const QuietWait w = quiet(threads, quiet_left, [&](const std::string& m) { print(fmt::format("  {}\n", m)); });
      quiet_left -= w.waited_s;
      if (!w.quiet) {
        print(fmt::format("  {}: measurement {} on a busy machine: {:.1f} of {} cores after waiting {:.0f} s\n", s.id,
                          measurement, w.capacity, threads, w.waited_s));
      } else if (w.waited_s > 0) {
        print(fmt::format("  {}: waited {:.0f} s for a quiet machine before measurement {}\n", s.id, w.waited_s,
                          measurement));
      }
    };
    wait_quiet(1);
    const auto results = grade({s}, go);
    // A timing figure is the median of kCalibrationMeasurements: one measurement on a shared
    // machine can land in a neighbour's burst or a quiet spell (seen on the CI's 2-core VM: lab
    // 09's scaling 0.627 once, 0.48-0.50 in the three attempts of the grading that followed),
    // and a lucky reference would fail every correct submission graded against it.
    GradeOptions again = go;
    again.only_checks.clear();
    for (const auto& c : s.checks) {
      if (is_timing_kind(c.kind) &&
          std::find(go.only_checks.begin(), go.only_checks.end(), c.id) != go.only_checks.end()) {
        again.only_checks.push_back(c.id);
      }
    }
    std::map<std::string, std::vector<double>> measured;  // check id -> figures
    auto collect = [&](const std::vector<LabResult>& rs) {
      for (const auto& r : rs) {
        for (const auto& c : r.checks) {
          if (c.figure && is_timing_kind(c.kind)) measured[c.id].push_back(*c.figure);
        }
      }
    };
    collect(results);
    for (int k = 1; k < kCalibrationMeasurements && !again.only_checks.empty(); ++k) {
      wait_quiet(k + 1);
      collect(grade({s}, again));
    }
    for (const auto& r : results) {
      record_figures(cal, r);
      for (const auto& c : r.checks) {
        if (!c.figure) continue;
        const auto m = measured.find(c.id);
        if (m == measured.end() || m->second.size() < 2) {
          print(fmt::format("  {}/{} ({}): {:.4f}\n", r.lab, c.id, c.name, *c.figure));
          continue;
        }
        std::vector<double> sorted = m->second;
        std::sort(sorted.begin(), sorted.end());
        // The middle one; of two (a round whose run failed gives no figure), the lower: the bar
        // it sets errs towards passing a correct submission.
        const double median = sorted[(sorted.size() - 1) / 2];
        const std::string key = r.lab + "/" + c.id;
        cal.values[key] = median;
        cal.measurements[key] = m->second;
        print(fmt::format("  {} ({}): {:.4f}, the median of {} measurements: {:.4f}\n", key, c.name, median,
                          m->second.size(), fmt::join(m->second, ", ")));
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

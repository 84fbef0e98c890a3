// Check kind `exposed_comm`: overlapping communication with backward hides it. From each rank's
// report section `sync`: the candidate's exposed communication per step (time the step waits for
// collectives after backward, median over steps, worst rank) against a baseline run's that waits
// until backward is over; optionally, that buckets start while backward still runs.
#include <algorithm>
#include <cmath>

#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

/// The worst rank's median exposed communication per step of a run, in ms.
double exposed_ms(const RunOutcome& run) {
  const auto reps = reports(run);
  double worst = 0;
  for (size_t k = 0; k < reps.size(); ++k) {
    const auto v = field<double>(reps[k], "sync.steps.exposed_comm_ms_median", static_cast<int>(k));
    if (!(v >= 0) || !std::isfinite(v)) {
      throw Error(fmt::format("run '{}', rank {}'s report: sync.steps.exposed_comm_ms_median is {}", run.name, k, v));
    }
    worst = std::max(worst, v);
  }
  return worst;
}

void check_exposed_comm(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& baseline = the_run(c, ctx, 0);
  const auto& candidate = the_run(c, ctx, 1);
  const int64_t min_launched = c.integer("min_launched_in_backward");
  std::string launched_obs;
  if (min_launched > 0) {
    const auto reps = reports(candidate);
    double least = 0;
    for (size_t k = 0; k < reps.size(); ++k) {
      const auto n = field<double>(reps[k], "sync.steps.launched_in_backward_median", static_cast<int>(k));
      if (n < static_cast<double>(min_launched)) {
        fail(r,
             fmt::format("run '{}', rank {}: {:g} bucket(s) launched during backward (median over steps); at least {} "
                         "required",
                         candidate.name, k, n, min_launched),
             c.text("diagnosis_backward"));
        return;
      }
      least = k == 0 ? n : std::min(least, n);
    }
    launched_obs = fmt::format("; at least {:g} bucket(s) launched during backward on every rank", least);
  }
  const double base = exposed_ms(baseline), cand = exposed_ms(candidate);
  const double max_ratio = c.number("max_ratio");
  const std::string ratio = base > 0 ? fmt::format("{:.2f}", cand / base) : (cand > 0 ? "inf" : "0/0");
  const std::string obs = fmt::format(
      "exposed communication per step (median, slowest rank): {:.1f} ms in run '{}', {:.1f} ms in the baseline '{}': "
      "ratio {}, at most {:.2f} allowed{}",
      cand, candidate.name, base, baseline.name, ratio, max_ratio, launched_obs);
  if (base <= 0) {
    // The baseline waits for every collective after backward: on 2 or more ranks that takes time.
    // None measured means the comm phase holds none of its waiting, and 0 against 0 would pass
    // any candidate: nothing is compared.
    fail(r, obs + "; the baseline exposes none, so nothing is compared", c.text("diagnosis_baseline"));
  } else if (cand <= max_ratio * base) {
    pass(r, obs);
  } else {
    fail(r, obs, c.text("diagnosis_exposed"));
  }
}

}  // namespace

const CheckKind kExposedComm =
    {"exposed_comm",
     "the baseline exposes some communication, and the candidate's exposed communication per step (median, slowest "
     "rank) <= `max_ratio` x the baseline's; with "
     "`min_launched_in_backward`, that many buckets start during backward on every rank",
     RunArity::kTwo,
     {{"max_ratio", ParamType::kNumber, 1.0, "largest allowed candidate / baseline exposed communication"},
      {"min_launched_in_backward", ParamType::kInteger, 0,
       "fewest buckets every candidate rank must launch during backward, median over steps (0: not checked)"},
      {"diagnosis_exposed", ParamType::kString,
       "overlapping exposes more communication than waiting until the end of backward: buckets launched late (only "
       "at finish) or serialised",
       "the likely cause of a ratio above max_ratio"},
      {"diagnosis_backward", ParamType::kString,
       "no bucket starts during backward: the collectives are launched only in finish()",
       "the likely cause of fewer buckets launched during backward than min_launched_in_backward"},
      {"diagnosis_baseline", ParamType::kString,
       "the baseline run exposes no communication at all: its collectives are not waited for inside finish(), where "
       "the step times the comm phase, so there is nothing to compare the candidate with",
       "the likely cause of a baseline whose exposed communication is 0"}},
     "",
     check_exposed_comm,
     [](const CheckSpec& c, const LabSpec&) -> std::string {
       if (!(c.number("max_ratio") > 0)) return "max_ratio must be > 0";
       if (c.integer("min_launched_in_backward") < 0) return "min_launched_in_backward must be >= 0";
       return "";
     },
     "baseline, candidate",
     true};

}  // namespace ddplab::grader::checks

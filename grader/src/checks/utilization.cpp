// Check kind `utilization`: the slowest rank's busy fraction (compute / wall, from the phase
// timers) is at least `min_busy` — the device does not wait for data or communication.
#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

void check_utilization(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto reps = reports(the_run(c, ctx));
  double worst = 1.0;
  int worst_rank = 0;
  for (size_t k = 0; k < reps.size(); ++k) {
    const double wall = field<double>(reps[k], "phases.wall", static_cast<int>(k));
    const double busy = wall > 0 ? field<double>(reps[k], "phases.compute", static_cast<int>(k)) / wall : 0;
    if (busy < worst) worst = busy, worst_rank = static_cast<int>(k);
  }
  r.figure = worst;
  const double min_busy = c.number("min_busy");
  const std::string obs = fmt::format(
      "busy fraction (compute / wall from the phase timers) {:.1f}% on rank {} (lowest), "
      "required >= {:.0f}%",
      100 * worst, worst_rank, 100 * min_busy);
  if (worst >= min_busy) {
    pass(r, obs);
  } else {
    fail(r, obs, c.diagnosis);
  }
}

}  // namespace

const CheckKind kUtilization = {"utilization",
                                "compute / wall (phase timers) >= `min_busy` on the slowest rank",
                                RunArity::kOne,
                                {{"min_busy", ParamType::kNumber, 0.5,
                                  "the lowest busy fraction (compute / wall) allowed, 0..1"}},
                                "the device idles: waiting for data (no prefetch) or for communication",
                                check_utilization,
                                [](const CheckSpec& c, const LabSpec&) -> std::string {
                                  return c.number("min_busy") < 0 || c.number("min_busy") > 1
                                             ? "min_busy must be in 0..1"
                                             : "";
                                }};

}  // namespace ddplab::grader::checks

// Check kind `utilization`: the slowest rank's busy fraction is at least `min_busy` — the device
// does not wait for data or communication. On CUDA the runs sample NVML (the report's
// "utilization" section, source "nvml"); elsewhere the fraction is compute / wall from the phase
// timers. The output names the source.
#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

/// A rank's busy fraction and where it came from: NVML's median GPU utilization when the run
/// sampled it (CUDA), else compute / wall from the phase timers.
struct Busy {
  double fraction = 0;
  bool nvml = false;
  int64_t samples = 0;
};

Busy busy_of(const json& rep, int rank) {
  Busy b;
  if (rep.contains("utilization") && rep["utilization"].is_object() &&
      rep["utilization"].value("source", "") == "nvml") {
    b.fraction = field<double>(rep, "utilization.gpu_median", rank);
    b.samples = field<int64_t>(rep, "utilization.nvml.samples", rank);
    b.nvml = true;
    return b;
  }
  const double wall = field<double>(rep, "phases.wall", rank);
  b.fraction = wall > 0 ? field<double>(rep, "phases.compute", rank) / wall : 0;
  return b;
}

void check_utilization(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto reps = reports(the_run(c, ctx));
  if (!phase_timers_consistent(reps, r)) return;
  Busy worst{1.0, false, 0};
  int worst_rank = 0;
  int nvml_ranks = 0;
  for (size_t k = 0; k < reps.size(); ++k) {
    const Busy b = busy_of(reps[k], static_cast<int>(k));
    nvml_ranks += b.nvml ? 1 : 0;
    if (k == 0 || b.fraction < worst.fraction) worst = b, worst_rank = static_cast<int>(k);
  }
  r.figure = worst.fraction;
  const double min_busy = c.number("min_busy");
  const std::string source = worst.nvml ? fmt::format("GPU utilization (NVML, median of {} samples)", worst.samples)
                                        : "busy fraction (compute / wall from the phase timers)";
  std::string obs = fmt::format("{} {:.1f}% on rank {} (lowest), required >= {:.0f}%", source, 100 * worst.fraction,
                                worst_rank, 100 * min_busy);
  if (nvml_ranks > 0 && nvml_ranks < static_cast<int>(reps.size())) {
    obs += fmt::format("; {} of {} ranks had NVML, the others the phase timers", nvml_ranks, reps.size());
  }
  if (worst.fraction >= min_busy) {
    pass(r, obs);
  } else {
    fail(r, obs, c.diagnosis);
  }
}

}  // namespace

const CheckKind kUtilization =
    {"utilization",
     "NVML's median GPU utilization (CUDA) or compute / wall (phase timers) >= `min_busy` on the slowest rank",
     RunArity::kOne,
     {{"min_busy", ParamType::kNumber, 0.5, "the lowest busy fraction (compute / wall) allowed, 0..1"}},
     "the device idles: waiting for data (no prefetch) or for communication",
     check_utilization,
     [](const CheckSpec& c, const LabSpec&) -> std::string {
       return c.number("min_busy") < 0 || c.number("min_busy") > 1 ? "min_busy must be in 0..1" : "";
     }};

}  // namespace ddplab::grader::checks

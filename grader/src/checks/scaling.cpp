// Check kind `scaling`: unique samples per second from 1 to N ranks, as an efficiency, against the
// reference solution's efficiency on this machine (or the spec's `reference`).
#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

void check_scaling(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& one = the_run(c, ctx, 0);
  const auto& many = the_run(c, ctx, 1);
  const UniqueRate u1 = unique_rate(one, train_size(ctx, c.runs[0]));
  const UniqueRate uN = unique_rate(many, train_size(ctx, c.runs[1]));
  const double eff = u1.rate > 0 ? uN.rate / (u1.rate * many.ranks) : 0;
  r.figure = eff;
  const auto [ref, source] = reference_figure(c, ctx);
  const double rel = c.number("min_relative");
  // Samples the ranks processed more than once across the job: work that the efficiency does not
  // count, so a failure here is the overlap, whatever the machine.
  const uint64_t repeated = uN.processed > uN.unique ? uN.processed - uN.unique : 0;
  const std::string counted =
      fmt::format("{} run: {} distinct of {} samples processed{}", c.runs[1], uN.unique, uN.processed,
                  uN.exact ? "" : " (at most: the reports carry no sample bitmaps)");
  const std::string obs = fmt::format(
      "unique samples/s: {:.0f} on 1 rank, {:.0f} on {} ranks -> efficiency {:.3f}; "
      "reference {:.3f} from {}; required >= {:.0f}% of it; {}",
      u1.rate, uN.rate, many.ranks, eff, ref, source, 100 * rel, counted);
  if (eff >= ref * rel) {
    pass(r, obs);
  } else if (uN.exact && !uN.replicated && repeated * 20 > uN.processed) {
    fail(r, obs,
         fmt::format("{:.0f}% of the samples the ranks processed were repeats of samples another rank (or the same "
                     "rank) already trained on in that epoch: work that does not count; the shards overlap or "
                     "the ranks repeat each other's work",
                     100.0 * static_cast<double>(repeated) / static_cast<double>(uN.processed)));
  } else {
    fail(r, obs, c.diagnosis);
  }
}

}  // namespace

const CheckKind kScaling =
    {"scaling",
     "unique samples/s efficiency (distinct samples from the ranks' sample bitmaps, else their digests, over the "
     "slowest rank's wall time) >= "
     "`min_relative` x the reference's",
     RunArity::kTwo,
     {{"min_relative", ParamType::kNumber, 0.8, "the share of the reference's efficiency required"},
      {"reference", ParamType::kNumber, nullptr, "the reference efficiency where this machine is not calibrated",
       Presence::kOptional}},
     "more ranks do not process more unique samples: ranks repeating each other's work (no sampler), or communication "
     "that dominates the step",
     check_scaling,
     [](const CheckSpec& c, const LabSpec& lab) -> std::string {
       if (lab.run(c.runs[0]).ranks != 1) return fmt::format("the first run, '{}', must have 1 rank", c.runs[0]);
       if (lab.run(c.runs[1]).ranks < 2) {
         return fmt::format("the second run, '{}', must have 2 or more ranks", c.runs[1]);
       }
       return "";
     }};

}  // namespace ddplab::grader::checks

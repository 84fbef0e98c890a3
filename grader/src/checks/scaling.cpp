// Check kind `scaling`: unique samples per second from 1 to N ranks, as an efficiency, against the
// reference solution's efficiency on this machine (or the spec's `reference`).
#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

/// "over gloo; cores per rank: 1 rank 0-1, 2 ranks 0 | 1; 1 thread(s) a rank", from the reports
/// (the backend in config, the cores a rank could use and its intra-op threads), so that a reader
/// sees what each run had.
std::string placement(const RunOutcome& one, const RunOutcome& many) {
  const auto describe = [](const RunOutcome& run, std::string& backend, std::string& threads) {
    std::vector<std::string> cores;
    for (const json& rep : reports(run)) {
      cores.push_back(rep.value("cores", std::string("?")));
      if (rep.contains("backend") && rep["backend"].is_string()) backend = rep["backend"].get<std::string>();
      if (rep.contains("threads") && rep["threads"].is_number_integer())
        threads = std::to_string(rep["threads"].get<int>());
    }
    return fmt::format("{}", fmt::join(cores, " | "));
  };
  std::string backend = "?", threads1 = "?", threadsN = "?";
  const std::string c1 = describe(one, backend, threads1);
  const std::string cN = describe(many, backend, threadsN);
  return fmt::format("backend {}; cores per rank: 1 rank {}, {} ranks {}; intra-op threads a rank: {} and {}", backend,
                     c1, many.ranks, cN, threads1, threadsN);
}

void check_scaling(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& one = the_run(c, ctx, 0);
  const auto& many = the_run(c, ctx, 1);
  const UniqueRate u1 = unique_rate(one, train_size(ctx, c.runs[0]));
  const UniqueRate uN = unique_rate(many, train_size(ctx, c.runs[1]));
  const double eff = u1.rate > 0 ? uN.rate / (u1.rate * many.ranks) : 0;
  r.figure = eff;
  r.figures["efficiency"] = eff;
  r.figures["unique_samples_per_s"] = uN.rate;
  const auto [ref, source] = reference_figure(c, ctx);
  const double rel = c.number("min_relative");
  // Samples the ranks processed more than once across the job: work that the efficiency does not
  // count. Counted exactly (from the sample bitmaps), more than 5% repeats fails the check whatever
  // the timing says: where the reference's own efficiency is low (lab 03 on 2 cores: about 0.4),
  // halving it with overlapping shards can still clear 80% of it in a quiet moment, and a grade
  // must not hang on that.
  const uint64_t repeated = uN.processed > uN.unique ? uN.processed - uN.unique : 0;
  const bool repeats = uN.exact && repeated * 20 > uN.processed;
  const std::string counted =
      fmt::format("{} run: {} distinct of {} samples processed{}", c.runs[1], uN.unique, uN.processed,
                  uN.exact ? "" : " (at most: the reports carry no sample bitmaps)");
  const std::string obs = fmt::format(
      "unique samples/s: {:.0f} on 1 rank, {:.0f} on {} ranks -> efficiency {:.3f}; "
      "reference {:.3f} from {}; required >= {:.0f}% of it; {}; {}",
      u1.rate, uN.rate, many.ranks, eff, ref, source, 100 * rel, counted, placement(one, many));
  const bool fast_enough = eff >= ref * rel;
  if (fast_enough && !repeats) {
    pass(r, obs);
  } else if (repeats) {
    const double share = 100.0 * static_cast<double>(repeated) / static_cast<double>(uN.processed);
    const std::string what =
        uN.replicated ? fmt::format(
                            "in an epoch every rank trained on the same samples: {:.0f}% of the samples the ranks "
                            "processed were repeats, work that does not count; give each rank its own shard "
                            "(a DistributedSampler, with set_epoch)",
                            share)
                      : fmt::format(
                            "{:.0f}% of the samples the ranks processed were repeats of samples another rank (or "
                            "the same rank) already trained on in that epoch: work that does not count; the shards "
                            "overlap or the ranks repeat each other's work",
                            share);
    r.exact = true;  // counted from the bitmaps: measuring again cannot change it
    fail(r, obs,
         fast_enough ? what +
                           "; the efficiency alone clears the bar on this machine, where the reference's own is "
                           "low, so the repeats are what fails the check"
                     : what);
  } else {
    fail(r, obs, c.diagnosis);
  }
}

}  // namespace

const CheckKind kScaling =
    {"scaling",
     "unique samples/s efficiency (distinct samples from the ranks' sample bitmaps, else their digests, over the "
     "slowest rank's wall time) >= "
     "`min_relative` x the reference's, and at most 5% of the samples processed are repeats (counted exactly "
     "from the bitmaps)",
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
     },
     "",
     true};

}  // namespace ddplab::grader::checks

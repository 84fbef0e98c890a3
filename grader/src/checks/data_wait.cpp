// Check kind `data_wait`: how much of a baseline's data wait a candidate hides — the share
// 1 - (candidate's median data wait per step) / (baseline's), each the slowest rank's — against the
// reference solution's share on this machine (or the spec's `reference`). A loader that prefetches
// hides nearly all of the synchronous loader's parsing; one that parses in next() hides none.
#include <algorithm>

#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

/// The slowest rank's data wait per step, in seconds, and which rank it was: the median over its
/// steps (`phases.step_medians.data_wait`), else, in a report without it (an older kit), the mean.
/// The wait a prefetching loader leaves is ~0.05 ms a step against ~0.23 ms of parsing (lab 08,
/// 2-core VM); a shared machine that stalls a thread for 0.35-0.5 ms in up to a quarter of the
/// steps (8 of 32 in a timeline on that VM) can double the mean and leaves the median where it was.
struct Wait {
  double seconds = 0;
  int rank = 0;
  bool median = true;
};

Wait worst_wait(const RunOutcome& run) {
  const auto reps = reports(run);
  Wait worst;
  for (size_t k = 0; k < reps.size(); ++k) {
    const int r = static_cast<int>(k);
    const auto steps = field<int64_t>(reps[k], "phases.steps", r);
    static const json::json_pointer kMedian("/phases/step_medians/data_wait");
    const bool median = reps[k].contains(kMedian) && reps[k][kMedian].is_number();
    const double wait = median      ? reps[k][kMedian].get<double>()
                        : steps > 0 ? field<double>(reps[k], "phases.data_wait", r) / static_cast<double>(steps)
                                    : 0;
    if (k == 0 || wait > worst.seconds) worst.seconds = wait, worst.rank = r;
    worst.median = worst.median && median;
  }
  return worst;
}

void check_data_wait(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const Wait base = worst_wait(the_run(c, ctx, 0));
  const Wait cand = worst_wait(the_run(c, ctx, 1));
  const char* statistic = base.median && cand.median ? "median" : "mean";
  if (base.seconds <= 0) {
    fail(r,
         fmt::format("the baseline run '{}' waited no time for data ({} per step): nothing to hide", c.runs[0],
                     statistic),
         "the baseline must parse its batches on the training thread");
    return;
  }
  const double hidden = 1.0 - cand.seconds / base.seconds;
  r.figure = hidden;
  const auto [ref, source] = reference_figure(c, ctx);
  const double rel = c.number("min_relative");
  const std::string obs = fmt::format(
      "data wait per step ({} over the steps, slowest rank): {:.3f} ms in '{}' (rank {}), {:.3f} ms in '{}' (rank "
      "{}) -> {:.0f}% of it hidden; reference {:.0f}% from {}; required >= {:.0f}% of it",
      statistic, 1e3 * base.seconds, c.runs[0], base.rank, 1e3 * cand.seconds, c.runs[1], cand.rank, 100 * hidden,
      100 * ref, source, 100 * rel);
  if (hidden >= ref * rel) {
    pass(r, obs);
  } else {
    fail(r, obs, c.diagnosis);
  }
}

}  // namespace

const CheckKind kDataWait =
    {"data_wait",
     "the share of the baseline's data wait per step (the median over the steps, slowest rank) that the candidate "
     "hides >= `min_relative` x the reference's",
     RunArity::kTwo,
     {{"min_relative", ParamType::kNumber, 0.6, "the share of the reference's hidden data wait required"},
      {"reference", ParamType::kNumber, nullptr, "the reference share where this machine is not calibrated",
       Presence::kOptional}},
     "the training loop still waits for batches to be parsed: they must be made on worker threads ahead of the step",
     check_data_wait,
     [](const CheckSpec& c, const LabSpec& lab) -> std::string {
       if (lab.run(c.runs[0]).ranks != lab.run(c.runs[1]).ranks) {
         return fmt::format("runs '{}' and '{}' must have the same number of ranks", c.runs[0], c.runs[1]);
       }
       return "";
     },
     "baseline, candidate",
     true};

}  // namespace ddplab::grader::checks

// Check kind `cost`: the run's cost figures, recomputed by the grader from what the kit's driver
// measured (its device-hours and unique samples, rank 0's report) and the price table (the kit's,
// or the run's --prices file): the spend, the cost per million samples, the projections per epoch
// and to the end. With `budget = true` the run had a --budget-usd and must have stopped by it:
// within the budget, with a checkpoint of the step it stopped at.
#include <cmath>
#include <filesystem>

#include "check_util.h"
#include "ddplab/cost.h"

namespace fs = std::filesystem;

namespace ddplab::grader::checks {
namespace {

/// The value after `flag` in the run's arguments, or "".
std::string arg_of(const RunOutcome& run, const std::string& flag) {
  for (size_t i = 0; i + 1 < run.args.size(); ++i) {
    if (run.args[i] == flag) return run.args[i + 1];
  }
  return "";
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1e-12, std::abs(b)) + 1e-15; }

void check_cost(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& run = the_run(c, ctx);
  const auto reps = reports(run);
  const json& cost = field_node(reps.at(0), "cost", 0);
  if (!cost.value("metered", false)) {
    fail(r, fmt::format("run '{}' metered no cost", run.name), c.diagnosis);
    return;
  }
  const std::string prices_file = arg_of(run, "--prices");
  const std::string instance = cost.at("instance").get<std::string>();
  cost::Price price;
  try {
    price = cost::find_price(cost::prices_from(prices_file), instance,
                             prices_file.empty() ? cost::kKitPrices : prices_file);
  } catch (const ConfigError& e) {
    fail(r, fmt::format("run '{}' is billed as {}: {}", run.name, instance, e.what()),
         "the run must be billed as an instance of the price table (--instance, --prices)");
    return;
  }
  // The device-hours come from the kit's measured device-seconds where the report has them: the
  // meter's own figure would let a wrong one through, every later figure being consistent with it.
  const double reported_hours = cost.at("device_hours").get<double>();
  const double hours =
      cost.contains("device_seconds") ? cost.at("device_seconds").get<double>() / 3600 : reported_hours;
  if (!close(reported_hours, hours)) {
    fail(r,
         fmt::format("run '{}' reports {:.9g} device-hours; the job's measured {:.6g} device-seconds are {:.9g} "
                     "device-hours",
                     run.name, reported_hours, cost.at("device_seconds").get<double>(), hours),
         c.diagnosis);
    return;
  }
  const auto samples = cost.at("samples").get<uint64_t>();
  const auto per_epoch = cost.at("samples_per_epoch").get<uint64_t>();
  const auto epochs = cost.at("epochs").get<int64_t>();
  const double usd = hours * price.usd_per_device_hour();
  const double per_sample = samples > 0 ? usd / static_cast<double>(samples) : 0;
  const double total = static_cast<double>(per_epoch) * static_cast<double>(epochs);
  struct Figure {
    const char* key;
    const char* what;
    double expected;
  };
  const Figure figures[] = {
      {"usd", "spent", usd},
      {"usd_per_million_samples", "per million samples", per_sample * 1e6},
      {"usd_per_epoch", "projected per epoch", per_sample * static_cast<double>(per_epoch)},
      {"usd_to_finish", "projected to the end", usd + per_sample * std::max(0.0, total - static_cast<double>(samples))},
  };
  const std::string basis = fmt::format("{:.6f} device-hours of {} at ${:.6g} a device-hour ({}), {} samples", hours,
                                        instance, price.usd_per_device_hour(), price.as_of, grouped(samples));
  for (const auto& f : figures) {
    const double got = cost.at(f.key).get<double>();
    if (!close(got, f.expected)) {
      fail(r,
           fmt::format("run '{}' reports ${:.9g} {} ({}); the grader computes ${:.9g} from {}", run.name, got, f.what,
                       f.key, f.expected, basis),
           c.diagnosis);
      return;
    }
  }
  std::string obs =
      fmt::format("${:.6f} spent, ${:.6f} per million samples, ${:.6f} an epoch: all as recomputed from {}", usd,
                  per_sample * 1e6, per_sample * static_cast<double>(per_epoch), basis);
  if (c.flag("budget")) {
    const double budget = cost.at("budget_usd").get<double>();
    const std::string stopped = cost.value("stopped", "");
    const json& ck = field_node(reps.at(0), "checkpoint", 0);
    const auto step = ck.at("at_end").at("step").get<int64_t>();
    const std::string last = ck.value("last", "");
    if (stopped != "budget") {
      fail(r,
           fmt::format("run '{}' with a budget of ${:g} did not stop by it ({}; ${:.6f} spent)", run.name, budget,
                       stopped.empty() ? "it ran to the end" : "stopped by " + stopped, usd),
           "the budget alarm never fired: stop when the spend so far, the next step and the last checkpoint would "
           "pass the budget");
      return;
    }
    if (usd > budget) {
      fail(r, fmt::format("run '{}' stopped by its budget after ${:.6f} of ${:g}: over it", run.name, usd, budget),
           "the alarm fired too late: the next step and the stopping checkpoint must fit in what is left");
      return;
    }
    const std::string want = fmt::format("step-{:08d}.pt", step);
    if (last.empty() || fs::path(last).filename() != want || !fs::exists(last)) {
      fail(r,
           fmt::format("run '{}' stopped by its budget at step {} without a checkpoint of that step ({} expected; "
                       "last written: {})",
                       run.name, step, want, last.empty() ? "none" : last),
           "a budget stop must leave a checkpoint to resume from");
      return;
    }
    obs += fmt::format("; stopped by the ${:g} budget at step {} after ${:.6f}, with {}", budget, step, usd, want);
  }
  pass(r, obs);
}

}  // namespace

const CheckKind kCost =
    {"cost",
     "the run's cost figures equal the grader's, recomputed from its device-hours, samples and the price table; with "
     "`budget`, the run stopped by its --budget-usd, within it, with a checkpoint",
     RunArity::kOne,
     {{"budget", ParamType::kBool, false, "the run has a --budget-usd and must stop by it"}},
     "the cost meter's arithmetic is wrong: spend = device-hours x the instance's price / its devices; projections at "
     "the job's own cost per sample",
     check_cost,
     nullptr};

}  // namespace ddplab::grader::checks

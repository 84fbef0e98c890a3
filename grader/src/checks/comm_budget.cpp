// Check kind `comm_budget`: one collective's calls and bytes per step, from the communicator's
// counters in each rank's report, within a budget: not more than the exercise needs, and at
// least the gradients' size (every gradient synchronised).
#include <algorithm>

#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

std::string limit(const CheckSpec& c, const char* key, double scale, const char* unit) {
  return c.params.contains(key) ? fmt::format("{:.2f} {}", c.number(key) / scale, unit) : "no limit";
}

void check_comm_budget(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto reps = reports(the_run(c, ctx));
  const std::string op = c.text("op");
  const bool has_calls = c.params.contains("max_calls_per_step"), has_bytes = c.params.contains("max_bytes_per_step");
  const double max_calls = has_calls ? c.number("max_calls_per_step") : 0;
  const double max_bytes = has_bytes ? c.number("max_bytes_per_step") : 0;
  const double min_bytes = c.number("min_bytes_per_step");
  std::string obs;
  for (size_t k = 0; k < reps.size(); ++k) {
    const int rank = static_cast<int>(k);
    const double steps = std::max(1.0, field<double>(reps[k], "phases.steps", rank));
    double calls = 0, bytes = 0;  // a collective never called has no entry
    const json& ops = field_node(reps[k], "comm.ops", rank);
    if (!ops.is_object()) throw Error(fmt::format("rank {}'s report: comm.ops has the wrong type", rank));
    if (ops.contains(op)) {
      calls = field<double>(reps[k], "comm.ops." + op + ".calls", rank) / steps;
      bytes = field<double>(reps[k], "comm.ops." + op + ".bytes", rank) / steps;
    }
    if (k == 0) obs = fmt::format("rank 0: {:.1f} {} call(s) and {:.2f} MB per step", calls, op, bytes / 1e6);
    if ((has_calls && calls > max_calls) || (has_bytes && bytes > max_bytes)) {
      fail(r,
           fmt::format("rank {}: {:.1f} {} call(s), {:.2f} MB per step; budget {} calls, {}", k, calls, op, bytes / 1e6,
                       has_calls ? fmt::format("{}", max_calls) : "unlimited",
                       limit(c, "max_bytes_per_step", 1e6, "MB")),
           c.text("diagnosis_over"));
      return;
    }
    if (bytes < min_bytes) {
      fail(r,
           fmt::format("rank {}: {:.2f} MB of {} per step, less than the {:.2f} MB the gradients take", k, bytes / 1e6,
                       op, min_bytes / 1e6),
           c.text("diagnosis_under"));
      return;
    }
  }
  pass(r, obs);
}

}  // namespace

const CheckKind kCommBudget = {
    "comm_budget",
    "every rank's calls and bytes of collective `op` per step are within the budget",
    RunArity::kOne,
    {{"op", ParamType::kString, "allreduce", "the collective counted (the report's comm.ops key)"},
     {"max_calls_per_step", ParamType::kNumber, nullptr, "most calls per step (absent: no limit)", Presence::kOptional},
     {"max_bytes_per_step", ParamType::kNumber, nullptr, "most bytes per step (absent: no limit)", Presence::kOptional},
     {"min_bytes_per_step", ParamType::kNumber, 0, "fewest bytes per step (the gradients' size)"},
     {"diagnosis_over", ParamType::kString, "more communication than the exercise needs",
      "the likely cause of calls or bytes over the budget"},
     {"diagnosis_under", ParamType::kString, "not every gradient is synchronised",
      "the likely cause of fewer bytes than min_bytes_per_step"}},
    "",
    check_comm_budget,
    [](const CheckSpec& c, const LabSpec&) -> std::string {
      const bool any = c.params.contains("max_calls_per_step") || c.params.contains("max_bytes_per_step") ||
                       c.number("min_bytes_per_step") > 0;
      return any ? "" : "set max_calls_per_step, max_bytes_per_step or min_bytes_per_step: this budget limits nothing";
    }};

}  // namespace ddplab::grader::checks

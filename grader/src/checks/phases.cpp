// Check kind `phases`: each named phase of the step has positive time on every rank, so the
// student's step is timed where the runtime's report expects it.
#include <cctype>

#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

/// `text` with {phase} and {Phase} replaced by the phase's name, lower and capitalised.
std::string with_phase(std::string text, const std::string& p) {
  const std::string cap =
      p.empty() ? p : static_cast<char>(std::toupper(static_cast<unsigned char>(p[0]))) + p.substr(1);
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"{phase}", p}, {"{Phase}", cap}}) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size())) {
      text.replace(at, key.size(), value);
    }
  }
  return text;
}

void check_phases(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto phases = c.texts("phases");
  const auto reps = reports(the_run(c, ctx));
  if (!phase_timers_consistent(reps, r)) return;
  for (size_t k = 0; k < reps.size(); ++k) {
    for (const auto& p : phases) {
      const double v = field<double>(reps[k], "phases." + p, static_cast<int>(k));
      if (!(v > 0)) {
        fail(r, fmt::format("rank {}: phase '{}' has {} s", k, p, v), with_phase(c.diagnosis, p));
        return;
      }
    }
  }
  std::vector<std::string> times;
  for (const auto& p : phases) times.push_back(fmt::format("{} {:.2f} s", p, field<double>(reps[0], "phases." + p, 0)));
  pass(r, "rank 0: " + join(times));
}

}  // namespace

const CheckKind kPhases = {"phases",
                           "each phase has positive time on every rank",
                           RunArity::kOne,
                           {{"phases", ParamType::kStringList, json::array({"forward", "backward", "optimizer"}),
                             "the report's phase names that must be timed"}},
                           "the {phase} part of the step is not timed: wrap it in timer.scope(ddplab::Phase::k{Phase})",
                           check_phases,
                           [](const CheckSpec& c, const LabSpec&) -> std::string {
                             return c.texts("phases").empty() ? "phases must name at least one phase" : "";
                           }};

}  // namespace ddplab::grader::checks

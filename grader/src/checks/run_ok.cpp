// Check kind `run_ok`: every rank of the runs exits 0 and reports status ok. What it adds to
// runs_usable is the verdict itself; the causes of a failed run (crash, hang, memory) are shared.
#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

void check_run_ok(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r, true)) return;
  std::vector<std::string> seen;
  for (const auto& name : c.runs) {
    const auto& run = ctx.runs.at(name);
    for (size_t k = 0; k < run.rank.size(); ++k) {
      const auto& rep = *run.rank[k].report;
      const std::string st = rep.is_object() && rep.contains("status") && rep["status"].is_string()
                                 ? rep["status"].get<std::string>()
                                 : "";
      if (st != "ok") {
        fail(r, fmt::format("run '{}': rank {} reports status '{}'", name, k, st), c.diagnosis);
        return;
      }
    }
    seen.push_back(fmt::format("'{}' ({} rank(s), {:.1f} s)", name, run.ranks, run.seconds));
  }
  pass(r, "completed: " + join(seen));
}

}  // namespace

const CheckKind kRunOk = {"run_ok",
                          "every rank of the run(s) exits 0 and reports status ok",
                          RunArity::kOneOrMore,
                          {},
                          "the run did not finish cleanly",
                          check_run_ok,
                          nullptr};

}  // namespace ddplab::grader::checks

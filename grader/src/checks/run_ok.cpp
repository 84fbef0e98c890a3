// Check kind `run_ok`: every rank of the runs exits 0 and reports status ok (a run with
// expect_failure: stops with an error of its own). What it adds to runs_usable is the verdict
// itself; the causes of a failed run (crash, hang, memory) are shared.
#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

void check_run_ok(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r, true)) return;
  std::vector<std::string> seen, failed;
  for (const auto& name : c.runs) {
    const auto& run = ctx.runs.at(name);
    if (run.expect_failure) {
      // runs_usable saw it exit non-zero; the error must be its own, reported by a rank through the
      // lab's driver, not a crash or a stall.
      bool reported = false;
      for (const auto& rank : run.rank) {
        reported = reported || (rank.report && rank.report->is_object() && rank.report->value("status", "") == "error");
      }
      if (!reported) {
        fail(r, fmt::format("run '{}' stopped, but no rank reported an error: {}", name, run.summary),
             failure_diagnosis(run, ctx), run.log_tail);
        return;
      }
      failed.push_back(fmt::format("'{}' ({})", name, failure_cause(run)));
      continue;
    }
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
  std::string obs = seen.empty() ? "" : "completed: " + join(seen);
  if (!failed.empty())
    obs += (obs.empty() ? "" : "; ") + std::string("stopped with an error, as expected: ") + join(failed);
  pass(r, obs);
}

}  // namespace

const CheckKind kRunOk = {"run_ok",
                          "every rank of the run(s) exits 0 and reports status ok; a run with `expect_failure` "
                          "stops instead, a rank reporting status error",
                          RunArity::kOneOrMore,
                          {},
                          "the run did not finish cleanly",
                          check_run_ok,
                          nullptr};

}  // namespace ddplab::grader::checks

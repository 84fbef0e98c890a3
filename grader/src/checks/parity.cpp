// Check kind `parity`: N ranks at batch B train the model one process trains at batch N x B: the
// ranks' mean loss per step follows the single process's, and the grader's own test AUCs of both
// saved models agree.
#include <cmath>

#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

/// Rank `k`'s per-step losses.
std::vector<double> losses(const json& rep, int k) { return field<std::vector<double>>(rep, "steps.loss", k); }

void check_parity(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& one = the_run(c, ctx, 0);
  const auto& many = the_run(c, ctx, 1);
  const double loss_tol = c.number("loss_tolerance");
  const double auc_tol = c.number("auc_tolerance");
  const auto ones = reports(one), manys = reports(many);
  const auto l1 = losses(ones[0], 0);
  std::vector<std::vector<double>> ln;
  for (size_t k = 0; k < manys.size(); ++k) {
    ln.push_back(losses(manys[k], static_cast<int>(k)));
    if (ln.back().size() != l1.size()) {
      fail(r, fmt::format("{} ranks took {} steps, one process took {}", many.ranks, ln.back().size(), l1.size()),
           c.text("diagnosis_steps"));
      return;
    }
  }
  // Mean loss per step over ranks vs the single process's loss.
  double worst = 0;
  size_t worst_step = 0;
  for (size_t s = 0; s < l1.size(); ++s) {
    double mean = 0;
    for (const auto& l : ln) mean += l[s];
    mean /= static_cast<double>(ln.size());
    const double d = std::abs(mean - l1[s]);
    if (d > worst) worst = d, worst_step = s;
  }
  const uint64_t count = eval_count(c.integer("eval_samples"), one.data_dir);
  const ModelScore a1 = evaluate_saved(one.model, one.data_dir, count),
                   aN = evaluate_saved(many.model, many.data_dir, count);
  r.figure = aN.auc - a1.auc;
  const std::string obs = fmt::format(
      "{} ranks vs 1 process at the same global batch: largest per-step loss gap {:.2e} "
      "(step {}, tolerance {}), test AUC {:.4f} vs {:.4f} (tolerance {})",
      many.ranks, worst, worst_step, loss_tol, aN.auc, a1.auc, auc_tol);
  if (worst <= loss_tol && std::abs(aN.auc - a1.auc) <= auc_tol) {
    pass(r, obs);
  } else {
    fail(r, obs, c.diagnosis);
  }
}

}  // namespace

const CheckKind kParity =
    {"parity",
     "per-step mean loss over ranks within tolerance of one process's, and the grader's AUCs of both saved models "
     "within tolerance",
     RunArity::kTwo,
     {{"loss_tolerance", ParamType::kNumber, 0.02, "largest allowed gap between the per-step losses"},
      {"auc_tolerance", ParamType::kNumber, 0.01, "largest allowed gap between the two test AUCs"},
      {"eval_samples", ParamType::kInteger, 0, "test samples to evaluate (0: the whole test split)"},
      {"diagnosis_steps", ParamType::kString,
       "the ranks do not split each global batch: with N ranks x batch B, every rank takes the steps one process "
       "takes at batch N x B",
       "the likely cause when the step counts differ"}},
     "the ranks do not train the model one process trains: gradients summed instead of averaged, a rank skipping the "
     "sync, or batches that are not one global batch",
     check_parity,
     runs_save_models};

}  // namespace ddplab::grader::checks

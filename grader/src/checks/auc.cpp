// Check kind `auc`: the grader evaluates the run's saved model itself and compares its test AUC
// with the reference solution's on this machine (calibration) or the spec's `reference`.
#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

void check_auc(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& run = the_run(c, ctx);
  const ModelScore e = evaluate_saved(run.model, run.data_dir, eval_count(c.integer("eval_samples"), run.data_dir));
  r.figure = e.auc;
  r.figures["auc"] = e.auc;
  const double tol = c.number("tolerance");
  const auto [ref, source] = reference_figure(c, ctx);
  const std::string obs = fmt::format(
      "test AUC {:.4f} on {} samples (computed by the grader from the saved model); "
      "reference {:.4f} from {}, tolerance {}",
      e.auc, e.samples, ref, source, tol);
  if (e.auc >= ref - tol) {
    pass(r, obs);
  } else {
    fail(r, obs, c.diagnosis);
  }
}

}  // namespace

const CheckKind kAuc =
    {"auc",
     "the grader's own test AUC of the saved model >= reference - `tolerance`",
     RunArity::kOne,
     {{"tolerance", ParamType::kNumber, 0.01, "how far below the reference the AUC may be"},
      {"eval_samples", ParamType::kInteger, 0, "test samples to evaluate (0: the whole test split)"},
      {"reference", ParamType::kNumber, nullptr, "the reference AUC where this machine is not calibrated",
       Presence::kOptional}},
     "the model learns less than the reference: check the loss, the learning rate and that gradients are averaged, not "
     "summed or dropped",
     check_auc,
     runs_save_models};

}  // namespace ddplab::grader::checks

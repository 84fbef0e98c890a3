// The kit's timed step in named parts (see step.h).
#include "ddplab/step.h"

#include "ddplab/error.h"

namespace ddplab {

namespace {

/// The step after zero_grad: forward, backward, comm, and (when `update`) the optimizer.
double run_parts(StepTimer& timer, torch::optim::Optimizer& optimizer, dist::GradSync* sync, const StepParts& parts,
                 bool update) {
  DDPLAB_CHECK(static_cast<bool>(parts.loss), "a step needs its loss part");
  torch::Tensor loss;
  {
    auto s = timer.scope(Phase::kForward);
    loss = parts.loss();
    if (sync != nullptr) sync->before_backward(loss);
  }
  {
    auto s = timer.scope(Phase::kBackward);
    (parts.to_backward ? parts.to_backward(loss) : loss).backward();
    if (parts.after_backward) parts.after_backward();
  }
  if (sync != nullptr) {
    auto s = timer.scope(Phase::kComm);
    sync->finish();
  }
  if (update) {
    auto s = timer.scope(Phase::kOptimizer);
    if (parts.optimizer_step) {
      (void)parts.optimizer_step();
    } else {
      optimizer.step();
    }
  }
  return loss.item<double>();
}

}  // namespace

double timed_step(StepTimer& timer, torch::optim::Optimizer& optimizer, dist::GradSync* sync, const StepParts& parts) {
  optimizer.zero_grad();
  return run_parts(timer, optimizer, sync, parts, true);
}

double timed_micro_step(StepTimer& timer, torch::optim::Optimizer& optimizer, dist::GradSync* sync,
                        const StepParts& parts, bool last) {
  if (sync == nullptr || last) return run_parts(timer, optimizer, sync, parts, last);
  auto quiet = sync->no_sync();
  return run_parts(timer, optimizer, sync, parts, false);
}

StepParts plain_parts(std::function<torch::Tensor()> loss) {
  StepParts p;
  p.loss = std::move(loss);
  return p;
}

}  // namespace ddplab

// The kit's one timed training step (see train.h).
#include "ddplab/train.h"

namespace ddplab {

torch::Tensor batch_loss(DeepFM& model, const data::Batch& batch) {
  return torch::binary_cross_entropy_with_logits(model->forward(batch.dense, batch.rows), batch.labels);
}

double train_step(DeepFM& model, torch::optim::Optimizer& optimizer, const data::Batch& batch, StepTimer& timer,
                  dist::GradSync* sync) {
  optimizer.zero_grad();
  torch::Tensor loss;
  {
    auto s = timer.scope(Phase::kForward);
    loss = batch_loss(model, batch);
  }
  if (sync != nullptr) sync->before_backward(loss);
  {
    auto s = timer.scope(Phase::kBackward);
    loss.backward();
  }
  if (sync != nullptr) {
    auto s = timer.scope(Phase::kComm);
    sync->finish();
  }
  {
    auto s = timer.scope(Phase::kOptimizer);
    optimizer.step();
  }
  return loss.item<double>();
}

}  // namespace ddplab

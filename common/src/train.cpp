// The kit's one timed training step (see train.h).
#include "ddplab/train.h"

namespace ddplab {

torch::Tensor batch_loss(DeepFM& model, const data::Batch& batch) {
  return torch::binary_cross_entropy_with_logits(model->forward(batch.dense, batch.rows), batch.labels);
}

double train_step(DeepFM& model, torch::optim::Optimizer& optimizer, const data::Batch& batch, StepTimer& timer,
                  dist::GradSync* sync) {
  return timed_step(timer, optimizer, sync, plain_parts([&] { return batch_loss(model, batch); }));
}

}  // namespace ddplab

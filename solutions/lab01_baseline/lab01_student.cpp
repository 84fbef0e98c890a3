// Lab 01 exercises: the training step and the evaluation of the single-process baseline.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <vector>

#include "lab01.h"
#include "ddplab/error.h"
#include "ddplab/metrics.h"

namespace lab01 {

double train_step(ddplab::DeepFM& model, torch::optim::Optimizer& optimizer, const ddplab::data::Batch& batch,
                  ddplab::StepTimer& timer) {
  // BEGIN STUDENT CODE (01.1: training step)
  optimizer.zero_grad();
  torch::Tensor loss;
  {
    auto phase = timer.scope(ddplab::Phase::kForward);
    const torch::Tensor logits = model->forward(batch.dense, batch.rows);
    loss = torch::binary_cross_entropy_with_logits(logits, batch.labels);
  }
  {
    auto phase = timer.scope(ddplab::Phase::kBackward);
    loss.backward();
  }
  {
    auto phase = timer.scope(ddplab::Phase::kOptimizer);
    optimizer.step();
  }
  return loss.item<double>();
  // END STUDENT CODE
}

ddplab::EvalResult evaluate(ddplab::DeepFM& model, const ddplab::data::Dataset& test, uint64_t count,
                            int64_t batch_size, torch::Device device) {
  // BEGIN STUDENT CODE (01.2: evaluation)
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<float> probs, labels;
  probs.reserve(count);
  labels.reserve(count);
  ddplab::data::BatchLoader loader(test, ddplab::data::sequential_order(count), batch_size, device);
  ddplab::data::Batch batch;
  while (loader.next(batch)) {
    const torch::Tensor p = torch::sigmoid(model->forward(batch.dense, batch.rows)).to(torch::kCPU).contiguous();
    const torch::Tensor y = batch.labels.to(torch::kCPU).contiguous();
    probs.insert(probs.end(), p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
    labels.insert(labels.end(), y.data_ptr<float>(), y.data_ptr<float>() + y.numel());
  }
  model->train();
  return {ddplab::metrics::exact_auc(probs, labels), ddplab::metrics::log_loss(probs, labels), count};
  // END STUDENT CODE
}

}  // namespace lab01

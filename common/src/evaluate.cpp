// Reference evaluation: probabilities for every sample, then exact metrics over all of them.
#include "ddplab/evaluate.h"

#include <vector>

#include "ddplab/data/loader.h"
#include "ddplab/metrics.h"

namespace ddplab {

EvalResult evaluate_model(DeepFM& model, const data::Dataset& ds, uint64_t count, int64_t batch_size,
                          torch::Device device) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  std::vector<float> probs, labels;
  probs.reserve(count);
  labels.reserve(count);
  data::BatchLoader loader(ds, data::sequential_order(count), batch_size, device);
  data::Batch b;
  while (loader.next(b)) {
    const auto p = torch::sigmoid(model->forward(b.dense, b.rows)).to(torch::kCPU).contiguous();
    const auto y = b.labels.to(torch::kCPU).contiguous();
    probs.insert(probs.end(), p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
    labels.insert(labels.end(), y.data_ptr<float>(), y.data_ptr<float>() + y.numel());
  }
  model->train(was_training);
  return {metrics::exact_auc(probs, labels), metrics::log_loss(probs, labels), count};
}

}  // namespace ddplab

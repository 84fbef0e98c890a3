// The kit's own evaluation of a model on the test split: what the grader uses to recompute a
// submission's AUC from its saved model, and what the reference trainers report.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "ddplab/data/shard.h"
#include "ddplab/deepfm.h"

namespace ddplab {

/// Test-set quality of a model (definitions: docs/concepts/metrics.md).
struct EvalResult {
  double auc = 0.0;
  double logloss = 0.0;
  uint64_t samples = 0;
};

/// Exact AUC and log-loss of `model` over the first `count` samples of `ds`, in batches, without
/// gradients and in eval mode (training mode is restored).
EvalResult evaluate_model(DeepFM& model, const data::Dataset& ds, uint64_t count, int64_t batch_size,
                          torch::Device device);

}  // namespace ddplab

// Lab 01 (single-process baseline): the functions the student implements in lab01_student.cpp.
// The driver (main.cpp) and the tests call only these.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "ddplab/data/loader.h"
#include "ddplab/data/shard.h"
#include "ddplab/deepfm.h"
#include "ddplab/evaluate.h"
#include "ddplab/timer.h"

namespace lab01 {

/// Exercise 01.1: one training step on `batch`.
///
/// Contract:
///  - clear the gradients left by the previous step;
///  - forward: the model's logits for the batch and the mean binary cross-entropy *with logits*
///    against batch.labels, timed as ddplab::Phase::kForward;
///  - backward: gradients of that loss, timed as ddplab::Phase::kBackward;
///  - one optimizer step, timed as ddplab::Phase::kOptimizer (use timer.scope(phase));
///  - returns the loss value (a plain double, not a tensor).
double train_step(ddplab::DeepFM& model, torch::optim::Optimizer& optimizer, const ddplab::data::Batch& batch,
                  ddplab::StepTimer& timer);

/// Exercise 01.2: evaluate the model on the first `count` samples of `test`.
///
/// Contract:
///  - put the model in evaluation mode and compute no gradients (and restore training mode);
///  - run the test samples in batches of `batch_size` on `device`, in index order;
///  - turn logits into click probabilities, and compute the exact ROC AUC and the log-loss over
///    *all* `count` samples at once with ddplab::metrics (averaging per-batch AUCs is wrong);
///  - returns {auc, logloss, count}.
ddplab::EvalResult evaluate(ddplab::DeepFM& model, const ddplab::data::Dataset& test, uint64_t count,
                            int64_t batch_size, torch::Device device);

}  // namespace lab01

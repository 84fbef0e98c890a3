// The training step every data-parallel program of the kit runs (labs 02 onwards, ddp_train,
// bench train, bench scaling): the same step a student writes in lab 01 (exercise 01.1), plus the
// gradient sync around backward. Each part is timed in its phase (docs/concepts/metrics.md,
// "Phase times"), so every tool and lab splits a step the same way.
#pragma once

#include <torch/torch.h>

#include "ddplab/data/loader.h"
#include "ddplab/deepfm.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/step.h"
#include "ddplab/timer.h"

namespace ddplab {

/// One training step on `batch`:
///
///     optimizer.zero_grad();
///     loss = BCE-with-logits(model(batch), labels)   // Phase::kForward
///     sync->before_backward(loss);                   // arms overlap hooks (in Phase::kForward)
///     loss.backward();                               // Phase::kBackward
///     sync->finish();                                // Phase::kComm: what backward did not hide
///     optimizer.step();                              // Phase::kOptimizer
///
/// Without `sync` (one process, or independent trainers) there is no kComm scope. Returns the
/// loss as a double. The caller begins and ends the step on the timer (LabRun::run_epoch does).
/// It is timed_step(plain_parts(batch_loss)) (step.h), the step other labs vary part by part.
double train_step(DeepFM& model, torch::optim::Optimizer& optimizer, const data::Batch& batch, StepTimer& timer,
                  dist::GradSync* sync = nullptr);

/// The mean binary cross-entropy with logits of `model` on `batch`: the course's training loss.
torch::Tensor batch_loss(DeepFM& model, const data::Batch& batch);

}  // namespace ddplab

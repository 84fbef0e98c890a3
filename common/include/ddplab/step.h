// The training step in named parts (docs/concepts/adding-a-lab.md, "The step"). Every step of the
// course is the same four moves - compute the loss, backpropagate it, wait for the gradients'
// collectives, update the weights - and a lab changes one of the parts, never the order or the
// timing: the kit times each part in its phase (timer.h), so every lab and tool splits a step the
// same way. No callbacks beyond these parts, no trainer class: a lab names what differs.
#pragma once

#include <functional>

#include <torch/torch.h>

#include "ddplab/dist/grad_sync.h"
#include "ddplab/timer.h"

namespace ddplab {

/// What one step does, part by part. Only `loss` is required.
struct StepParts {
  /// The forward pass and the loss (Phase::kForward). An autocast scope, if any, goes inside.
  std::function<torch::Tensor()> loss;
  /// What backward starts from, given the loss (default: the loss itself; a loss scaler: loss x S).
  std::function<torch::Tensor(const torch::Tensor&)> to_backward;
  /// Work on the gradients after backward, before the sync waits for them (Phase::kBackward):
  /// e.g. rounding them through fp16 storage. Default: nothing.
  std::function<void()> after_backward;
  /// The update (Phase::kOptimizer); false when the step was skipped (a scaler found an overflow).
  /// Default: optimizer.step(), true.
  std::function<bool()> optimizer_step;
};

/// One step, timed by its phases on `timer` (the caller begins and ends the step):
///
///     optimizer.zero_grad();
///     loss = parts.loss();  sync->before_backward(loss)     // Phase::kForward (DDP's prepare is in forward)
///     parts.to_backward(loss).backward(); after_backward()  // Phase::kBackward
///     sync->finish();                                       // Phase::kComm: what backward did not hide
///     parts.optimizer_step()                                // Phase::kOptimizer
///
/// Without `sync` there is no kComm scope. Returns the loss as a double (of `loss`, not of what
/// backward started from).
double timed_step(StepTimer& timer, torch::optim::Optimizer& optimizer, dist::GradSync* sync, const StepParts& parts);

/// One micro-step of gradient accumulation: no zero_grad (the caller zeroes before the first),
/// and the sync communicates only when `last` (the others run inside sync.no_sync()); the update
/// runs only when `last`. Returns the micro-batch's loss.
double timed_micro_step(StepTimer& timer, torch::optim::Optimizer& optimizer, dist::GradSync* sync,
                        const StepParts& parts, bool last);

/// The parts of the plain step: `loss`, and the optimizer's step.
StepParts plain_parts(std::function<torch::Tensor()> loss);

}  // namespace ddplab

// The kit's dynamic loss scaler for fp16 training (lab 09's template; lab 05 is where students
// write their own, and may not call this one): PyTorch GradScaler's rules and defaults
// (torch/cuda/amp/grad_scaler.py; references.md). Per optimizer step:
//
//     scaler.scale(loss).backward();        // gradients of loss x scale: fp16 keeps the small ones
//     ...                                    // gradient sync (the scaled gradients are averaged)
//     scaler.step(optimizer, params);        // unscale; skip the step if any rank saw inf/NaN
//
// step() updates the scale: halved (backoff) after a step with inf/NaN, doubled (growth) after
// growth_interval steps in a row without. With a communicator every rank takes the same decision
// (the found-inf flag is all-reduced), so the ranks' models stay identical.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace ddplab::dist {
class Communicator;
}

namespace ddplab::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  ///< 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  /// `comm` (optional, must outlive the scaler): the ranks whose decision to skip a step is shared.
  explicit GradScaler(const GradScalerOptions& options = {}, dist::Communicator* comm = nullptr);

  /// loss x the current scale.
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// Divides every defined gradient of `params` by the scale, then the optimizer's step unless a
  /// gradient held inf/NaN on this or (with a communicator) any rank; then updates the scale.
  /// Returns whether the optimizer stepped.
  bool step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params);

  double scale_value() const noexcept { return scale_; }
  /// Steps in a row without inf/NaN since the last change of the scale.
  int64_t growth_tracker() const noexcept { return tracker_; }
  int64_t skipped_steps() const noexcept { return skipped_; }
  /// Restores the state a checkpoint saved (scale_value(), growth_tracker()).
  void load(double scale, int64_t growth_tracker);

 private:
  GradScalerOptions options_;
  dist::Communicator* comm_;
  double scale_;
  int64_t tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace ddplab::amp

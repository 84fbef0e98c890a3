// Lab 05 (mixed precision): the pieces LibTorch's C++ API does not have and the student writes in
// lab05_student.cpp — an autocast scope (05.1), a dynamic loss scaler with PyTorch GradScaler's
// rules (05.2), and ranks that agree on skipping a step (05.3). The autocast calls that differ
// between LibTorch versions are in ddplab/amp.h.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "ddplab/amp.h"
#include "ddplab/dist/communicator.h"
#include "ddplab/error.h"

namespace lab05 {

/// Exercise 05.1: autocast for one device while the scope lives, like Python's `torch.autocast`.
///
/// Contract: the constructor saves `device`'s current autocast enabled flag and dtype, sets
/// `enabled` and `dtype` (ddplab::amp::set_autocast_enabled / set_autocast_dtype) and counts one
/// level of nesting (ddplab::amp::increment_nesting). The destructor undoes it: when it leaves the
/// outermost scope (ddplab::amp::decrement_nesting() returns 0) it clears autocast's cache of
/// low-precision weight copies (ddplab::amp::clear_cache) — the optimizer updates the weights in
/// place, and a cached copy keyed by the weight's storage would otherwise serve the old values to
/// every later forward — and it restores the saved flag and dtype. Scopes nest (an inner scope
/// with enabled = false turns autocast off until it ends). Autocast state is per thread: make a
/// scope on the thread that runs forward. Not copyable.
class AutocastScope {
 public:
  AutocastScope(torch::DeviceType device, torch::ScalarType dtype, bool enabled = true);
  // noexcept(false) only so that the skeleton's stub may throw NotImplemented; a finished scope
  // never throws here.
  ~AutocastScope() noexcept(false);
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  torch::DeviceType device_;
  bool previous_enabled_ = false;
  torch::ScalarType previous_dtype_ = torch::kFloat32;
};

/// Exercise 05.3: whether any rank found an inf or NaN. Collective: every rank of `comm` calls it
/// with its own `local` flag and all get the same answer (one small all-reduce). Without a
/// communicator, or alone, returns `local`.
bool share_found_inf(bool local, ddplab::dist::Communicator* comm);

/// GradScaler's defaults (torch/cuda/amp/grad_scaler.py).
struct ScalerOptions {
  double init_scale = 65536.0;  ///< 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  ///< steps without inf/NaN before the scale grows
};

/// Exercises 05.2 and 05.3: dynamic loss scaling with PyTorch GradScaler's rules. Per step:
///
///     scaler.scale(loss).backward();
///     scaler.unscale(params);          // optional before clipping; at most once per step
///     scaler.step(optimizer, params);  // unscales if not done yet; skips the step on inf/NaN
///     scaler.update();                 // grows or backs off the scale, ends the step
///
/// Contract (05.2):
///  - scale(loss) returns loss x the current scale (a new tensor; `loss` is not modified).
///  - unscale(params) multiplies every defined gradient by 1 / scale, the inverse computed in
///    double and applied as a float (fp32 division can be imprecise), and sets found_inf() if any
///    gradient element is inf or NaN. A second call in the same step throws ddplab::Error (the
///    gradients would be divided twice).
///  - step(optimizer, params) unscales first if unscale() was not called in this step; then
///    calls optimizer.step() unless found_inf(); returns whether it stepped.
///  - update() with found_inf: scale x backoff_factor, growth tracker 0 (the step was skipped);
///    otherwise the tracker counts one more good step and, when it reaches growth_interval, the
///    scale is multiplied by growth_factor and the tracker restarts at 0. Then found_inf is
///    cleared and a new step begins (unscale may be called again).
///  - The constructor rejects growth_factor <= 1, backoff_factor outside (0, 1), an init_scale or
///    growth_interval below 1 with ddplab::ConfigError.
/// With a communicator, unscale() ends with found_inf = share_found_inf(local flag, comm) (05.3),
/// so that every rank skips the same steps even when the check runs on local gradients that were
/// not all-reduced yet. Without one, the flag is this rank's alone.
class LossScaler {
 public:
  explicit LossScaler(const ScalerOptions& options = {}, ddplab::dist::Communicator* comm = nullptr);

  torch::Tensor scale(const torch::Tensor& loss) const;
  void unscale(const std::vector<torch::Tensor>& params);
  bool step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params);
  void update();

  double scale_value() const noexcept { return scale_; }
  int64_t growth_tracker() const noexcept { return growth_tracker_; }
  bool found_inf() const noexcept { return found_inf_; }
  const ScalerOptions& options() const noexcept { return options_; }

  /// The scaler's state for a checkpoint (GradScaler's state_dict keys), and back (given).
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  ScalerOptions options_;
  ddplab::dist::Communicator* comm_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool found_inf_ = false;
  bool unscaled_ = false;  ///< unscale() already ran in this step
};

// ---- given ----

inline nlohmann::json LossScaler::state() const {
  return {{"scale", scale_},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", options_.growth_interval},
          {"_growth_tracker", growth_tracker_}};
}

inline void LossScaler::load_state(const nlohmann::json& s) {
  try {
    scale_ = s.at("scale").get<double>();
    options_.growth_factor = s.at("growth_factor").get<double>();
    options_.backoff_factor = s.at("backoff_factor").get<double>();
    options_.growth_interval = s.at("growth_interval").get<int64_t>();
    growth_tracker_ = s.at("_growth_tracker").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw ddplab::ConfigError(std::string("loss scaler state: ") + e.what());
  }
  found_inf_ = false;
  unscaled_ = false;
}

}  // namespace lab05

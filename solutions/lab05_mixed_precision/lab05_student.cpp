// Lab 05 exercises: an autocast scope (05.1), a dynamic loss scaler with GradScaler's rules
// (05.2), and ranks that skip the same steps (05.3). Contracts: lab05.h.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <fmt/format.h>

#include "lab05.h"

namespace lab05 {

bool share_found_inf(bool local, ddplab::dist::Communicator* comm) {
  // BEGIN STUDENT CODE (05.3: every rank sees every rank's inf)
  if (comm == nullptr || comm->size() == 1) return local;
  torch::Tensor flag = torch::tensor({local ? 1.0f : 0.0f});
  comm->allreduce(flag);  // a sum: positive when any rank found an inf or NaN
  return flag.item<float>() > 0.0f;
  // END STUDENT CODE
}

AutocastScope::AutocastScope(torch::DeviceType device, torch::ScalarType dtype, bool enabled) : device_(device) {
  // BEGIN STUDENT CODE (05.1: enter the scope)
  previous_enabled_ = ddplab::amp::autocast_enabled(device_);
  previous_dtype_ = ddplab::amp::autocast_dtype(device_);
  ddplab::amp::set_autocast_dtype(device_, dtype);
  ddplab::amp::set_autocast_enabled(device_, enabled);
  ddplab::amp::increment_nesting();
  // END STUDENT CODE
}

AutocastScope::~AutocastScope() noexcept(false) {
  // BEGIN STUDENT CODE (05.1: leave the scope)
  if (ddplab::amp::decrement_nesting() == 0) ddplab::amp::clear_cache();
  ddplab::amp::set_autocast_enabled(device_, previous_enabled_);
  ddplab::amp::set_autocast_dtype(device_, previous_dtype_);
  // END STUDENT CODE
}

LossScaler::LossScaler(const ScalerOptions& options, ddplab::dist::Communicator* comm)
    : options_(options), comm_(comm), scale_(options.init_scale) {
  // BEGIN STUDENT CODE (05.2: the options GradScaler accepts)
  if (!(options_.growth_factor > 1.0) || !(options_.backoff_factor > 0.0 && options_.backoff_factor < 1.0) ||
      !(options_.init_scale >= 1.0) || options_.growth_interval < 1) {
    throw ddplab::ConfigError(fmt::format(
        "loss scaler: need growth_factor > 1, 0 < backoff_factor < 1, init_scale >= 1 and growth_interval >= 1 "
        "(got {}, {}, {}, {})",
        options_.growth_factor, options_.backoff_factor, options_.init_scale, options_.growth_interval));
  }
  // END STUDENT CODE
}

torch::Tensor LossScaler::scale(const torch::Tensor& loss) const {
  // BEGIN STUDENT CODE (05.2: scale the loss)
  return loss * scale_;
  // END STUDENT CODE
}

void LossScaler::unscale(const std::vector<torch::Tensor>& params) {
  bool found = false;
  // BEGIN STUDENT CODE (05.2: unscale once, find inf and NaN)
  if (unscaled_) throw ddplab::Error("loss scaler: unscale() was already called in this step (update() ends a step)");
  unscaled_ = true;
  const auto inv = static_cast<float>(1.0 / scale_);  // the reciprocal in double, applied as a float
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (!found && !torch::isfinite(g).all().item<bool>()) found = true;
    g.mul_(inv);
  }
  // END STUDENT CODE
  found_inf_ = share_found_inf(found, comm_);
}

bool LossScaler::step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params) {
  // BEGIN STUDENT CODE (05.2: step unless a gradient overflowed)
  if (!unscaled_) unscale(params);
  if (found_inf_) return false;
  optimizer.step();
  return true;
  // END STUDENT CODE
}

void LossScaler::update() {
  // BEGIN STUDENT CODE (05.2: grow or back off the scale)
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  found_inf_ = false;
  unscaled_ = false;
  // END STUDENT CODE
}

}  // namespace lab05

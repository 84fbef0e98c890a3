#include "ddplab/grad_scaler.h"

#include <fmt/format.h>

#include "ddplab/dist/communicator.h"
#include "ddplab/error.h"

namespace ddplab::amp {

GradScaler::GradScaler(const GradScalerOptions& options, dist::Communicator* comm)
    : options_(options), comm_(comm), scale_(options.init_scale) {
  if (!(options.init_scale > 0) || !(options.growth_factor > 1) || !(options.backoff_factor > 0) ||
      !(options.backoff_factor < 1) || options.growth_interval < 1) {
    throw ConfigError(fmt::format(
        "loss scaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval >= 1 (got "
        "{}, {}, {}, {})",
        options.init_scale, options.growth_factor, options.backoff_factor, options.growth_interval));
  }
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const { return loss * scale_; }

bool GradScaler::step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  bool found = false;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    torch::Tensor g = p.mutable_grad();
    g.div_(scale_);
    found = found || !torch::isfinite(g).all().item<bool>();
  }
  if (comm_ != nullptr && comm_->size() > 1) {
    // One decision for every rank: skipped on all if any rank saw inf/NaN (GradScaler's found_inf).
    torch::Tensor flag = torch::tensor({found ? 1.0F : 0.0F});
    if (!params.empty()) flag = flag.to(params.front().device());
    comm_->allreduce(flag);
    found = flag.item<float>() > 0;
  }
  if (found) {
    ++skipped_;
    scale_ *= options_.backoff_factor;
    tracker_ = 0;
    return false;
  }
  optimizer.step();
  if (++tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    tracker_ = 0;
  }
  return true;
}

void GradScaler::load(double scale, int64_t growth_tracker) {
  if (!(scale > 0) || growth_tracker < 0) {
    throw ConfigError(fmt::format("loss scaler: a saved scale {} / growth tracker {} is not a scaler's state", scale,
                                  growth_tracker));
  }
  scale_ = scale;
  tracker_ = growth_tracker;
}

}  // namespace ddplab::amp

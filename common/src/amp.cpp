// LibTorch's autocast API across versions (amp.h). 1.13 has device-specific functions
// (set_cpu_enabled, set_autocast_gpu_dtype, ...); 2.4 added device-generic ones
// (pytorch/pytorch#124359) and deprecated the old names.
#include "ddplab/amp.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <torch/version.h>

#include "ddplab/error.h"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DDPLAB_AUTOCAST_GENERIC 1
#endif

namespace ddplab::amp {
namespace {

void check_device(torch::DeviceType d) {
  if (d != torch::kCPU && d != torch::kCUDA) {
    throw ConfigError(fmt::format("autocast: device {} is not supported (cpu or cuda)", c10::DeviceTypeName(d)));
  }
}

}  // namespace

bool autocast_enabled(torch::DeviceType device) {
  check_device(device);
#ifdef DDPLAB_AUTOCAST_GENERIC
  return at::autocast::is_autocast_enabled(device);
#else
  return device == torch::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

void set_autocast_enabled(torch::DeviceType device, bool enabled) {
  check_device(device);
#ifdef DDPLAB_AUTOCAST_GENERIC
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == torch::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

torch::ScalarType autocast_dtype(torch::DeviceType device) {
  check_device(device);
#ifdef DDPLAB_AUTOCAST_GENERIC
  return at::autocast::get_autocast_dtype(device);
#else
  return device == torch::kCPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
#endif
}

void set_autocast_dtype(torch::DeviceType device, torch::ScalarType dtype) {
  check_device(device);
  try {
#ifdef DDPLAB_AUTOCAST_GENERIC
    at::autocast::set_autocast_dtype(device, dtype);
#else
    if (device == torch::kCPU) {
      at::autocast::set_autocast_cpu_dtype(dtype);
    } else {
      at::autocast::set_autocast_gpu_dtype(dtype);
    }
#endif
  } catch (const c10::Error& e) {
    throw ConfigError(fmt::format("autocast to {} on {} is not supported by LibTorch {}: {}", c10::toString(dtype),
                                  c10::DeviceTypeName(device), TORCH_VERSION, e.what_without_backtrace()));
  }
}

torch::ScalarType low_precision_dtype(torch::DeviceType device) {
  check_device(device);
  return device == torch::kCPU ? torch::kBFloat16 : torch::kHalf;
}

int increment_nesting() { return at::autocast::increment_nesting(); }
int decrement_nesting() { return at::autocast::decrement_nesting(); }
void clear_cache() { at::autocast::clear_cache(); }

Fp16Loss fp16_loss(const torch::Tensor& grad, double scale) {
  torch::NoGradGuard no_grad;
  const torch::Tensor g = scale == 1.0 ? grad : grad * scale;
  const torch::Tensor h = g.to(torch::kHalf);
  const torch::Tensor nz = g.ne(0);
  Fp16Loss out;
  out.nonzero = nz.sum().item<int64_t>();
  out.flushed = (nz & h.eq(0)).sum().item<int64_t>();
  out.overflow = (nz & h.isinf() & g.isfinite()).sum().item<int64_t>();
  return out;
}

void round_through_fp16_(torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  grad.copy_(grad.to(torch::kHalf));
}

AutocastGuard::AutocastGuard(torch::DeviceType device, bool enabled)
    : AutocastGuard(device, enabled, low_precision_dtype(device)) {}

AutocastGuard::AutocastGuard(torch::DeviceType device, bool enabled, torch::ScalarType dtype)
    : device_(device), was_(autocast_enabled(device)), dtype_(autocast_dtype(device)) {
  if (enabled) set_autocast_dtype(device, dtype);
  set_autocast_enabled(device, enabled);
  increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (decrement_nesting() == 0) clear_cache();
  set_autocast_enabled(device_, was_);
  if (autocast_dtype(device_) != dtype_) set_autocast_dtype(device_, dtype_);
}

}  // namespace ddplab::amp

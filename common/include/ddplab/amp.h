// Mixed precision support the labs share (lab 05): LibTorch's autocast state behind one API that
// compiles against 1.13 (device-specific calls) and 2.4+ (device-generic calls), and the fp16
// rounding used to emulate fp16 gradients on a CPU build, which has no fp16 matmul kernels.
// LibTorch has no C++ autocast guard and no GradScaler: lab 05's student writes both on top of this.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace ddplab::amp {

/// Whether autocast is on for `device` (kCPU or kCUDA) on this thread (autocast state is thread-local).
bool autocast_enabled(torch::DeviceType device);
void set_autocast_enabled(torch::DeviceType device, bool enabled);
/// The dtype autocast casts to on `device`.
torch::ScalarType autocast_dtype(torch::DeviceType device);
/// Throws ConfigError naming the device and dtype when this LibTorch cannot autocast to it (1.13
/// on CPU: bfloat16 only).
void set_autocast_dtype(torch::DeviceType device, torch::ScalarType dtype);
/// The low-precision dtype of the course for `device`: bfloat16 on CPU, float16 on CUDA.
torch::ScalarType low_precision_dtype(torch::DeviceType device);
/// Autocast's nesting counter and its cache of low-precision weight copies (at::autocast).
int increment_nesting();
int decrement_nesting();
void clear_cache();

/// Autocast on `device` switched to `enabled` for the scope's lifetime, in `dtype` (default: the
/// course's low precision for the device), then restored - state and dtype - as torch.autocast's
/// context manager does. `enabled` false switches autocast off inside (a scope that re-runs a
/// forward as it first ran, recomputation's). The kit's version of lab 05's exercise 05.1; labs
/// 07 and 09 use it.
class AutocastGuard {
 public:
  AutocastGuard(torch::DeviceType device, bool enabled);
  AutocastGuard(torch::DeviceType device, bool enabled, torch::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  torch::DeviceType device_;
  bool was_;
  torch::ScalarType dtype_;
};

/// Elements of `grad` that are not zero in float32 and that float16 storage would flush to zero
/// (|x| below fp16's smallest subnormal, 2^-24 = 5.96e-8) or overflow to infinity (|x| > 65504),
/// after multiplying by `scale`.
struct Fp16Loss {
  int64_t nonzero = 0;   ///< non-zero elements in float32
  int64_t flushed = 0;   ///< of those, zero in float16
  int64_t overflow = 0;  ///< of those, infinite in float16
};
Fp16Loss fp16_loss(const torch::Tensor& grad, double scale = 1.0);

/// Replaces `grad` (float32) by its value rounded through float16: fp16 gradient storage.
void round_through_fp16_(torch::Tensor& grad);

}  // namespace ddplab::amp

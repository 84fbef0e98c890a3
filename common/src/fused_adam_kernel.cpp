// The one-pass Adam's element loop, compiled for AVX2+FMA and for the baseline and chosen at run
// time. -ffp-contract=off keeps ATen's roundings (its kernels fuse only where written below with
// fma); -fno-math-errno lets sqrt vectorize.
#include "fused_adam_kernel.h"

#include <cmath>

namespace ddplab::optim::detail {
namespace {

// torch::optim::Adam::step (LibTorch 1.13), element by element, with ATen's vector kernels:
//   grad = grad + wd * p                              grad.add(p, wd): fmadd
//   m = m * b1;  m = m + (1 - b1) * grad              mul_, add_ with alpha: fmadd
//   v = v * b2;  v = v + ((1 - b2) * grad) * grad     mul_, addcmul_
//   denom = sqrt(v) / sqrt(bias2) + eps               sqrt, div, add_
//   p = p + ((-lr / bias1) * m) / denom               addcdiv_
// A null g is a zero gradient: fma(a, 0, x) = x and x + 0 = x, so m*b1 and v*b2 come out as with
// a zeroed gradient.
template <bool kHasGrad>
__attribute__((always_inline)) inline void update(float* __restrict p, const float* __restrict g, float* __restrict m,
                                                  float* __restrict v, int64_t n, const AdamCoefficients& c,
                                                  bool decay) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = kHasGrad ? g[i] : 0.0f;
    const float grad = decay ? std::fma(c.weight_decay, p[i], gi) : gi;
    const float mi = std::fma(c.one_minus_beta1, grad, m[i] * c.beta1);
    const float vi = v[i] * c.beta2 + (c.one_minus_beta2 * grad) * grad;
    const float denom = std::sqrt(vi) / c.bias2_sqrt + c.eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] + (c.neg_step_size * mi) / denom;
  }
}

__attribute__((target("avx2,fma"))) void update_avx2(float* p, const float* g, float* m, float* v, int64_t n,
                                                     const AdamCoefficients& c, bool decay) {
  if (g != nullptr) {
    update<true>(p, g, m, v, n, c, decay);
  } else {
    update<false>(p, g, m, v, n, c, decay);
  }
}

void update_baseline(float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c, bool decay) {
  if (g != nullptr) {
    update<true>(p, g, m, v, n, c, decay);
  } else {
    update<false>(p, g, m, v, n, c, decay);
  }
}

template <int64_t kWidth>
__attribute__((always_inline)) inline void update_rows(float* __restrict p, float* __restrict m, float* __restrict v,
                                                       int64_t rows, const int32_t* __restrict slot,
                                                       const float* __restrict sums, const AdamCoefficients& c,
                                                       bool decay) {
  alignas(64) static const float kZero[kWidth] = {};
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = slot[r] >= 0 ? sums + static_cast<int64_t>(slot[r]) * kWidth : kZero;
    update<true>(p + r * kWidth, g, m + r * kWidth, v + r * kWidth, kWidth, c, decay);
  }
}

__attribute__((target("avx2,fma"))) void update_rows16_avx2(float* p, float* m, float* v, int64_t rows,
                                                            const int32_t* slot, const float* sums,
                                                            const AdamCoefficients& c, bool decay) {
  update_rows<16>(p, m, v, rows, slot, sums, c, decay);
}

void update_rows16_baseline(float* p, float* m, float* v, int64_t rows, const int32_t* slot, const float* sums,
                            const AdamCoefficients& c, bool decay) {
  update_rows<16>(p, m, v, rows, slot, sums, c, decay);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

}  // namespace

void adam_update_rows16(float* p, float* m, float* v, int64_t rows, const int32_t* slot, const float* sums,
                        const AdamCoefficients& c, bool decay) {
  if (has_avx2()) {
    update_rows16_avx2(p, m, v, rows, slot, sums, c, decay);
  } else {
    update_rows16_baseline(p, m, v, rows, slot, sums, c, decay);
  }
}

void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c, bool decay) {
  if (has_avx2()) {
    update_avx2(p, g, m, v, n, c, decay);
  } else {
    update_baseline(p, g, m, v, n, c, decay);
  }
}

}  // namespace ddplab::optim::detail

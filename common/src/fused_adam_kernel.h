#pragma once
// The one-pass Adam's element loop, in a file without LibTorch headers so that it can be compiled
// with its own floating-point flags (CMakeLists: -ffp-contract=off, -fno-math-errno).
#include <cstdint>

namespace ddplab::optim::detail {

/// Adam's scalars for one step, each rounded to float once as ATen rounds a double Scalar.
struct AdamCoefficients {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, bias2_sqrt, eps, neg_step_size, weight_decay;
};

/// p, m, v updated in place from g over n floats; weight decay applied when decay is true. A null
/// g is a zero gradient (a row no sample looked up), with exactly the roundings of zeros. g may
/// be null: a zero gradient (a row no sample looked up), with exactly the roundings of zeros.
void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c, bool decay);

/// Rows of 16 floats (DeepFM's embedding): row r's gradient is sums + 16 * slot[r], or zero where
/// slot[r] < 0; one pass over the table with no per-row call.
void adam_update_rows16(float* p, float* m, float* v, int64_t rows, const int32_t* slot, const float* sums,
                        const AdamCoefficients& c, bool decay);

}  // namespace ddplab::optim::detail

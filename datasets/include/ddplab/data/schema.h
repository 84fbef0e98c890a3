// The ctr-small workload's fixed shape (shared/workload.md): 13 dense and 26 categorical fields
// with fixed cardinalities. Everything that needs the layout of a sample includes this.
#pragma once

#include <array>
#include <cstdint>

namespace ddplab::data {

inline constexpr int kNumDense = 13;
inline constexpr int kNumSparse = 26;

/// Cardinality of each categorical field, in field order.
inline constexpr std::array<uint32_t, kNumSparse> kCardinality = {1000,  500,   20000, 10000, 200,   20,   10000,
                                                                  500,   3,     10000, 5000,  20000, 3000, 27,
                                                                  10000, 20000, 10,    5000,  2000,  4,    20000,
                                                                  15,    15,    20000, 100,   10000};

/// Row of field f's id 0 in one concatenated embedding table: the sum of the cardinalities before f.
inline constexpr std::array<uint32_t, kNumSparse> kOffset = [] {
  std::array<uint32_t, kNumSparse> off{};
  uint32_t sum = 0;
  for (int f = 0; f < kNumSparse; ++f) {
    off[f] = sum;
    sum += kCardinality[f];
  }
  return off;
}();

/// Total embedding rows over all fields (167,394).
inline constexpr uint32_t kTotalRows = kOffset[kNumSparse - 1] + kCardinality[kNumSparse - 1];
static_assert(kTotalRows == 167394, "workload.md: the cardinalities sum to 167,394 rows");

/// First index of the test split: training samples are [0, N), test samples [2^32, 2^32 + M).
inline constexpr uint64_t kTestBase = uint64_t{1} << 32;
/// First index of the samples used to calibrate the teacher's bias: [2^40, 2^40 + 200,000).
inline constexpr uint64_t kBiasBase = uint64_t{1} << 40;
inline constexpr uint64_t kBiasSamples = 200000;

/// One sample as stored in a shard record and handed to the loader (160 bytes, no padding).
struct Sample {
  uint32_t label;            ///< 0 or 1
  float dense[kNumDense];    ///< log1p(x_j) as float32: the model's dense input
  uint32_t ids[kNumSparse];  ///< per-field categorical id in [0, kCardinality[f])
};
static_assert(sizeof(Sample) == 160, "the shard record layout is 160 bytes");

}  // namespace ddplab::data

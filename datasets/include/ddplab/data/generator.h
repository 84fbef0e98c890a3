// The ctr-small recipe of shared/workload.md: a pure function from (seed, sample index) to a
// sample, so any index range can be generated on its own, in any order, on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ddplab/data/schema.h"

namespace ddplab::data {

/// The recipe's hash: splitmix64's finaliser.
uint64_t mix64(uint64_t z);
/// key(seed, stream) with streams kStreamSample = 1 and kStreamTeacher = 2.
uint64_t stream_key(uint64_t seed, uint64_t stream);
inline constexpr uint64_t kStreamSample = 1;
inline constexpr uint64_t kStreamTeacher = 2;
/// Uniform double in (0, 1) for (key, counter).
double u01(uint64_t key, uint64_t counter);
/// Standard normal (Box-Muller on counters c and c+1).
double normal(uint64_t key, uint64_t counter);

/// The teacher model that labels the data: first-order weights, 8-dim FM factors and dense
/// weights drawn from the TEACHER stream, plus the calibrated bias b (click rate 0.25).
struct Teacher {
  std::vector<double> w1;  ///< [kTotalRows]
  std::vector<double> v;   ///< [kTotalRows * 8], row-major
  double wd[kNumDense];
  double bias = 0.0;  ///< rounded to 4 decimal places, as the recipe says
  /// teacher_logit + bias for one sample.
  double logit(const Sample& s) const;
  /// teacher_logit (without the bias). The recipe uses log1p(x_j) in double; the sample stores it
  /// as float32, from which x_j (an integer <= 1e6) is recovered exactly, so this equals the
  /// generator's own value bit for bit and label == (u01 < sigmoid(logit(s))) holds exactly.
  double raw_logit(const Sample& s) const;
  /// teacher_logit from ids and the double log1p(x_j) values.
  double raw_logit(const uint32_t* ids, const double* dense_log1p) const;
};

/// Generates samples for one data seed. Construction builds the Zipf tables and the teacher and
/// calibrates the bias (about a second); sample() is then const and thread-safe.
class Generator {
 public:
  explicit Generator(uint64_t seed);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  uint64_t seed() const noexcept;
  const Teacher& teacher() const noexcept;
  /// Fills `out` with sample `index` (training split: [0, N); test split: kTestBase + [0, M)).
  void sample(uint64_t index, Sample& out) const;
  /// Fills out[0..count) with samples first .. first+count-1.
  void fill(uint64_t first, uint64_t count, Sample* out) const;

  /// Field f's Zipf CDF as the recipe defines it: the normalised cumulative sum of (j+1)^-1.1.
  const std::vector<double>& zipf_cdf(int field) const;
  /// Field f's id for uniform u through the guide table sample() uses; equal to
  /// min(upper_bound(cdf, u) - cdf.begin(), CARD[f] - 1) for every u.
  uint32_t zipf_id(int field, double u) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddplab::data

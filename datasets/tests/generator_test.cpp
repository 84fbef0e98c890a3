// Tests of the ctr-small generator against shared/workload.md: the published check values, a slow
// literal re-implementation of the recipe as the oracle, determinism in any order, and the teacher's
// statistics. Prints the generation rate per thread (not asserted: machines differ).
#include "ddplab/data/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

namespace ddplab::data {
namespace {

// Construction takes a good fraction of a second; the generator is immutable, so tests share it.
const Generator& gen1() {
  static const Generator g(1);
  return g;
}

bool same(const Sample& a, const Sample& b) { return std::memcmp(&a, &b, sizeof(Sample)) == 0; }

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// AUC by sorting, ties counted one half: the Mann-Whitney statistic.
double simple_auc(const std::vector<double>& scores, const std::vector<int>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double rank_sum = 0.0;
  double pos = 0.0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] == 1) {
        rank_sum += 0.5 * static_cast<double>(i + 1 + j);
        pos += 1.0;
      }
    }
    i = j;
  }
  const double neg = static_cast<double>(scores.size()) - pos;
  return (rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg);
}

// The recipe written out line by line with std::upper_bound: the oracle for the fast generator.
struct ReferenceRecipe {
  uint64_t key;
  std::vector<std::vector<double>> cdf;
  const Teacher& teacher;

  ReferenceRecipe(uint64_t seed, const Teacher& t) : key(stream_key(seed, kStreamSample)), teacher(t) {
    for (int f = 0; f < kNumSparse; ++f) {
      std::vector<double> c(kCardinality[f]);
      double s = 0.0;
      for (uint32_t j = 0; j < kCardinality[f]; ++j) c[j] = s += std::pow(j + 1.0, -1.1);
      for (double& x : c) x /= s;
      cdf.push_back(std::move(c));
    }
  }

  Sample sample(uint64_t i) const {
    Sample s{};
    for (int f = 0; f < kNumSparse; ++f) {
      const double u = u01(key, i * 64 + f);
      const auto n = static_cast<uint32_t>(std::upper_bound(cdf[f].begin(), cdf[f].end(), u) - cdf[f].begin());
      s.ids[f] = std::min(n, kCardinality[f] - 1);
    }
    double xlog[kNumDense];
    for (int j = 0; j < kNumDense; ++j) {
      const double x = std::clamp(std::floor(std::exp(1.0 + 1.5 * normal(key, i * 64 + 26 + 2 * j))), 0.0, 1e6);
      xlog[j] = std::log1p(x);
      s.dense[j] = static_cast<float>(xlog[j]);
    }
    // teacher_logit written as the recipe's formula, sums in field order.
    double logit = 0.0;
    for (int f = 0; f < kNumSparse; ++f) logit += teacher.w1[kOffset[f] + s.ids[f]];
    for (int j = 0; j < kNumDense; ++j) logit += teacher.wd[j] * (xlog[j] - 1.5);
    double fm = 0.0;
    for (int k = 0; k < 8; ++k) {
      double sum = 0.0;
      double sum_sq = 0.0;
      for (int f = 0; f < kNumSparse; ++f) {
        const double v = teacher.v[(kOffset[f] + s.ids[f]) * size_t{8} + k];
        sum += v;
        sum_sq += v * v;
      }
      fm += sum * sum - sum_sq;
    }
    logit += 0.5 * fm;
    s.label = u01(key, i * 64 + 52) < sigmoid(logit + teacher.bias) ? 1 : 0;
    return s;
  }
};

TEST(GeneratorTest, MatchesPublishedCheckValuesForSeed1) {
  const Generator& g = gen1();
  EXPECT_EQ(g.teacher().bias, -1.5994);
  Sample s;
  g.sample(0, s);
  const std::vector<uint32_t> want = {0, 0,  60, 2, 0,   3,  665, 66,   0,  55, 3, 13, 0,
                                      0, 48, 15, 2, 106, 19, 0,   1909, 10, 12, 0, 11, 10};
  EXPECT_EQ(std::vector<uint32_t>(s.ids, s.ids + kNumSparse), want);
  EXPECT_EQ(s.label, 0u);
  EXPECT_EQ(s.dense[0], static_cast<float>(std::log1p(3.0)));
  EXPECT_EQ(s.dense[1], static_cast<float>(std::log1p(0.0)));
  EXPECT_EQ(s.dense[2], static_cast<float>(std::log1p(1.0)));
}

TEST(GeneratorTest, HashPrimitivesFollowTheRecipe) {
  // splitmix64's finaliser of 0 is 0; of 1 it is a known constant.
  EXPECT_EQ(mix64(0), 0u);
  EXPECT_EQ(mix64(1), 0x5692161D100B05E5ULL);
  const uint64_t G = 0x9E3779B97F4A7C15ULL;
  EXPECT_EQ(stream_key(7, kStreamTeacher), mix64(mix64(7 * G + 2) + 0xD1B54A32D192ED03ULL));
  const uint64_t key = stream_key(1, kStreamSample);
  EXPECT_EQ(u01(key, 5), (static_cast<double>(mix64(key + 6 * G) >> 11) + 0.5) * std::ldexp(1.0, -53));
  double sum = 0.0;
  double sum_sq = 0.0;
  const int n = 200000;
  for (int c = 0; c < n; ++c) {
    const double u = u01(key, c);
    ASSERT_GT(u, 0.0);
    ASSERT_LE(u, 1.0);  // (2^53 - 1) + 0.5 rounds to 2^53: u01 can be exactly 1, once in 2^53
    const double z = normal(key, 2 * static_cast<uint64_t>(c));
    sum += z;
    sum_sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.01);
}

TEST(GeneratorTest, TeacherParametersComeFromTheTeacherStream) {
  const Teacher& t = gen1().teacher();
  const uint64_t key = stream_key(1, kStreamTeacher);
  const uint64_t R = kTotalRows;
  ASSERT_EQ(t.w1.size(), R);
  ASSERT_EQ(t.v.size(), R * 8);
  EXPECT_EQ(t.w1[0], 0.15 * normal(key, 0));
  EXPECT_EQ(t.w1[R - 1], 0.15 * normal(key, 2 * (R - 1)));
  EXPECT_EQ(t.v[0], 0.12 * normal(key, 2 * R));
  EXPECT_EQ(t.v[8 * R - 1], 0.12 * normal(key, 2 * (9 * R - 1)));
  EXPECT_EQ(t.wd[0], 0.20 * normal(key, 2 * 9 * R));
  EXPECT_EQ(t.wd[12], 0.20 * normal(key, 2 * (9 * R + 12)));
}

TEST(GeneratorTest, EqualsTheLiteralRecipeBitForBit) {
  const Generator& g = gen1();
  const ReferenceRecipe ref(1, g.teacher());
  const std::vector<uint64_t> starts = {0, 123456789, kTestBase, kBiasBase};
  for (uint64_t start : starts) {
    for (uint64_t i = start; i < start + 3000; ++i) {
      Sample fast;
      g.sample(i, fast);
      const Sample slow = ref.sample(i);
      ASSERT_TRUE(same(fast, slow)) << "sample " << i << " differs from the literal recipe";
    }
  }
}

TEST(GeneratorTest, FastZipfLookupEqualsUpperBound) {
  const Generator& g = gen1();
  const uint64_t key = stream_key(99, kStreamSample);
  for (int f = 0; f < kNumSparse; ++f) {
    const std::vector<double>& cdf = g.zipf_cdf(f);
    ASSERT_EQ(cdf.size(), kCardinality[f]);
    ASSERT_EQ(cdf.back(), 1.0);
    auto plain = [&](double u) {
      const auto n = static_cast<uint32_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      return std::min(n, kCardinality[f] - 1);
    };
    std::vector<double> us = {0.0, std::ldexp(1.0, -54), 0.5, 1.0, std::nextafter(1.0, 0.0)};
    // Every CDF value and its neighbours: exactly where upper_bound's answer changes.
    for (double c : cdf) {
      us.push_back(c);
      us.push_back(std::nextafter(c, 0.0));
      if (c < 1.0) us.push_back(std::nextafter(c, 2.0));
    }
    // Every bucket edge of any guide table up to 2^16 buckets, and its neighbours.
    for (int b = 0; b <= 65536; ++b) {
      const double e = b / 65536.0;
      us.push_back(e);
      if (e > 0.0) us.push_back(std::nextafter(e, 0.0));
      if (e < 1.0) us.push_back(std::nextafter(e, 2.0));
    }
    for (uint64_t c = 0; c < 100000; ++c) us.push_back(u01(key, c));
    for (double u : us) ASSERT_EQ(g.zipf_id(f, u), plain(u)) << "field " << f << ", u = " << u;
  }
}

TEST(GeneratorTest, DeterministicInAnyOrderAndRange) {
  const Generator& g = gen1();
  const uint64_t first = kTestBase - 500;  // spans the train/test boundary
  const uint64_t n = 1000;
  std::vector<Sample> forward(n);
  g.fill(first, n, forward.data());
  // The same index twice, and one by one in reverse order.
  for (uint64_t k = n; k-- > 0;) {
    Sample a;
    Sample b;
    g.sample(first + k, a);
    g.sample(first + k, b);
    ASSERT_TRUE(same(a, b));
    ASSERT_TRUE(same(a, forward[k])) << "sample() and fill() differ at " << first + k;
  }
  // Overlapping ranges agree on their overlap.
  std::vector<Sample> shifted(n);
  g.fill(first + 317, n, shifted.data());
  for (uint64_t k = 0; k + 317 < n; ++k) ASSERT_TRUE(same(shifted[k], forward[k + 317]));
  // A second generator with the same seed agrees; another seed does not.
  const Generator again(1);
  const Generator other(2);
  EXPECT_EQ(again.teacher().bias, g.teacher().bias);
  int differ = 0;
  for (uint64_t k = 0; k < 50; ++k) {
    Sample a;
    Sample b;
    again.sample(first + k, a);
    other.sample(first + k, b);
    EXPECT_TRUE(same(a, forward[k]));
    differ += same(a, b) ? 0 : 1;
  }
  EXPECT_EQ(differ, 50);
}

TEST(GeneratorTest, FieldsAreInRangeAndClickRateIsCalibrated) {
  const Generator& g = gen1();
  const uint64_t n = 20000;
  std::vector<Sample> s(n);
  g.fill(0, n, s.data());
  uint64_t positives = 0;
  uint64_t id0_field8 = 0;
  for (const Sample& x : s) {
    ASSERT_LE(x.label, 1u);
    for (int f = 0; f < kNumSparse; ++f) ASSERT_LT(x.ids[f], kCardinality[f]);
    for (float d : x.dense) {
      ASSERT_GE(d, 0.0f);
      ASSERT_LE(d, static_cast<float>(std::log1p(1e6)));
    }
    positives += x.label;
    id0_field8 += x.ids[8] == 0 ? 1 : 0;
  }
  // Binomial standard error at p = 0.25, n = 20000 is 0.0031: +-0.012 is about 4 sigma.
  EXPECT_NEAR(static_cast<double>(positives) / n, 0.25, 0.012);
  // Zipf 1.1 over 3 ids: P(id 0) = 1 / (1 + 2^-1.1 + 3^-1.1) = 0.5653; standard error 0.0035.
  EXPECT_NEAR(static_cast<double>(id0_field8) / n, 0.5653, 0.015);
}

TEST(GeneratorTest, BiasCalibratesTheMeanProbabilityOnItsSamples) {
  // The definition of b: the mean teacher probability over [2^40, 2^40 + 200,000) is 0.25, up to
  // rounding b to 4 places (|db| <= 5e-5 moves the mean by at most ~1e-5).
  const Generator& g = gen1();
  double sum = 0.0;
  Sample s;
  for (uint64_t k = 0; k < kBiasSamples; k += 4) {
    g.sample(kBiasBase + k, s);
    sum += sigmoid(g.teacher().logit(s));
  }
  EXPECT_NEAR(sum / (kBiasSamples / 4), 0.25, 0.002);  // every 4th sample: sampling error ~5e-4
}

TEST(GeneratorTest, LabelIsExactlyTheTeachersDecision) {
  const Generator& g = gen1();
  const uint64_t key = stream_key(1, kStreamSample);
  Sample s;
  for (uint64_t i = 0; i < 20000; ++i) {
    g.sample(i, s);
    const double p = sigmoid(g.teacher().logit(s));
    ASSERT_EQ(s.label, u01(key, i * 64 + 52) < p ? 1u : 0u) << "sample " << i;
  }
}

TEST(GeneratorTest, Float32DenseInputRecoversTheIntegerCount) {
  // Teacher::raw_logit(Sample) relies on this for every x the recipe can produce.
  for (int x = 0; x <= 1000000; ++x) {
    const float stored = static_cast<float>(std::log1p(static_cast<double>(x)));
    ASSERT_EQ(std::nearbyint(std::expm1(static_cast<double>(stored))), static_cast<double>(x)) << x;
  }
}

TEST(GeneratorTest, TeacherMetricsOnTheTestSplitMatchTheSpec) {
  // workload.md: on [2^32, 2^32 + 100,000) the teacher's AUC is 0.8076 and its log-loss 0.4385.
  const Generator& g = gen1();
  const uint64_t n = 100000;
  std::vector<Sample> s(n);
  g.fill(kTestBase, n, s.data());
  std::vector<double> probs(n);
  std::vector<int> labels(n);
  double logloss = 0.0;
  for (uint64_t i = 0; i < n; ++i) {
    probs[i] = sigmoid(g.teacher().logit(s[i]));
    labels[i] = static_cast<int>(s[i].label);
    logloss -= labels[i] == 1 ? std::log(probs[i]) : std::log1p(-probs[i]);
  }
  logloss /= n;
  const double auc = simple_auc(probs, labels);
  std::printf("[ teacher  ] test AUC %.4f (spec 0.8076), log-loss %.4f (spec 0.4385)\n", auc, logloss);
  EXPECT_NEAR(auc, 0.8076, 0.002);
  EXPECT_NEAR(logloss, 0.4385, 0.002);
}

TEST(GeneratorTest, ReportsConstructionTimeAndRatePerThread) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const Generator g(3);
  const double setup = std::chrono::duration<double>(Clock::now() - t0).count();
  const uint64_t n = 300000;
  std::vector<Sample> s(n);
  g.fill(0, n, s.data());  // warm up the tables and fault in the buffer
  const auto t1 = Clock::now();
  g.fill(n, n, s.data());
  const double secs = std::chrono::duration<double>(Clock::now() - t1).count();
  std::printf("[ rate     ] construction %.3f s; %.0f samples/s on one thread (target >= 500000)\n", setup, n / secs);
  EXPECT_GT(n / secs, 0.0);
}

}  // namespace
}  // namespace ddplab::data

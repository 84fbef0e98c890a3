// Exact AUC and log-loss against hand-computed values and a brute-force pair count.
#include "ddplab/metrics.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "ddplab/error.h"

namespace {

double brute_force_auc(const std::vector<float>& s, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[i] > 0.5f && y[j] < 0.5f) {
        den += 1;
        num += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
    }
  }
  return num / den;
}

TEST(ExactAuc, HandExamples) {
  EXPECT_DOUBLE_EQ(ddplab::metrics::exact_auc({0.1f, 0.9f}, {0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(ddplab::metrics::exact_auc({0.9f, 0.1f}, {0, 1}), 0.0);
  EXPECT_DOUBLE_EQ(ddplab::metrics::exact_auc({0.5f, 0.5f}, {0, 1}), 0.5);  // a tie counts one half
  // Positives at 0.8 and 0.4, negatives at 0.6 and 0.2: 3 of 4 pairs ordered.
  EXPECT_DOUBLE_EQ(ddplab::metrics::exact_auc({0.8f, 0.6f, 0.4f, 0.2f}, {1, 0, 1, 0}), 0.75);
}

TEST(ExactAuc, MatchesBruteForceWithManyTies) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(0, 9);  // only 10 distinct scores: many ties
  std::bernoulli_distribution click(0.3);
  for (int n : {2, 3, 17, 500}) {
    std::vector<float> s, y;
    for (int i = 0; i < n; ++i) {
      s.push_back(static_cast<float>(level(rng)) / 10.0f);
      y.push_back(click(rng) ? 1.0f : 0.0f);
    }
    y[0] = 1.0f;
    y[1] = 0.0f;
    EXPECT_NEAR(ddplab::metrics::exact_auc(s, y), brute_force_auc(s, y), 1e-12) << "n=" << n;
  }
}

TEST(ExactAuc, IsNaNForADivergedModel) {
  // A model whose weights went NaN scores NaN; NaN != NaN must not stall the tie grouping.
  const float nan = std::nanf("");
  EXPECT_TRUE(std::isnan(ddplab::metrics::exact_auc({nan, nan, nan}, {0, 1, 0})));
  EXPECT_TRUE(std::isnan(ddplab::metrics::exact_auc({0.1f, nan, 0.9f}, {0, 1, 1})));
}

TEST(ExactAuc, RejectsOneClassAndSizeMismatch) {
  EXPECT_THROW(ddplab::metrics::exact_auc({0.1f, 0.2f}, {1, 1}), ddplab::Error);
  EXPECT_THROW(ddplab::metrics::exact_auc({0.1f}, {1, 0}), ddplab::Error);
}

TEST(LogLoss, HandValuesAndClamp) {
  EXPECT_NEAR(ddplab::metrics::log_loss({0.5f, 0.5f}, {0, 1}), std::log(2.0), 1e-7);
  EXPECT_NEAR(ddplab::metrics::log_loss({0.9f, 0.2f}, {1, 0}), -(std::log(0.9) + std::log(0.8)) / 2, 1e-6);
  // A confident mistake is large but finite thanks to the clamp at 1e-7.
  const double worst = ddplab::metrics::log_loss({0.0f}, {1});
  EXPECT_TRUE(std::isfinite(worst));
  EXPECT_NEAR(worst, -std::log(1e-7), 1e-6);
  EXPECT_THROW(ddplab::metrics::log_loss({}, {}), ddplab::Error);
}

}  // namespace

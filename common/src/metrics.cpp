// Exact AUC by sorting (ties averaged) and clamped log-loss.
#include "ddplab/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ddplab/error.h"

namespace ddplab::metrics {

double exact_auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  DDPLAB_CHECK(scores.size() == labels.size(), "exact_auc: " + std::to_string(scores.size()) + " scores but " +
                                                   std::to_string(labels.size()) + " labels");
  const size_t n = scores.size();
  // A diverged model scores NaN: no ranking exists (and NaN != NaN would stall the tie loop below).
  for (float v : scores) {
    if (std::isnan(v)) return std::numeric_limits<double>::quiet_NaN();
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U: sum of the (tie-averaged) ranks of the positives.
  double rank_sum = 0.0;
  double positives = 0.0;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double avg_rank = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += avg_rank;
        positives += 1.0;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  DDPLAB_CHECK(positives > 0 && negatives > 0,
               "exact_auc: needs both classes, got " + std::to_string(static_cast<long long>(positives)) +
                   " positives and " + std::to_string(static_cast<long long>(negatives)) + " negatives");
  return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives);
}

double log_loss(const std::vector<float>& probs, const std::vector<float>& labels) {
  DDPLAB_CHECK(probs.size() == labels.size(), "log_loss: " + std::to_string(probs.size()) + " probabilities but " +
                                                  std::to_string(labels.size()) + " labels");
  DDPLAB_CHECK(!probs.empty(), "log_loss: no samples");
  double sum = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double p = std::clamp(static_cast<double>(probs[i]), 1e-7, 1.0 - 1e-7);
    sum -= labels[i] > 0.5f ? std::log(p) : std::log1p(-p);
  }
  return sum / static_cast<double>(probs.size());
}

double mean(const std::vector<float>& values) {
  if (values.empty()) return 0.0;
  double s = 0.0;
  for (float v : values) s += v;
  return s / static_cast<double>(values.size());
}

}  // namespace ddplab::metrics

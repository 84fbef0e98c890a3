// Model-quality metrics reported by every lab and recomputed by the grader: exact ROC AUC
// (ties count one half) and binary log-loss. Definitions: docs/concepts/metrics.md.
#pragma once

#include <cstddef>
#include <vector>

namespace ddplab::metrics {

/// Exact ROC AUC of scores against 0/1 labels: the probability that a random positive scores
/// above a random negative, ties counted as one half. O(n log n). Throws ddplab::Error when the
/// sizes differ or either class is absent.
/// NaN when any score is NaN (a diverged model): there is no ranking to measure.
double exact_auc(const std::vector<float>& scores, const std::vector<float>& labels);

/// Mean binary cross-entropy of probabilities against 0/1 labels, probabilities clamped to
/// [1e-7, 1 - 1e-7] (the clamp keeps one confident mistake from making the mean infinite).
double log_loss(const std::vector<float>& probs, const std::vector<float>& labels);

/// Mean of labels (click-through rate).
double mean(const std::vector<float>& values);

}  // namespace ddplab::metrics

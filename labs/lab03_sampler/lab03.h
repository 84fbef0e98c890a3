// Lab 03 (DistributedSampler): the functions the student implements in lab03_student.cpp. The
// sampler class that puts them together, used by the driver and the tests, is in sampler.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ddplab/error.h"

namespace lab03 {

/// How a rank's share is laid out in the (tail-fitted) order of W ranks.
enum class ShardMode {
  kStrided,     ///< rank r takes order[r], order[r+W], order[r+2W], ... (PyTorch's DistributedSampler)
  kContiguous,  ///< rank r takes one block: order[r*m .. (r+1)*m), m = size / W ("split the file list")
};
/// What to do with the size % W samples that do not fill a last round across the W ranks.
enum class TailPolicy {
  kPad,   ///< repeat samples from the start of the order until the size is a multiple of W
  kDrop,  ///< drop the last size % W samples
};

/// Exercise 03.1: rank `rank`'s share of `order` among `world` ranks.
///
/// Contract: order.size() is a multiple of world (03.3 makes it so; otherwise throw
/// ddplab::Error). The W shares are disjoint as positions of `order`, cover it, and are equally
/// long (size / W). kStrided: share[j] = order[j*W + rank]: step k of N ranks at per-rank batch B
/// then takes exactly the k-th global batch of N*B of one process walking `order`.
/// kContiguous: share[j] = order[rank*m + j].
std::vector<uint64_t> shard(const std::vector<uint64_t>& order, int rank, int world, ShardMode mode);

/// Exercise 03.2: the order of the sample positions 0..n-1 for one epoch.
///
/// Contract: a permutation of [0, n) that depends only on (seed, epoch) — the same on every rank
/// and every run — and differs from epoch to epoch; with shuffle == false, 0, 1, ..., n-1.
std::vector<uint64_t> epoch_order(uint64_t n, uint64_t seed, int64_t epoch, bool shuffle);

/// Exercise 03.3: make the order's length a multiple of `world`, so every rank takes the same
/// number of samples (and of steps: no rank waits at a collective for peers that ran out).
///
/// Contract: kPad appends order[0], order[1], ... (from the start again if the order is shorter
/// than what is missing) until the size is a multiple of world — fewer than `world` samples, seen
/// twice this epoch; kDrop removes the last size % world samples. Already a multiple: unchanged.
std::vector<uint64_t> fit_tail(std::vector<uint64_t> order, int world, TailPolicy tail);

/// Exercise 03.4: reorder `order` (size a multiple of world) so that every rank's shard has the
/// same share of clicks, as nearly as counts allow.
///
/// Contract: returns the same multiset of indices such that shard(result, r, world, mode) for
/// r = 0..world-1:
///  - holds size/world samples, of which the positives (labels[index] != 0; `labels` is indexed
///    by sample index) number floor or ceil of P/world (P: positives in `order`), so each rank's
///    click rate is within 1/(size/world) of the global one: deal the positives round-robin to
///    ranks 0, 1, 2, ..., then the negatives continuing the same rotation;
///  - keeps the relative order of `order` within each class (a rank's positives appear in the
///    order they had in `order`, likewise its negatives);
///  - spreads its p positives evenly over its m samples, so each batch sees the rank's rate too:
///    its j-th sample (j = 0..m-1) is a positive exactly when floor((j+1)*p/m) > floor(j*p/m).
std::vector<uint64_t> stratify(const std::vector<uint64_t>& order, const std::vector<uint8_t>& labels, int world,
                               ShardMode mode);

}  // namespace lab03

// Lab 03 exercises: the pieces of a DistributedSampler — disjoint shards, a fresh shared order
// every epoch, an even tail, and (optionally) the same click rate on every rank.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "lab03.h"
#include "ddplab/data/loader.h"
#include "ddplab/error.h"

namespace lab03 {

std::vector<uint64_t> shard(const std::vector<uint64_t>& order, int rank, int world, ShardMode mode) {
  // BEGIN STUDENT CODE (03.1: disjoint shards)
  if (world > 0) return order;  // PLANTED BUG: every rank takes the whole order
  const size_t w = static_cast<size_t>(world);
  if (world < 1 || rank < 0 || rank >= world || order.size() % w != 0) {
    throw ddplab::Error("shard: the order's size must be a multiple of the world size and 0 <= rank < world");
  }
  const size_t m = order.size() / w;
  const size_t r = static_cast<size_t>(rank);
  std::vector<uint64_t> mine(m);
  for (size_t j = 0; j < m; ++j) {
    // Strided: step k of W ranks takes one process's k-th global batch. Contiguous: one block.
    mine[j] = mode == ShardMode::kStrided ? order[j * w + r] : order[r * m + j];
  }
  return mine;
  // END STUDENT CODE
}

std::vector<uint64_t> epoch_order(uint64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  // BEGIN STUDENT CODE (03.2: a fresh shared order every epoch)
  // The epoch is part of the key: the same seed on every rank gives every rank the same
  // permutation, and a new epoch gives a new one (what set_epoch is for).
  if (!shuffle) return ddplab::data::sequential_order(n);
  return ddplab::data::shuffled_order(n, seed, static_cast<uint64_t>(epoch));
  // END STUDENT CODE
}

std::vector<uint64_t> fit_tail(std::vector<uint64_t> order, int world, TailPolicy tail) {
  // BEGIN STUDENT CODE (03.3: even tails)
  const size_t w = static_cast<size_t>(world);
  const size_t extra = order.size() % w;
  if (extra == 0) return order;
  if (tail == TailPolicy::kDrop) {
    order.resize(order.size() - extra);
    return order;
  }
  const size_t n = order.size();
  const size_t missing = w - extra;
  for (size_t i = 0; i < missing; ++i) order.push_back(order[i % n]);
  return order;
  // END STUDENT CODE
}

std::vector<uint64_t> stratify(const std::vector<uint64_t>& order, const std::vector<uint8_t>& labels, int world,
                               ShardMode mode) {
  // BEGIN STUDENT CODE (03.4: the same click rate on every rank)
  const size_t w = static_cast<size_t>(world);
  if (order.size() % w != 0) throw ddplab::Error("stratify: the order's size must be a multiple of the world size");
  const size_t m = order.size() / w;
  // Deal positives round-robin, then negatives continuing the rotation: rank r gets the k-th item
  // of (positives ++ negatives) when k % W == r. Each rank gets m items and floor/ceil(P/W) clicks.
  std::vector<std::vector<uint64_t>> pos(w), neg(w);
  size_t k = 0;
  for (uint64_t i : order) {
    if (labels.at(i) != 0) pos[k++ % w].push_back(i);
  }
  for (uint64_t i : order) {
    if (labels.at(i) == 0) neg[k++ % w].push_back(i);
  }
  std::vector<uint64_t> out(order.size());
  for (size_t r = 0; r < w; ++r) {
    // Spread the rank's p positives evenly over its m slots (Bresenham), each class in order.
    const size_t p = pos[r].size();
    size_t ip = 0, in = 0;
    for (size_t j = 0; j < m; ++j) {
      const bool positive = (j + 1) * p / m > j * p / m;
      const uint64_t id = positive ? pos[r][ip++] : neg[r][in++];
      out[mode == ShardMode::kStrided ? j * w + r : r * m + j] = id;
    }
  }
  return out;
  // END STUDENT CODE
}

}  // namespace lab03

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
  throw ddplab::NotImplemented("03.1", "shard: this rank's equal, disjoint share of the order (strided or contiguous)");
  // END STUDENT CODE
}

std::vector<uint64_t> epoch_order(uint64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  // BEGIN STUDENT CODE (03.2: a fresh shared order every epoch)
  throw ddplab::NotImplemented("03.2", "epoch_order: a permutation of 0..n-1 from (seed, epoch) alone");
  // END STUDENT CODE
}

std::vector<uint64_t> fit_tail(std::vector<uint64_t> order, int world, TailPolicy tail) {
  // BEGIN STUDENT CODE (03.3: even tails)
  throw ddplab::NotImplemented("03.3", "fit_tail: pad or drop to a multiple of the world size");
  // END STUDENT CODE
}

std::vector<uint64_t> stratify(const std::vector<uint64_t>& order, const std::vector<uint8_t>& labels, int world,
                               ShardMode mode) {
  // BEGIN STUDENT CODE (03.4: the same click rate on every rank)
  throw ddplab::NotImplemented("03.4", "stratify: deal the positives round-robin, then the negatives");
  // END STUDENT CODE
}

}  // namespace lab03

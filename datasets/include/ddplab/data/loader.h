// Turns a dataset and an order of sample indices into model-ready batches of tensors. Which
// indices a rank visits, and in what order, is the sampler's job (labs 03, 08); the loader only
// gathers records and converts them.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "ddplab/data/shard.h"

namespace ddplab::data {

/// One mini-batch. rows are global embedding rows (kOffset[f] + id), ready for an embedding bag.
struct Batch {
  torch::Tensor dense;            ///< [B, 13] float32
  torch::Tensor rows;             ///< [B, 26] int64
  torch::Tensor labels;           ///< [B] float32, 0 or 1
  std::vector<uint64_t> indices;  ///< dataset index of each sample, in batch order
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

/// Gathers samples ds[order[i]] into a batch on the CPU (pinned when `pin` is set, for a fast
/// copy to a GPU). Throws DataError if an index is out of range.
Batch make_batch(const Dataset& ds, const uint64_t* order, size_t count, bool pin = false);
/// Converts samples already in memory (e.g. straight from the Generator) into a batch; their
/// indices are first_index, first_index + 1, ...
Batch make_batch(const Sample* samples, size_t count, uint64_t first_index);

/// Where a training loop gets its batches: the plain loader below, or a prefetching one that
/// assembles batches ahead of the step (lab 08). The run times each next() as the step's data wait.
class Loader {
 public:
  virtual ~Loader() = default;
  /// Fills `out` with the next batch (on the loader's device); false at the end of the pass.
  virtual bool next(Batch& out) = 0;
};

/// Iterates `order` in consecutive batches of `batch_size`; the last batch may be smaller unless
/// drop_last is set. Assembles each batch when it is asked for (no prefetching).
class BatchLoader final : public Loader {
 public:
  BatchLoader(const Dataset& ds, std::vector<uint64_t> order, int64_t batch_size, torch::Device device = torch::kCPU,
              bool drop_last = false);
  /// Fills `out` with the next batch (moved to the device); false at the end of the order.
  bool next(Batch& out) override;
  /// Number of batches in one pass.
  int64_t num_batches() const;
  const std::vector<uint64_t>& order() const noexcept { return order_; }

 private:
  const Dataset& ds_;
  std::vector<uint64_t> order_;
  int64_t batch_size_;
  torch::Device device_;
  bool drop_last_;
  size_t pos_ = 0;
};

/// 0, 1, ..., n-1.
std::vector<uint64_t> sequential_order(uint64_t n);
/// A permutation of 0..n-1 determined by (seed, epoch) alone: the same on every rank and every
/// machine (std::shuffle is not portable across standard libraries, so this is a Fisher-Yates
/// over the kit's own mix64-based generator).
std::vector<uint64_t> shuffled_order(uint64_t n, uint64_t seed, uint64_t epoch);

/// Rank `rank`'s share of `steps` global batches of `world` x `batch` samples taken from the front
/// of `order`: positions [k*G + rank*batch, k*G + (rank+1)*batch) for k < steps, G = world x batch.
/// So N ranks at batch B step k together on the k-th global batch one process at batch N x B
/// would take. Throws std::invalid_argument if `order` holds fewer than steps x G samples.
std::vector<uint64_t> global_batch_slice(const std::vector<uint64_t>& order, int64_t steps, int64_t batch, int rank,
                                         int world);

}  // namespace ddplab::data

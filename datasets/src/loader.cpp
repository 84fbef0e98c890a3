// Batch assembly: copy fixed-size records out of the memory-mapped shards into tensors.
#include "ddplab/data/loader.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "ddplab/data/error.h"
#include "ddplab/data/generator.h"

namespace ddplab::data {
namespace {
__extension__ typedef unsigned __int128 u128;  // for the multiply-shift range reduction

/// Allocates the batch tensors and converts sample(i) for i in [0, count) into row i.
template <typename SampleAt>
Batch fill_batch(size_t count, bool pin, SampleAt sample) {
  Batch b;
  auto opts = torch::TensorOptions().pinned_memory(pin);
  const auto n = static_cast<int64_t>(count);
  b.dense = torch::empty({n, kNumDense}, opts.dtype(torch::kFloat32));
  b.rows = torch::empty({n, kNumSparse}, opts.dtype(torch::kInt64));
  b.labels = torch::empty({n}, opts.dtype(torch::kFloat32));
  float* dense = b.dense.data_ptr<float>();
  int64_t* rows = b.rows.data_ptr<int64_t>();
  float* labels = b.labels.data_ptr<float>();
  for (size_t i = 0; i < count; ++i) {
    const Sample& s = sample(i);
    std::copy(s.dense, s.dense + kNumDense, dense + i * kNumDense);
    for (int f = 0; f < kNumSparse; ++f) rows[i * kNumSparse + f] = int64_t{kOffset[f]} + s.ids[f];
    labels[i] = static_cast<float>(s.label);
  }
  return b;
}
}  // namespace

Batch make_batch(const Dataset& ds, const uint64_t* order, size_t count, bool pin) {
  Batch b = fill_batch(count, pin, [&](size_t i) -> const Sample& { return ds[order[i]]; });
  b.indices.assign(order, order + count);
  return b;
}

Batch make_batch(const Sample* samples, size_t count, uint64_t first_index) {
  Batch b = fill_batch(count, false, [&](size_t i) -> const Sample& { return samples[i]; });
  b.indices.resize(count);
  std::iota(b.indices.begin(), b.indices.end(), first_index);
  return b;
}

BatchLoader::BatchLoader(const Dataset& ds, std::vector<uint64_t> order, int64_t batch_size, torch::Device device,
                         bool drop_last)
    : ds_(ds), order_(std::move(order)), batch_size_(batch_size), device_(device), drop_last_(drop_last) {
  if (batch_size_ <= 0) throw DataError(ds.dir(), "batch size must be positive, got " + std::to_string(batch_size));
}

int64_t BatchLoader::num_batches() const {
  const auto n = static_cast<int64_t>(order_.size());
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

bool BatchLoader::next(Batch& out) {
  const size_t remaining = order_.size() - pos_;
  if (remaining == 0 || (drop_last_ && remaining < static_cast<size_t>(batch_size_))) return false;
  const size_t count = std::min(remaining, static_cast<size_t>(batch_size_));
  const bool to_gpu = !device_.is_cpu();
  out = make_batch(ds_, order_.data() + pos_, count, to_gpu);
  pos_ += count;
  if (to_gpu) {
    out.dense = out.dense.to(device_, /*non_blocking=*/true);
    out.rows = out.rows.to(device_, true);
    out.labels = out.labels.to(device_, true);
  }
  return true;
}

std::vector<uint64_t> sequential_order(uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), uint64_t{0});
  return v;
}

std::vector<uint64_t> shuffled_order(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> v = sequential_order(n);
  const uint64_t key = mix64(mix64(seed * 0x9E3779B97F4A7C15ULL + epoch) + 0x5851F42D4C957F2DULL);
  for (uint64_t i = n; i > 1; --i) {
    // Uniform j in [0, i): the multiply-shift reduction of a 64-bit hash (bias < 2^-32 here).
    const uint64_t r = mix64(key + i * 0x9E3779B97F4A7C15ULL);
    const auto j = static_cast<uint64_t>((static_cast<u128>(r) * i) >> 64);
    std::swap(v[i - 1], v[j]);
  }
  return v;
}

std::vector<uint64_t> global_batch_slice(const std::vector<uint64_t>& order, int64_t steps, int64_t batch, int rank,
                                         int world) {
  const int64_t global = batch * world;
  if (steps < 0 || batch < 1 || rank < 0 || rank >= world || static_cast<uint64_t>(steps * global) > order.size()) {
    throw std::invalid_argument("global_batch_slice: " + std::to_string(steps) + " steps of " + std::to_string(world) +
                                " x " + std::to_string(batch) + " samples (rank " + std::to_string(rank) +
                                ") need more than the order's " + std::to_string(order.size()));
  }
  std::vector<uint64_t> mine;
  mine.reserve(static_cast<size_t>(steps * batch));
  for (int64_t k = 0; k < steps; ++k) {
    const auto first = order.begin() + k * global + rank * batch;
    mine.insert(mine.end(), first, first + batch);
  }
  return mine;
}

}  // namespace ddplab::data

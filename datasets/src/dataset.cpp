// One split of a generated data set as a single random-access array: meta.json names the shards,
// each shard is memory-mapped, and a global index is found by binary search over shard starts.
// Opening cross-checks every shard against meta.json, so a mixed-up directory fails early.
#include <algorithm>
#include <cstddef>
#include <filesystem>

#include "ddplab/data/error.h"
#include "ddplab/data/shard.h"

namespace ddplab::data {

const char* split_name(Split s) { return s == Split::kTrain ? "train" : "test"; }

Dataset::Dataset(const std::string& dir, Split split, bool verify_checksums, bool in_memory)
    : dir_(dir), split_(split), meta_(read_metadata(dir)) {
  const bool train = split == Split::kTrain;
  const std::vector<std::string>& names = train ? meta_.train_shards : meta_.test_shards;
  const uint64_t expected = train ? meta_.train_count : meta_.test_count;
  const uint64_t base = train ? 0 : kTestBase;
  const std::string meta_file = (std::filesystem::path(dir) / "meta.json").string();
  if (names.empty() && expected > 0) {
    throw DataError(meta_file, std::string("lists no ") + split_name(split) + " shards for " +
                                   std::to_string(expected) + " samples");
  }
  shards_.reserve(names.size());
  starts_.reserve(names.size());
  for (const std::string& name : names) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    ShardReader shard(path, verify_checksums, in_memory);
    const ShardHeader& h = shard.header();
    if (h.seed != meta_.seed) {
      throw DataError(path, offsetof(ShardHeader, seed),
                      "seed " + std::to_string(h.seed) + ", but meta.json says " + std::to_string(meta_.seed) +
                          " (a shard from another data set?)");
    }
    if (h.first_index != base + size_) {
      throw DataError(path, offsetof(ShardHeader, first_index),
                      "first index " + std::to_string(h.first_index) + ", expected " + std::to_string(base + size_) +
                          " (shards out of order or missing?)");
    }
    starts_.push_back(size_);
    size_ += h.count;
    shards_.push_back(std::move(shard));
  }
  if (size_ != expected) {
    throw DataError(meta_file, std::string("the ") + split_name(split) + " shards hold " + std::to_string(size_) +
                                   " samples, but key \"" + split_name(split) + "_count\" says " +
                                   std::to_string(expected));
  }
}

uint64_t Dataset::file_bytes() const noexcept {
  uint64_t n = 0;
  for (const auto& s : shards_) n += sizeof(ShardHeader) + s.size() * sizeof(Sample);
  return n;
}

const Sample& Dataset::operator[](uint64_t i) const {
  if (i >= size_) {
    throw DataError(dir_, "index " + std::to_string(i) + " is out of range for the " + split_name(split_) +
                              " split of " + std::to_string(size_) + " samples");
  }
  // The last shard start <= i; shards may differ in size (the last one is usually shorter).
  const size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
  return shards_[k][i - starts_[k]];
}

}  // namespace ddplab::data

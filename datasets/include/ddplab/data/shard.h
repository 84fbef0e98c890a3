// The binary shard format and the data set directory: versioned header, fixed 160-byte records,
// FNV-1a checksum; memory-mapped reader with random access by global index.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddplab/data/schema.h"

namespace ddplab::data {

/// Shard file header (64 bytes, little-endian), followed by `count` Sample records.
struct ShardHeader {
  char magic[8];         ///< "DDPLSHRD"
  uint32_t version;      ///< kShardVersion
  uint32_t record_size;  ///< sizeof(Sample) = 160
  uint32_t num_dense;    ///< 13
  uint32_t num_sparse;   ///< 26
  uint64_t first_index;  ///< generator index of record 0
  uint64_t count;        ///< number of records
  uint64_t seed;         ///< data seed
  uint64_t checksum;     ///< FNV-1a 64 over the record bytes
  uint64_t reserved;     ///< 0
};
static_assert(sizeof(ShardHeader) == 64, "shard header is 64 bytes");
inline constexpr uint32_t kShardVersion = 1;
inline constexpr char kShardMagic[8] = {'D', 'D', 'P', 'L', 'S', 'H', 'R', 'D'};

/// FNV-1a 64-bit hash, continued from `h`.
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ULL);

/// What `ddplab data gen` writes next to the shards (meta.json).
struct Metadata {
  int version = 1;
  uint64_t seed = 1;
  uint64_t train_count = 0;
  uint64_t test_count = 0;
  uint64_t shard_size = 0;  ///< records per shard (the last may hold fewer)
  double teacher_bias = 0.0;
  double teacher_test_auc = 0.0;      ///< the teacher's exact AUC on the test split
  double teacher_test_logloss = 0.0;  ///< the teacher's log-loss on the test split
  double train_click_rate = 0.0;
  double test_click_rate = 0.0;
  std::vector<std::string> train_shards;  ///< file names relative to the directory
  std::vector<std::string> test_shards;
};

/// Reads and validates DIR/meta.json; throws DataError naming the file on any problem.
Metadata read_metadata(const std::string& dir);
/// Writes DIR/meta.json atomically (temporary name, then rename).
void write_metadata(const std::string& dir, const Metadata& meta);

/// Writes records to `path` atomically: to path + ".tmp", fsync, then rename; a shard either
/// exists complete or not at all.
void write_shard(const std::string& path, uint64_t seed, uint64_t first_index, const Sample* records, uint64_t count);

/// Streams one shard to `path` + ".tmp" with the same atomicity as write_shard (which uses it):
/// append() records in order, hashing as they go, so a shard never has to fit in memory; commit()
/// writes the header, fsyncs and renames. A writer destroyed without commit() (an error, an
/// exception elsewhere) removes its temporary. Failures throw DataError naming `path`.
class ShardWriter {
 public:
  ShardWriter(const std::string& path, uint64_t seed, uint64_t first_index);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const Sample* records, uint64_t count);
  void commit();
  const std::string& path() const noexcept { return path_; }
  uint64_t count() const noexcept { return header_.count; }

 private:
  std::string path_;
  int fd_ = -1;  ///< the temporary; -1 once committed or failed
  ShardHeader header_{};
};

/// One memory-mapped shard, header validated at open (magic, version, layout, size).
class ShardReader {
 public:
  /// verify_checksum makes it a full read: verify_records(), then verify_checksum(); otherwise only
  /// the header and the file size are checked. in_memory copies the validated file into the
  /// process's own memory (transparent huge pages where the kernel gives them) instead of reading
  /// through the file mapping: a shuffled batch then costs no page-table walk of a 4 KiB page per
  /// sample and no first-touch fault (issue 18: DeepFM's data wait 5-7 % of a step -> ~1 %).
  explicit ShardReader(const std::string& path, bool verify_checksum = false, bool in_memory = false);
  ~ShardReader();
  ShardReader(ShardReader&&) noexcept;
  ShardReader& operator=(ShardReader&&) noexcept;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const ShardHeader& header() const noexcept { return *header_; }
  uint64_t size() const noexcept { return header_->count; }
  const Sample& operator[](uint64_t i) const noexcept { return records_[i]; }
  const Sample* data() const noexcept { return records_; }
  const std::string& path() const noexcept { return path_; }
  bool in_memory() const noexcept { return in_memory_; }
  /// Recomputes the checksum; throws DataError naming the file if it differs.
  void verify_checksum() const;
  /// Checks every record's fields (label 0/1, dense in [0, log1p(1e6)], ids below their
  /// cardinality); throws DataError naming the file and the byte offset of the first bad field.
  void verify_records() const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const ShardHeader* header_ = nullptr;
  const Sample* records_ = nullptr;
  bool in_memory_ = false;  ///< map_ is an anonymous copy of the file, not the file's mapping
};

enum class Split { kTrain, kTest };
const char* split_name(Split s);

/// One split of a generated data set: all its shards, random access by global index 0..size()-1.
class Dataset {
 public:
  /// Opens DIR (meta.json + shards). Throws DataError naming the file for anything missing or bad:
  /// besides each shard's own checks, its seed, first index and count must match meta.json.
  /// verify_checksums makes every shard a full read (ShardReader's verify_checksum); in_memory
  /// holds every shard in the process's memory (ShardReader's in_memory).
  Dataset(const std::string& dir, Split split, bool verify_checksums = false, bool in_memory = false);
  uint64_t size() const noexcept { return size_; }
  const Sample& operator[](uint64_t i) const;
  const Metadata& metadata() const noexcept { return meta_; }
  const std::string& dir() const noexcept { return dir_; }
  Split split() const noexcept { return split_; }
  const std::vector<ShardReader>& shards() const noexcept { return shards_; }
  /// Bytes of all its shard files (headers included): what in_memory holds.
  uint64_t file_bytes() const noexcept;

 private:
  std::string dir_;
  Split split_;
  Metadata meta_;
  std::vector<ShardReader> shards_;
  std::vector<uint64_t> starts_;  ///< global index of each shard's record 0
  uint64_t size_ = 0;
};

/// Options of `ddplab data gen`.
struct GenerateOptions {
  std::string out_dir;
  uint64_t train = 1000000;
  uint64_t test = 100000;
  uint64_t seed = 1;
  uint64_t shard_size = 262144;
  int threads = 0;  ///< 0: all hardware threads
};

/// Result of generation, for the caller to report.
struct GenerateResult {
  Metadata meta;
  double seconds = 0.0;                        ///< wall time of sample generation and writing
  double samples_per_s_per_thread = 0.0;       ///< (train + test) / (seconds * threads)
  int threads = 1;                             ///< generator threads: opts.threads, at most one per shard
  double fill_samples_per_s_per_thread = 0.0;  ///< the generator alone: samples / CPU seconds in fill
  double write_seconds = 0.0;                  ///< summed wall time of hashing, writing and committing shards
  double setup_seconds = 0.0;                  ///< building the generator (teacher, bias calibration), not timed above
  double metrics_seconds = 0.0;                ///< reading the test split back for the teacher metrics
};

/// Generates both splits into opts.out_dir. Each shard is written atomically; meta.json is written
/// last, so a directory without it is an interrupted generation. `teacher_metrics` computes
/// (auc, logloss) from teacher probabilities and labels (common/'s exact metrics, passed in because
/// datasets/ does not depend on common/).
using TeacherMetricsFn =
    std::function<std::pair<double, double>(const std::vector<float>& probs, const std::vector<float>& labels)>;
GenerateResult generate(const GenerateOptions& opts, const TeacherMetricsFn& teacher_metrics);

/// Per-split statistics for `ddplab data stats`.
struct SplitStats {
  uint64_t count = 0;
  double click_rate = 0.0;
  std::vector<double> dense_mean;      ///< [13]
  std::vector<double> dense_std;       ///< [13]
  std::vector<uint64_t> distinct_ids;  ///< [26]
  std::vector<double> top_id_share;    ///< [26] share of the most frequent id (id 0 under Zipf)
};
SplitStats compute_stats(const Dataset& ds);

}  // namespace ddplab::data

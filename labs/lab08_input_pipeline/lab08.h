// Lab 08 (the input pipeline): the functions and the class the student implements in
// lab08_student.cpp, and the kit's pieces they work with: a source of batches parsed from
// Criteo-layout text, and the synchronous loader the lab starts from.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "ddplab/data/loader.h"
#include "ddplab/data/text.h"
#include "ddplab/error.h"

namespace lab08 {

using ddplab::data::Batch;
using ddplab::data::ByteRange;
using ddplab::data::TextFile;

/// Where batches come from: batch k of a pass, made on demand. make() may be called from several
/// threads at once, for different k, in any order; it may throw (a malformed line: a DataError
/// naming the file and line), and then throws the same for the same k every time.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// Batches in one pass.
  virtual int64_t num_batches() const = 0;
  /// Batch k, 0 <= k < num_batches(): reads and parses its lines.
  virtual Batch make(int64_t k) const = 0;
};

/// The batches of a rank's lines of a text file: batch k is lines [k x B, (k + 1) x B) of `lines`
/// (line start offsets, e.g. data::line_starts of the rank's byte range), parsed when made.
/// `keep_every` > 1 models a rank that parses the whole file and keeps one line in `keep_every`
/// (the `--read all` baseline): batch k then parses keep_every x B lines and keeps those whose
/// position is `keep_offset` mod keep_every.
class TextBatches final : public BatchSource {
 public:
  TextBatches(const TextFile& file, std::vector<uint64_t> lines, int64_t batch, int64_t batches, int keep_every = 1,
              int keep_offset = 0);
  int64_t num_batches() const override { return batches_; }
  Batch make(int64_t k) const override;

 private:
  const TextFile& file_;
  std::vector<uint64_t> lines_;
  int64_t batch_, batches_;
  int keep_every_, keep_offset_;
};

/// The loader the lab starts from: the training thread itself makes batch 0, 1, 2, ... when the
/// step asks for it, so every parse is data-wait time of the step.
class SyncLoader final : public ddplab::data::Loader {
 public:
  explicit SyncLoader(const BatchSource& source) : source_(source) {}
  bool next(Batch& out) override;

 private:
  const BatchSource& source_;
  int64_t k_ = 0;
};

/// Exercise 08.1: a loader whose worker threads make batches ahead of the training loop.
///
/// Contract:
///  - `workers` threads (>= 1) call source.make(k) for k = 0, 1, ..., num_batches() - 1, each k
///    exactly once, and next() hands the batches out in order 0, 1, 2, ... whatever the number
///    of workers and whichever finishes first: the same sequence SyncLoader gives;
///  - bounded: make(k) is called only while k < (batches next() has returned) + depth, so at
///    most `depth` (>= 1) batches are being made or waiting, and memory stays bounded;
///  - next() returns false after the last batch (and every later call);
///  - an exception from make(k) is thrown by the next() that would have returned batch k (the
///    batches before it are handed out first), with its message (the file and line);
///  - the destructor stops and joins every worker, also when the consumer stops early with
///    workers blocked on a full queue or after an error: no thread outlives the loader.
/// workers < 1 or depth < 1: throw ddplab::Error naming the value.
class PrefetchLoader final : public ddplab::data::Loader {
 public:
  PrefetchLoader(const BatchSource& source, int workers, int depth);
  ~PrefetchLoader() override;
  bool next(Batch& out) override;

 private:
  struct State;  // the student's: lab08_student.cpp
  std::unique_ptr<State> state_;
};

/// Exercise 08.2: rank `rank`'s share of `file` among `world` ranks, as a byte range.
///
/// Contract: the W ranges are disjoint, in rank order, and cover [0, size) exactly (range r ends
/// where range r + 1 begins; the last ends at size). Each begins at a line start: range r begins
/// at the first line start at or after floor(r x size / W) (range 0 at 0), so every line belongs
/// to the rank whose nominal share holds its first byte. A range may be empty (more ranks than
/// lines). Reads only near the two boundaries (through file.read(), which counts): never the
/// rest of the file — that is what the rank's reader does, for its own range only.
ByteRange line_aligned_range(const TextFile& file, int rank, int world);

// ---- the kit's pieces (not edited by students) ----

inline TextBatches::TextBatches(const TextFile& file, std::vector<uint64_t> lines, int64_t batch, int64_t batches,
                                int keep_every, int keep_offset)
    : file_(file),
      lines_(std::move(lines)),
      batch_(batch),
      batches_(batches),
      keep_every_(keep_every),
      keep_offset_(keep_offset) {
  if (batch_ < 1 || keep_every_ < 1 || keep_offset_ < 0 || keep_offset_ >= keep_every_ || batches_ < 0 ||
      static_cast<uint64_t>(batches_ * batch_ * keep_every_) > lines_.size()) {
    throw ddplab::Error(fmt::format("{}: {} batches of {} x {} lines need more than the {} lines given", file.path(),
                                    batches_, keep_every_, batch_, lines_.size()));
  }
}

inline Batch TextBatches::make(int64_t k) const {
  if (k < 0 || k >= batches_) {
    throw ddplab::Error(fmt::format("{}: batch {} of a pass of {}", file_.path(), k, batches_));
  }
  const int64_t span = batch_ * keep_every_;
  Batch all = ddplab::data::parse_text_batch(file_, lines_.data() + k * span, static_cast<size_t>(span));
  if (keep_every_ == 1) return all;
  // Parsed everything, keep one line in keep_every: the rest was work for nothing.
  const auto keep = torch::arange(keep_offset_, span, keep_every_, torch::kInt64);
  Batch mine;
  mine.dense = all.dense.index_select(0, keep);
  mine.rows = all.rows.index_select(0, keep);
  mine.labels = all.labels.index_select(0, keep);
  for (int64_t i = keep_offset_; i < span; i += keep_every_)
    mine.indices.push_back(all.indices[static_cast<size_t>(i)]);
  return mine;
}

inline bool SyncLoader::next(Batch& out) {
  if (k_ >= source_.num_batches()) return false;
  out = source_.make(k_++);
  return true;
}

/// How many of the threads `tids` (other than the caller) still exist in this process, for the
/// driver's and the tests' "no thread outlives the loader". A joined thread's /proc/self/task
/// entry can outlive the join by a moment (the kernel wakes the joiner when it clears the tid,
/// before it removes the task), so this waits up to a second for the entries to go; a thread
/// that is still running stays.
inline int threads_still_running(const std::set<pid_t>& tids) {
  const pid_t self = ::gettid();
  int alive = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    alive = 0;
    for (pid_t t : tids) alive += t != self && std::filesystem::exists(fmt::format("/proc/self/task/{}", t)) ? 1 : 0;
    if (alive == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return alive;
}

}  // namespace lab08

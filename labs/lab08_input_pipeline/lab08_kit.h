// Lab 08's apparatus: the kit's code around the student's prefetching loader and shard-aware
// reading, read-only for students and unit-tested in tests/lab08_kit_test.cpp. The driver's flags
// and their combinations; the probes; the text the run trains from (the data set's training
// samples exported, optionally with a broken line for the grader's error path); this rank's lines
// of it (Shard); WatchedSource and WatchedLoader, which see from outside how far ahead of the
// training loop the loader made batches and which threads made them; and the verdicts on what the
// pipeline did.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "lab08.h"

#include "ddplab/data/criteo.h"
#include "ddplab/lab.h"

namespace lab08 {

/// The driver's own flags.
struct Flags {
  std::string source = "text", loader = "sync", read = "range", text;
  int workers = 2, depth = 4;
  uint64_t corrupt_line = 0;
  bool from_text() const { return source == "text"; }
};
void add_flags(ddplab::LabFlags& f, Flags& flags);
/// Throws ConfigError for flags that do not go together (--source binary with a text flag,
/// --corrupt-line with --text).
void check_flags(const Flags& flags);

/// Each exercise once on an empty file, so a skeleton's run lists every missing one.
void add_probes(ddplab::LabProgram& program);

/// The text the ranks train from: --text, or the data set's training samples exported by rank 0
/// (atomically, into the report's folder as train.tsv) while the others wait; --corrupt-line breaks
/// that line's first integer. Collective.
std::string training_text(ddplab::dist::Communicator& comm, const ddplab::LabRun& run, const Flags& flags);
/// `text` with line `line` (1-based) broken: its first integer field becomes "x<count>". Throws
/// ConfigError when the text has fewer lines.
std::string break_line(std::string text, uint64_t line);

/// This rank's share of the text: its byte range (08.2's, or the whole file when every rank reads
/// it and keeps one line in W), its lines, and the whole batches every rank can take.
struct Shard {
  ByteRange range;
  std::vector<uint64_t> lines;
  int keep_every = 1;
  int64_t steps = 0;
  uint64_t read_before_training = 0;
};
/// Finds this rank's lines (collective), prints the ranges and records the verdict
/// `ranges_tile_file` when each rank reads its own range.
Shard shard_text(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const TextFile& file, bool by_range);

/// The source the loader reads, watched: how far ahead of the training loop each batch was
/// started, and which threads made them (to see, after the loader is gone, whether any is left).
/// "Ahead" is measured by the kit when make(k) is called, against the batches the training loop
/// has received so far, which WatchedLoader counts (never the loader's own figures): the
/// contract's bound, make(k) only while k < (batches next() has returned) + depth. A next() call
/// in progress counts as returned (the loader may already have handed its batch out and let a
/// worker start the next), so a correct loader never reads more than its depth.
class WatchedSource final : public BatchSource {
 public:
  explicit WatchedSource(const BatchSource& inner) : inner_(inner) {}
  int64_t num_batches() const override { return inner_.num_batches(); }
  Batch make(int64_t k) const override;
  /// The training loop asks the loader for a batch (WatchedLoader calls these around next()).
  void next_begins();
  /// ... and has its answer: `got` a batch, or the end of the pass (or an error).
  void next_ends(bool got);
  /// Batches the training loop has received.
  int64_t handed() const;
  /// The most batches started ahead of the training loop at any make(k): max(batches started,
  /// k + 1) minus the batches received (a next() in progress included).
  int64_t max_ahead() const;
  /// Threads that made a batch and still exist in this process (threads_still_running).
  int64_t threads_alive() const;
  int64_t makers() const;

 private:
  const BatchSource& inner_;
  mutable std::mutex mu_;
  mutable int64_t started_ = 0, max_ahead_ = 0;
  int64_t handed_ = 0;
  bool in_next_ = false;
  mutable std::set<pid_t> tids_;
};

/// The loader the training loop reads, watched: `inner` (the student's or the synchronous one),
/// each next() reported to `watch` as it begins and ends, so the kit counts the batches handed out
/// at the moment they are. Destroying it destroys `inner` (which joins a prefetching loader's
/// threads).
class WatchedLoader final : public ddplab::data::Loader {
 public:
  WatchedLoader(std::unique_ptr<ddplab::data::Loader> inner, WatchedSource& watch)
      : inner_(std::move(inner)), watch_(watch) {}
  bool next(Batch& out) override;

 private:
  std::unique_ptr<ddplab::data::Loader> inner_;
  WatchedSource& watch_;
};

/// What the loaders of all epochs did, from their watches.
struct LoaderFigures {
  int64_t max_ahead = 0, threads_left = 0, makers = 0;
  void add(const WatchedSource& w);
};

/// The report's "input" section, the data wait and busy fractions, and the verdicts
/// `read_only_own_share` (text), `queue_bounded` and `no_threads_left` (prefetching). Collective.
void report(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const Flags& flags, bool prefetch,
            const TextFile* file, const Shard& shard, const LoaderFigures& loaders);

}  // namespace lab08

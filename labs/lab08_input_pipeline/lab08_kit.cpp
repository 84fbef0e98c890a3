// Lab 08's apparatus (see lab08_kit.h). Not edited by students.
#include "lab08_kit.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "ddplab/dist/agree.h"
#include "ddplab/error.h"
#include "ddplab/log.h"
#include "ddplab/report.h"

namespace lab08 {

using ddplab::ConfigError;
namespace fs = std::filesystem;

void add_flags(ddplab::LabFlags& f, Flags& flags) {
  f.option("--source", flags.source, "What the ranks train from: text (Criteo layout) or binary (the kit's shards)")
      ->check(CLI::IsMember({"text", "binary"}));
  f.option("--loader", flags.loader, "sync (parse on the training thread) or prefetch (08.1's worker threads)")
      ->check(CLI::IsMember({"sync", "prefetch"}));
  f.option("--workers", flags.workers, "Prefetching loader: worker threads")->check(CLI::PositiveNumber);
  f.option("--queue-depth", flags.depth, "Prefetching loader: batches made ahead of the step at most")
      ->check(CLI::PositiveNumber);
  f.option("--read", flags.read, "range: each rank reads its byte range (08.2); all: every rank parses the whole file")
      ->check(CLI::IsMember({"range", "all"}));
  f.option("--text", flags.text,
           "Criteo-layout training text (default: the data set's training samples exported to the report's "
           "folder as train.tsv)");
  f.option("--corrupt-line", flags.corrupt_line, "Grading: break this line of the exported text (0: off)");
}

void check_flags(const Flags& flags) {
  if (!flags.from_text() && (flags.loader != "sync" || !flags.text.empty() || flags.corrupt_line > 0)) {
    throw ConfigError("--source binary reads the kit's shards: --loader, --text and --corrupt-line are for text");
  }
  if (!flags.text.empty() && flags.corrupt_line > 0) {
    throw ConfigError("--corrupt-line breaks the exported text, not --text");
  }
}

void add_probes(ddplab::LabProgram& program) {
  program.probe("08.1", "the prefetching loader", [](ddplab::ProbeContext&) {
    // Constructed and left alive (its one worker ends: there is nothing to make): the probe asks
    // only whether 08.1 is written. Its destructor is tested by the unit tests and by the runs
    // that use the loader; a destructor that crashes the process here would fail every run of
    // the lab, 08.2's and the binary one's included.
    static const TextFile empty("/dev/null");
    static const TextBatches none(empty, {}, 1, 0);
    static_cast<void>(new PrefetchLoader(none, 1, 1));
  });
  program.probe("08.2", "line_aligned_range", [](ddplab::ProbeContext&) {
    const TextFile empty("/dev/null");
    (void)line_aligned_range(empty, 0, 1);
  });
}

std::string break_line(std::string text, uint64_t line) {
  size_t at = 0;
  for (uint64_t l = 1; l < line && at != std::string::npos; ++l) {
    at = text.find('\n', at);
    if (at != std::string::npos) ++at;
  }
  if (line == 0 || at == std::string::npos || at >= text.size()) {
    throw ConfigError(fmt::format("--corrupt-line {}: the text has fewer lines", line));
  }
  const size_t tab = text.find('\t', at);
  text.insert(tab + 1, "x");  // I1 becomes "x<count>": not an integer
  return text;
}

std::string training_text(ddplab::dist::Communicator& comm, const ddplab::LabRun& run, const Flags& flags) {
  if (!flags.text.empty()) return flags.text;
  const std::string path = (fs::path(run.options().report_path(run.lab(), 0)).parent_path() / "train.tsv").string();
  if (comm.rank() == 0) {
    ddplab::data::export_tsv(run.options().data, ddplab::data::Split::kTrain, path, run.train_size());
    if (flags.corrupt_line > 0) {
      std::ifstream in(path, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      ddplab::write_file_atomic(path, break_line(ss.str(), flags.corrupt_line));
    }
  }
  ddplab::dist::allgather_u64(comm, {0});  // the others wait until the file is complete
  return path;
}

Shard shard_text(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const TextFile& file, bool by_range) {
  const int rank = comm.rank(), world = comm.size();
  const int64_t B = run.batch();
  Shard s;
  s.range = ByteRange{0, file.size()};
  if (by_range) s.range = line_aligned_range(file, rank, world);
  s.lines = ddplab::data::line_starts(file, s.range);
  s.read_before_training = file.bytes_read();
  s.keep_every = by_range ? 1 : world;
  // Ranks hold different numbers of lines: the job takes the whole batches every rank has.
  const auto all = ddplab::dist::allgather_u64(comm, {s.range.begin, s.range.end, s.lines.size()});
  bool contiguous = all.front()[0] == 0 && all.back()[1] == file.size();
  uint64_t total = 0, fewest = UINT64_MAX;
  std::string ranges;
  for (int r = 0; r < world; ++r) {
    const auto& a = all[static_cast<size_t>(r)];
    if (r > 0) contiguous = contiguous && a[0] == all[static_cast<size_t>(r - 1)][1];
    total += a[2];
    fewest = std::min(fewest, a[2]);
    ranges += fmt::format("{}rank {} [{}, {}) {} lines", r ? ", " : "", r, a[0], a[1], a[2]);
  }
  if (by_range) {
    run.report().verdict("ranges_tile_file", contiguous,
                         fmt::format("byte ranges: {}: {}", ranges,
                                     contiguous ? "disjoint, line-aligned, cover the file"
                                                : "do NOT tile the file (each range must begin where the previous one "
                                                  "ends, from 0 to the file's size)"),
                         {{"ranges", all}, {"file_bytes", file.size()}});
    s.steps = static_cast<int64_t>(fewest) / B;
  } else {
    ddplab::log::info0("every rank reads the whole file ({} lines) and keeps one line in {}", s.lines.size(), world);
    s.steps = static_cast<int64_t>(s.lines.size()) / (B * world);
    total = s.lines.size();
  }
  ddplab::log::info0("{} steps of {} lines per rank; {} of the file's {} lines are left over", s.steps, B,
                     total - static_cast<uint64_t>(s.steps * B * world), total);
  return s;
}

Batch WatchedSource::make(int64_t k) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++started_;
    tids_.insert(::gettid());
    const int64_t received = handed_ + (in_next_ ? 1 : 0);
    max_ahead_ = std::max(max_ahead_, std::max(started_, k + 1) - received);
  }
  return inner_.make(k);
}

void WatchedSource::next_begins() {
  std::lock_guard<std::mutex> lock(mu_);
  in_next_ = true;
}

void WatchedSource::next_ends(bool got) {
  std::lock_guard<std::mutex> lock(mu_);
  in_next_ = false;
  if (got) ++handed_;
}

int64_t WatchedSource::handed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return handed_;
}

int64_t WatchedSource::max_ahead() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_ahead_;
}

bool WatchedLoader::next(Batch& out) {
  watch_.next_begins();
  bool got = false;
  try {
    got = inner_->next(out);
  } catch (...) {
    watch_.next_ends(false);
    throw;
  }
  watch_.next_ends(got);
  return got;
}

int64_t WatchedSource::threads_alive() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_still_running(tids_);
}

int64_t WatchedSource::makers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(tids_.size());
}

void LoaderFigures::add(const WatchedSource& w) {
  max_ahead = std::max(max_ahead, w.max_ahead());
  threads_left += w.threads_alive();
  makers = std::max(makers, w.makers());
}

void report(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const Flags& flags, bool prefetch,
            const TextFile* file, const Shard& shard, const LoaderFigures& loaders) {
  const ddplab::StepTimer& t = run.timer();
  const double wall = std::max(t.wall(), 1e-12);
  const double wait_ms = 1e3 * t.total(ddplab::Phase::kDataWait) / std::max<int64_t>(t.steps(), 1);
  const auto busy = ddplab::dist::allgather_f64(comm, t.compute() / wall);
  ddplab::log::info0("data wait {:.2f} ms per step ({:.1f}% of the wall time, rank 0); busy fraction: {}", wait_ms,
                     100 * t.total(ddplab::Phase::kDataWait) / wall, ddplab::dist::per_rank(busy, "{:.3f}"));
  auto& rep = run.report();
  nlohmann::json& in = rep.json()["input"];
  in["source"] = flags.source;
  in["loader"] = prefetch ? "prefetch" : "sync";
  in["workers"] = prefetch ? flags.workers : 0;
  in["queue_depth"] = prefetch ? flags.depth : 0;
  in["data_wait_ms_per_step"] = wait_ms;
  if (file == nullptr) return;
  in["read"] = shard.keep_every > 1 ? "all" : "range";
  in["range"] = {shard.range.begin, shard.range.end};
  in["file_bytes"] = file->size();
  in["bytes_read_before_training"] = shard.read_before_training;
  in["bytes_read"] = file->bytes_read();
  in["max_ahead"] = loaders.max_ahead;
  in["threads_left"] = loaders.threads_left;
  in["batch_makers"] = loaders.makers;
  const auto per_rank =
      ddplab::dist::allgather_u64(comm, {shard.read_before_training, shard.range.size(), file->bytes_read()});
  // A rank's reading before training: its range once (the line index) and a few bytes at each end
  // to find the boundaries. 64 KiB of slack covers a boundary line of any sane length.
  bool own_share = shard.keep_every == 1;
  std::string read;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const auto& p = per_rank[r];
    own_share = own_share && p[0] <= p[1] + 65536;
    read += fmt::format("{}rank {} {} (its range {})", r ? ", " : "", r, p[0], p[1]);
  }
  rep.verdict("read_only_own_share", own_share,
              fmt::format("bytes read before training, of the file's {}: {}: {}", file->size(), read,
                          own_share ? "each rank read only its share"
                                    : fmt::format("ranks read more than their share (every rank parsing the file: "
                                                  "{}x the work)",
                                                  shard.keep_every)),
              {{"read_before_training", per_rank}});
  if (prefetch) {
    const bool bounded = loaders.max_ahead <= flags.depth;
    rep.verdict("queue_bounded", bounded,
                fmt::format("queue: at most {} batches made ahead of the training loop (depth {}): {}",
                            loaders.max_ahead, flags.depth,
                            bounded ? "within the bound" : "OVER the bound (the queue is not bounded)"),
                {{"max_ahead", loaders.max_ahead}, {"depth", flags.depth}});
    rep.verdict("no_threads_left", loaders.threads_left == 0,
                fmt::format("loader threads left running after the loader was destroyed: {} of the {} that made "
                            "batches",
                            loaders.threads_left, loaders.makers),
                {{"threads_left", loaders.threads_left}, {"makers", loaders.makers}});
  }
}

}  // namespace lab08

// Lab 08 driver: data-parallel DeepFM fed from Criteo-layout text. The starting program parses
// the text on the training thread, batch by batch (--loader sync); the student's prefetching
// loader (08.1) makes batches on worker threads ahead of the step, and shard-aware reading (08.2)
// has each rank read only its byte range of the file. --source binary trains on the kit's binary
// shards instead, the lesson's end: convert once, then no text pipeline is needed. The run prints
// the step's data wait and busy fraction, how far ahead the loader ran, the bytes each rank read,
// and whether any loader thread outlived its loader.
// Not edited by students.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "lab08.h"

#include "ddplab/data/criteo.h"
#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/report.h"
#include "ddplab/staging.h"
#include "ddplab/train.h"

namespace {

using namespace ddplab;
namespace fs = std::filesystem;

/// The source the loader reads, watched: how far ahead of the training loop it was asked to make
/// batches, and which threads made them (to see, after the loader is gone, whether any is left).
class WatchedSource final : public lab08::BatchSource {
 public:
  explicit WatchedSource(const lab08::BatchSource& inner) : inner_(inner) {}
  int64_t num_batches() const override { return inner_.num_batches(); }
  lab08::Batch make(int64_t k) const override {
    started_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      tids_.insert(::gettid());
    }
    return inner_.make(k);
  }
  /// Called by the training loop each time it has received a batch (handed = batches so far):
  /// batches started beyond those handed out are the ones made ahead.
  void handed(int64_t handed) { max_ahead_ = std::max(max_ahead_, started_.load() - handed); }
  int64_t max_ahead() const { return max_ahead_; }
  /// Threads that made a batch and still exist in this process (lab08::threads_still_running).
  int64_t threads_alive() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lab08::threads_still_running(tids_);
  }
  int64_t makers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(tids_.size());
  }

 private:
  const lab08::BatchSource& inner_;
  mutable std::atomic<int64_t> started_{0};
  int64_t max_ahead_ = 0;
  mutable std::mutex mu_;
  mutable std::set<pid_t> tids_;
};

/// The training split's first `n` samples as Criteo-layout text in `path`, written by rank 0
/// (atomically) while the others wait; `corrupt_line` > 0 breaks that line's first integer, for the
/// grader's error-path run.
void export_text(dist::Communicator& comm, const LabRun& run, const std::string& path, uint64_t corrupt_line) {
  if (comm.rank() == 0) {
    data::export_tsv(run.options().data, data::Split::kTrain, path, run.train_size());
    if (corrupt_line > 0) {
      std::ifstream in(path, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      std::string text = ss.str();
      size_t at = 0;
      for (uint64_t l = 1; l < corrupt_line && at != std::string::npos; ++l) {
        at = text.find('\n', at);
        if (at != std::string::npos) ++at;
      }
      if (at == std::string::npos || at >= text.size()) {
        throw ConfigError(fmt::format("--corrupt-line {}: the text has fewer lines", corrupt_line));
      }
      const size_t tab = text.find('\t', at);
      text.insert(tab + 1, "x");  // I1 becomes "x<count>": not an integer
      write_file_atomic(path, text);
    }
  }
  dist::allgather_u64(comm, {0});  // the others wait until the file is complete
}

}  // namespace

int main(int argc, char** argv) {
  std::string source = "text", loader_kind = "sync", read = "range", text;
  int workers = 2, depth = 4;
  uint64_t corrupt_line = 0;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 08: the input pipeline — text parsed on the training thread, prefetched, sharded";
  program.add_flags = [&](LabFlags& f) {
    f.option("--source", source, "What the ranks train from: text (Criteo layout) or binary (the kit's shards)")
        ->check(CLI::IsMember({"text", "binary"}));
    f.option("--loader", loader_kind, "sync (parse on the training thread) or prefetch (08.1's worker threads)")
        ->check(CLI::IsMember({"sync", "prefetch"}));
    f.option("--workers", workers, "Prefetching loader: worker threads")->check(CLI::PositiveNumber);
    f.option("--queue-depth", depth, "Prefetching loader: batches made ahead of the step at most")
        ->check(CLI::PositiveNumber);
    f.option("--read", read, "range: each rank reads its byte range (08.2); all: every rank parses the whole file")
        ->check(CLI::IsMember({"range", "all"}));
    f.option("--text", text,
             "Criteo-layout training text (default: the data set's training samples exported to the report's "
             "folder as train.tsv)");
    f.option("--corrupt-line", corrupt_line, "Grading: break this line of the exported text (0: off)");
  };
  program.body = [&](LabRun& run) {
    auto comm = run.join();
    const int rank = run.rank(), world = run.world_size();
    const int64_t B = run.batch();
    const bool from_text = source == "text";
    if (!from_text && (loader_kind != "sync" || !text.empty() || corrupt_line > 0)) {
      throw ConfigError("--source binary reads the kit's shards: --loader, --text and --corrupt-line are for text");
    }
    if (!text.empty() && corrupt_line > 0) throw ConfigError("--corrupt-line breaks the exported text, not --text");

    std::unique_ptr<data::TextFile> file;
    if (from_text) {
      std::string path = text;
      if (path.empty()) {
        path = (fs::path(run.options().report_path(run.lab(), 0)).parent_path() / "train.tsv").string();
        export_text(*comm, run, path, corrupt_line);
      }
      file = std::make_unique<data::TextFile>(path);
    }

    // Each exercise once on something tiny (an empty file), in every mode, so a skeleton run lists
    // every missing one; the driver carries on with the starting program's way where one is missing.
    bool have_prefetch = true, have_range = true;
    {
      const data::TextFile empty("/dev/null");
      have_prefetch = run.attempt([&] {
        const lab08::TextBatches none(empty, {}, 1, 0);
        lab08::PrefetchLoader probe(none, 1, 1);
      });
      have_range = run.attempt([&] { (void)lab08::line_aligned_range(empty, 0, 1); });
    }

    // ---- this rank's lines ----
    data::ByteRange range{0, file ? file->size() : 0};
    std::vector<uint64_t> lines;
    int keep_every = 1;
    std::vector<uint64_t> binary_order;
    int64_t steps = 0;
    uint64_t read_before_training = 0;
    if (from_text) {
      const bool by_range = read == "range" && have_range;
      if (read == "range" && !have_range) log::warn("08.2 not attempted: every rank parses the whole file");
      if (by_range) range = lab08::line_aligned_range(*file, rank, world);
      lines = data::line_starts(*file, range);
      read_before_training = file->bytes_read();
      keep_every = by_range ? 1 : world;
      // Ranks hold different numbers of lines: the job takes the whole batches every rank has.
      const auto all = dist::allgather_u64(*comm, {range.begin, range.end, lines.size()});
      bool contiguous = all.front()[0] == 0 && all.back()[1] == file->size();
      uint64_t total = 0, fewest = UINT64_MAX;
      std::string text_ranges;
      for (int r = 0; r < world; ++r) {
        const auto& a = all[static_cast<size_t>(r)];
        if (r > 0) contiguous = contiguous && a[0] == all[static_cast<size_t>(r - 1)][1];
        total += a[2];
        fewest = std::min(fewest, a[2]);
        text_ranges += fmt::format("{}rank {} [{}, {}) {} lines", r ? ", " : "", r, a[0], a[1], a[2]);
      }
      if (by_range) {
        log::info0("byte ranges: {}: {}", text_ranges,
                   contiguous ? "disjoint, line-aligned, cover the file"
                              : "do NOT tile the file (each range must begin where the previous one ends, from 0 to "
                                "the file's size)");
        run.report().json()["input"]["ranges_tile_file"] = contiguous;
        steps = static_cast<int64_t>(fewest) / B;
      } else {
        log::info0("every rank reads the whole file ({} lines) and keeps one line in {}", lines.size(), world);
        steps = static_cast<int64_t>(lines.size()) / (B * world);
        total = lines.size();
      }
      log::info0("{} steps of {} lines per rank; {} of the file's {} lines are left over", steps, B,
                 total - static_cast<uint64_t>(steps * B * world), total);
    } else {
      const uint64_t n = run.train_size(), per = n / static_cast<uint64_t>(world);
      for (uint64_t i = static_cast<uint64_t>(rank) * per; i < static_cast<uint64_t>(rank + 1) * per; ++i) {
        binary_order.push_back(i);
      }
      steps = static_cast<int64_t>(per) / B;
      binary_order.resize(static_cast<size_t>(steps * B));
      log::info0("binary shards: each rank reads its block of {} samples, {} steps of {}", per, steps, B);
    }
    if (steps < 1) throw ConfigError(fmt::format("the data holds less than one batch of {} per rank", B));

    DeepFM model;
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kSparse, *comm, model->parameters());
    run.start_training(model.ptr(), steps);

    const bool prefetch = from_text && loader_kind == "prefetch" && have_prefetch;
    std::string how = !from_text ? "binary shards, read on the training thread"
                      : prefetch ? fmt::format("text, prefetching loader ({} workers, queue depth {})", workers, depth)
                                 : "text, parsed on the training thread";
    if (from_text && loader_kind == "prefetch" && !have_prefetch) how += " (08.1 not attempted)";
    log::info0("input: {}", how);

    // 08.3: on CUDA the batch goes to the device through pinned buffers on a side stream (not run
    // on a GPU yet); on the CPU there is nothing to copy.
    DeviceStager stager(run.device());
    std::unique_ptr<lab08::TextBatches> batches;  // the same batches every epoch: made when asked for
    if (from_text) {
      batches = std::make_unique<lab08::TextBatches>(*file, std::move(lines), B, steps, keep_every,
                                                     keep_every > 1 ? rank : 0);
    }
    int64_t max_ahead = 0, threads_left = 0, makers = 0;
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      std::unique_ptr<WatchedSource> watched;  // per epoch: how far ahead this epoch's loader ran
      std::unique_ptr<data::Loader> loader;
      if (from_text) {
        watched = std::make_unique<WatchedSource>(*batches);
        if (prefetch) {
          loader = std::make_unique<lab08::PrefetchLoader>(*watched, workers, depth);
        } else {
          loader = std::make_unique<lab08::SyncLoader>(*watched);
        }
      } else {
        loader = std::make_unique<data::BatchLoader>(run.train(), binary_order, B, run.device());
      }
      int64_t handed = 0;
      run.run_epoch(epoch, *loader, [&](const data::Batch& b) {
        if (watched) watched->handed(++handed);
        if (stager.active() && from_text) return train_step(model, optimizer, stager.stage(b), run.timer(), sync.get());
        return train_step(model, optimizer, b, run.timer(), sync.get());
      });
      loader.reset();  // stops and joins the loader's threads
      if (watched) {
        max_ahead = std::max(max_ahead, watched->max_ahead());
        threads_left += watched->threads_alive();
        makers = std::max(makers, watched->makers());
      }
    }

    // ---- what the input pipeline did ----
    const StepTimer& t = run.timer();
    const double wall = std::max(t.wall(), 1e-12);
    const double wait_ms = 1e3 * t.total(Phase::kDataWait) / std::max<int64_t>(t.steps(), 1);
    const auto busy = dist::allgather_u64(*comm, {static_cast<uint64_t>(1e6 * t.compute() / wall)});
    std::string busy_text;
    for (int r = 0; r < world; ++r) busy_text += fmt::format("{}rank {} {:.3f}", r ? ", " : "", r, busy[r][0] / 1e6);
    log::info0("data wait {:.2f} ms per step ({:.1f}% of the wall time, rank 0); busy fraction: {}", wait_ms,
               100 * t.total(Phase::kDataWait) / wall, busy_text);
    nlohmann::json& in = run.report().json()["input"];
    in["source"] = source;
    in["loader"] = prefetch ? "prefetch" : "sync";
    in["workers"] = prefetch ? workers : 0;
    in["queue_depth"] = prefetch ? depth : 0;
    in["data_wait_ms_per_step"] = wait_ms;
    if (from_text) {
      in["read"] = keep_every > 1 ? "all" : "range";
      in["range"] = {range.begin, range.end};
      in["file_bytes"] = file->size();
      in["bytes_read_before_training"] = read_before_training;
      in["bytes_read"] = file->bytes_read();
      in["max_ahead"] = max_ahead;
      in["threads_left"] = threads_left;
      in["batch_makers"] = makers;
      const auto per_rank = dist::allgather_u64(*comm, {read_before_training, range.size(), file->bytes_read()});
      // A rank's reading before training: its range once (the line index) and a few bytes at each
      // end to find the boundaries. 64 KiB of slack covers a boundary line of any sane length.
      bool own_share = keep_every == 1;
      std::string read_text;
      for (int r = 0; r < world; ++r) {
        const auto& p = per_rank[static_cast<size_t>(r)];
        own_share = own_share && p[0] <= p[1] + 65536;
        read_text += fmt::format("{}rank {} {} (its range {})", r ? ", " : "", r, p[0], p[1]);
      }
      log::info0("bytes read before training, of the file's {}: {}: {}", file->size(), read_text,
                 own_share ? "each rank read only its share"
                           : fmt::format("ranks read more than their share (every rank parsing the file: {}x the work)",
                                         keep_every));
      in["read_only_own_share"] = own_share;
      if (prefetch) {
        log::info0("queue: at most {} batches made ahead of the training loop (depth {}): {}", max_ahead, depth,
                   max_ahead <= depth ? "within the bound" : "OVER the bound (the queue is not bounded)");
        log::info0("loader threads left running after the loader was destroyed: {} of the {} that made batches",
                   threads_left, makers);
      }
    }
    run.evaluate_on_rank0(model, *comm);
  };
  return run_lab(program, argc, argv);
}

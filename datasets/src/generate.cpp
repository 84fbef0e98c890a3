// `ddplab data gen`: generates both splits into shard files on several threads, then measures the
// teacher on the test split as written, and writes meta.json last, so that a directory with a
// meta.json always holds a complete data set and one without it an interrupted generation.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include <time.h>

#include <fmt/format.h>

#include "ddplab/data/error.h"
#include "ddplab/data/generator.h"
#include "ddplab/data/shard.h"

namespace ddplab::data {

namespace fs = std::filesystem;

namespace {

struct ShardJob {
  std::string name;
  uint64_t first_index;
  uint64_t count;
};

std::vector<ShardJob> plan_split(const char* prefix, uint64_t base, uint64_t total, uint64_t shard_size) {
  std::vector<ShardJob> jobs;
  for (uint64_t start = 0, k = 0; start < total; start += shard_size, ++k) {
    jobs.push_back({fmt::format("{}-{:05d}.bin", prefix, k), base + start, std::min(shard_size, total - start)});
  }
  return jobs;
}

// Runs fn(job) for every job on `threads` threads; the first exception stops the others from
// taking new jobs and is rethrown here.
template <typename Fn>
void run_jobs(size_t jobs, int threads, Fn fn) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    for (size_t j = next++; j < jobs; j = next++) {
      try {
        fn(j);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        next = jobs;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of the calling thread: the generator's own speed, even on a machine busy with other work.
int64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Generates shards chunk by chunk on all generator threads, in shard order, and writes each shard
// on its own writer thread as soon as its last chunk is done. So every thread has work until the
// end (shards need not divide evenly among threads), and hashing, writing and fsync overlap the
// generation of the next shards instead of stalling a generator. At most `max_buffers` shard
// buffers exist at once: when the disk is slower than the generators, they wait for a buffer.
class ShardPipeline {
 public:
  static constexpr uint64_t kChunk = 16384;  // samples per work item: 2.6 MB, ~20 ms of work

  ShardPipeline(const Generator& gen, const std::string& dir, uint64_t seed, const std::vector<ShardJob>& jobs,
                uint64_t shard_size, int threads)
      : gen_(gen), dir_(dir), seed_(seed), jobs_(jobs), threads_(threads),
        shards_(jobs.size()) {
    for (size_t s = 0; s < jobs.size(); ++s) {
      buffer_records_ = std::max(buffer_records_, jobs[s].count);
      for (uint64_t off = 0; off < jobs[s].count; off += kChunk) {
        chunks_.push_back({s, off, std::min(kChunk, jobs[s].count - off)});
        ++shards_[s].chunks_left;
      }
    }
    const uint64_t chunks_per_shard = (shard_size + kChunk - 1) / kChunk;
    max_buffers_ = std::min<size_t>(jobs.size(), threads / chunks_per_shard + 3);
  }

  // Runs to completion; rethrows the first error of any generator or writer thread.
  void run() {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads_; ++t) pool.emplace_back([this] { generate_loop(); });
    generate_loop();
    for (auto& th : pool) th.join();
    for (auto& th : writers_) th.join();  // generators are done: nobody adds writers any more
    if (error_) std::rethrow_exception(error_);
  }

  uint64_t positives(size_t shard) const { return shards_[shard].positives; }
  double fill_cpu_seconds() const { return fill_ns_ * 1e-9; }
  double write_seconds() const { return write_ns_ * 1e-9; }

 private:
  struct Chunk {
    size_t shard;
    uint64_t offset;
    uint64_t count;
  };
  struct Shard {
    std::atomic<size_t> chunks_left{0};
    std::atomic<uint64_t> positives{0};
    Sample* buf = nullptr;  // guarded by mu_
  };

  void generate_loop() {
    try {
      for (size_t c = next_++; c < chunks_.size() && !failed_; c = next_++) {
        const Chunk& ch = chunks_[c];
        Sample* buf = acquire(ch.shard);
        if (buf == nullptr) return;  // another thread failed
        const int64_t t0 = thread_cpu_ns();
        gen_.fill(jobs_[ch.shard].first_index + ch.offset, ch.count, buf + ch.offset);
        fill_ns_ += thread_cpu_ns() - t0;
        uint64_t pos = 0;
        for (uint64_t k = 0; k < ch.count; ++k) pos += buf[ch.offset + k].label;
        shards_[ch.shard].positives += pos;
        if (--shards_[ch.shard].chunks_left == 0) start_writer(ch.shard, buf);
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }

  // The shard's buffer, taking a free one (or allocating) the first time the shard is touched.
  Sample* acquire(size_t shard) {
    std::unique_lock<std::mutex> lock(mu_);
    Shard& s = shards_[shard];
    cv_.wait(lock, [&] { return s.buf != nullptr || failed_ || in_use_ < max_buffers_; });
    if (failed_) return nullptr;
    if (s.buf == nullptr) {
      if (free_.empty()) {
        // new[] leaves the records uninitialised: fill() writes every byte of them.
        owned_.emplace_back(new Sample[buffer_records_]);
        free_.push_back(owned_.back().get());
      }
      s.buf = free_.back();
      free_.pop_back();
      ++in_use_;
    }
    return s.buf;
  }

  void start_writer(size_t shard, Sample* buf) {
    std::lock_guard<std::mutex> lock(mu_);
    writers_.emplace_back([this, shard, buf] {
      try {
        const auto t0 = std::chrono::steady_clock::now();
        const ShardJob& job = jobs_[shard];
        write_shard((fs::path(dir_) / job.name).string(), seed_, job.first_index, buf, job.count);
        write_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
                         .count();
      } catch (...) {
        fail(std::current_exception());
      }
      std::lock_guard<std::mutex> guard(mu_);
      free_.push_back(buf);
      shards_[shard].buf = nullptr;
      --in_use_;
      cv_.notify_all();
    });
  }

  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = e;
    failed_ = true;
    cv_.notify_all();
  }

  const Generator& gen_;
  const std::string& dir_;
  const uint64_t seed_;
  const std::vector<ShardJob>& jobs_;
  const int threads_;
  uint64_t buffer_records_ = 0;
  std::vector<Chunk> chunks_;
  std::vector<Shard> shards_;
  size_t max_buffers_ = 1;
  std::atomic<size_t> next_{0};
  std::atomic<bool> failed_{false};
  std::atomic<int64_t> fill_ns_{0};
  std::atomic<int64_t> write_ns_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sample[]>> owned_;  // every buffer ever allocated
  std::vector<Sample*> free_;
  size_t in_use_ = 0;
  std::vector<std::thread> writers_;
  std::exception_ptr error_;
};

}  // namespace

GenerateResult generate(const GenerateOptions& opts, const TeacherMetricsFn& teacher_metrics) {
  const std::string& dir = opts.out_dir;
  if (dir.empty()) throw DataError("(no directory)", "generate: the output directory is empty");
  if (opts.shard_size == 0) throw DataError(dir, "generate: shard size must be at least 1");
  // The splits and the calibration samples are disjoint index ranges only within these bounds.
  if (opts.train == 0 || opts.train > kTestBase) {
    throw DataError(dir, fmt::format("generate: --train must be in [1, 2^32], got {}", opts.train));
  }
  if (opts.test == 0 || opts.test > kTestBase) {
    throw DataError(dir, fmt::format("generate: --test must be in [1, 2^32], got {}", opts.test));
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw DataError(dir, "cannot create the directory: " + ec.message());
  // An interrupted regeneration must never look complete: meta.json goes first, comes back last.
  const fs::path meta_path = fs::path(dir) / "meta.json";
  fs::remove(meta_path, ec);
  if (ec) throw DataError(meta_path.string(), "cannot remove the old file: " + ec.message());

  const std::vector<ShardJob> train_jobs = plan_split("train", 0, opts.train, opts.shard_size);
  const std::vector<ShardJob> test_jobs = plan_split("test", kTestBase, opts.test, opts.shard_size);
  std::vector<ShardJob> jobs = train_jobs;
  jobs.insert(jobs.end(), test_jobs.begin(), test_jobs.end());

  // Shards of an earlier, larger data set (and leftover temporaries) would only confuse a reader.
  std::set<std::string> planned;
  for (const auto& j : jobs) planned.insert(j.name);
  static const std::regex ours(R"((train|test)-\d{5,}\.bin(\.tmp)?)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, ours) && planned.count(name) == 0) fs::remove(entry.path(), ec);
  }

  GenerateResult result;
  const auto t_setup = std::chrono::steady_clock::now();
  const Generator gen(opts.seed);
  result.setup_seconds = seconds_since(t_setup);

  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int requested = opts.threads > 0 ? opts.threads : hw;
  uint64_t work_items = 0;  // more threads than chunks would only idle
  for (const auto& j : jobs) work_items += (j.count + ShardPipeline::kChunk - 1) / ShardPipeline::kChunk;
  const int threads = static_cast<int>(std::clamp<uint64_t>(requested, 1, work_items));
  result.threads = threads;

  const auto t_gen = std::chrono::steady_clock::now();
  ShardPipeline pipeline(gen, dir, opts.seed, jobs, opts.shard_size, threads);
  pipeline.run();
  result.seconds = seconds_since(t_gen);
  const double total = static_cast<double>(opts.train + opts.test);
  result.samples_per_s_per_thread = total / (result.seconds * threads);
  result.fill_samples_per_s_per_thread = total / pipeline.fill_cpu_seconds();
  result.write_seconds = pipeline.write_seconds();
  std::vector<uint64_t> positives(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) positives[j] = pipeline.positives(j);

  Metadata& meta = result.meta;
  meta.seed = opts.seed;
  meta.train_count = opts.train;
  meta.test_count = opts.test;
  meta.shard_size = opts.shard_size;
  meta.teacher_bias = gen.teacher().bias;
  uint64_t train_pos = 0;
  uint64_t test_pos = 0;
  for (size_t j = 0; j < jobs.size(); ++j) (j < train_jobs.size() ? train_pos : test_pos) += positives[j];
  meta.train_click_rate = static_cast<double>(train_pos) / static_cast<double>(opts.train);
  meta.test_click_rate = static_cast<double>(test_pos) / static_cast<double>(opts.test);
  for (const auto& j : train_jobs) meta.train_shards.push_back(j.name);
  for (const auto& j : test_jobs) meta.test_shards.push_back(j.name);

  // The teacher's metrics on the test split as it was written (read back through the mmap reader).
  const auto t_metrics = std::chrono::steady_clock::now();
  std::vector<ShardReader> test_shards;
  for (const auto& j : test_jobs) test_shards.emplace_back((fs::path(dir) / j.name).string());
  std::vector<float> probs(opts.test);
  std::vector<float> labels(opts.test);
  constexpr uint64_t kChunk = 8192;
  const uint64_t chunks = (opts.test + kChunk - 1) / kChunk;
  run_jobs(chunks, static_cast<int>(std::min<uint64_t>(requested, chunks)), [&](size_t c) {
    const uint64_t end = std::min(opts.test, (c + 1) * kChunk);
    for (uint64_t i = c * kChunk; i < end; ++i) {
      const ShardReader& shard = test_shards[i / opts.shard_size];
      const Sample& s = shard[i % opts.shard_size];
      probs[i] = static_cast<float>(1.0 / (1.0 + std::exp(-gen.teacher().logit(s))));
      labels[i] = static_cast<float>(s.label);
    }
  });
  test_shards.clear();
  const auto [auc, logloss] = teacher_metrics(probs, labels);
  meta.teacher_test_auc = auc;
  meta.teacher_test_logloss = logloss;
  result.metrics_seconds = seconds_since(t_metrics);

  write_metadata(dir, meta);
  return result;
}

}  // namespace ddplab::data

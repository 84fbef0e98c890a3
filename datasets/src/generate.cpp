// `ddplab data gen`: generates both splits into shard files on several threads, then measures the
// teacher on the test split as written, and writes meta.json last, so that a directory with a
// meta.json always holds a complete data set and one without it an interrupted generation.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <future>
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

// Runs fn(job, thread) for every job on `threads` threads; the first exception stops the others
// from taking new jobs and is rethrown here.
template <typename Fn>
void run_jobs(size_t jobs, int threads, Fn fn) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&](int t) {
    for (size_t j = next++; j < jobs; j = next++) {
      try {
        fn(j, t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        next = jobs;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
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
  // Threads take shards in this order; largest first keeps the last thread to finish from
  // starting a full shard while the others idle (the short last train and test shards go last).
  std::vector<size_t> order(jobs.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return jobs[a].count > jobs[b].count; });

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
  const int threads = std::clamp(requested, 1, static_cast<int>(jobs.size()));  // a shard per thread
  result.threads = threads;

  // Each thread streams its shard through one small buffer that stays in cache and never
  // page-faults again, appending (hash + write) chunk by chunk; fsync and rename then run on their
  // own thread while the generator moves on to its next shard.
  constexpr uint64_t kChunk = 8192;  // 1.3 MB
  std::vector<std::unique_ptr<Sample[]>> buffers(threads);
  std::vector<uint64_t> positives(jobs.size(), 0);
  std::atomic<int64_t> fill_ns{0};
  std::atomic<int64_t> write_ns{0};
  std::mutex commits_mu;
  std::vector<std::future<void>> commits;
  const auto t_gen = std::chrono::steady_clock::now();
  try {
    run_jobs(jobs.size(), threads, [&](size_t nth, int t) {
      const size_t j = order[nth];
      if (!buffers[t]) buffers[t].reset(new Sample[kChunk]);  // uninitialised: fill() writes it all
      Sample* buf = buffers[t].get();
      const ShardJob& job = jobs[j];
      auto writer = std::make_unique<ShardWriter>((fs::path(dir) / job.name).string(), opts.seed, job.first_index);
      for (uint64_t off = 0; off < job.count; off += kChunk) {
        const uint64_t n = std::min(kChunk, job.count - off);
        const int64_t c0 = thread_cpu_ns();
        gen.fill(job.first_index + off, n, buf);
        fill_ns += thread_cpu_ns() - c0;
        for (uint64_t k = 0; k < n; ++k) positives[j] += buf[k].label;
        const auto w0 = std::chrono::steady_clock::now();
        writer->append(buf, n);
        write_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w0).count();
      }
      std::lock_guard<std::mutex> lock(commits_mu);
      commits.push_back(std::async(std::launch::async, [w = std::move(writer), &write_ns] {
        const auto w0 = std::chrono::steady_clock::now();
        w->commit();
        write_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w0).count();
      }));
    });
  } catch (...) {
    for (auto& c : commits) c.wait();  // let started commits finish before unwinding
    throw;
  }
  for (auto& c : commits) c.get();  // rethrows a failed commit
  result.seconds = seconds_since(t_gen);
  const double total = static_cast<double>(opts.train + opts.test);
  result.samples_per_s_per_thread = total / (result.seconds * threads);
  result.fill_samples_per_s_per_thread = total / (static_cast<double>(fill_ns) * 1e-9);
  result.write_seconds = static_cast<double>(write_ns) * 1e-9;

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
  constexpr uint64_t kProbChunk = 8192;
  const uint64_t chunks = (opts.test + kProbChunk - 1) / kProbChunk;
  run_jobs(chunks, static_cast<int>(std::min<uint64_t>(requested, chunks)), [&](size_t c, int) {
    const uint64_t end = std::min(opts.test, (c + 1) * kProbChunk);
    for (uint64_t i = c * kProbChunk; i < end; ++i) {
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

// Google Benchmark micro-benchmarks of the kit's hot paths: sample generation (target: >= 500k
// samples/s per thread), batch assembly from memory-mapped shards, exact AUC, and the FM term.
// Run: build/solutions/tools/ddplab_microbench [--benchmark_filter=...]
#include <unistd.h>

#include <filesystem>
#include <random>

#include <benchmark/benchmark.h>

#include "ddplab/data/criteo.h"
#include "ddplab/data/generator.h"
#include "ddplab/data/loader.h"
#include "ddplab/deepfm.h"
#include "ddplab/metrics.h"
#include "ddplab/system.h"

namespace {

const ddplab::data::Generator& generator() {
  static const ddplab::data::Generator gen(1);
  return gen;
}

void BM_GenerateSamples(benchmark::State& state) {
  const auto& gen = generator();
  std::vector<ddplab::data::Sample> buf(4096);
  uint64_t first = 0;
  for (auto _ : state) {
    gen.fill(first, buf.size(), buf.data());
    benchmark::DoNotOptimize(buf.data());
    first += buf.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(buf.size()));
  state.counters["target_items_per_s"] = 500000;
}
BENCHMARK(BM_GenerateSamples)->Unit(benchmark::kMillisecond);

// The Criteo line parser on exported ctr-small lines (the import's target: 100 MB/s per thread;
// `ddplab data import criteo` prints the end-to-end figure with OK/FAILED).
void BM_ParseCriteoLines(benchmark::State& state) {
  std::vector<ddplab::data::Sample> samples(1024);
  generator().fill(0, samples.size(), samples.data());
  std::vector<std::string> lines;
  int64_t bytes = 0;
  for (const auto& s : samples) {
    lines.push_back(ddplab::data::format_criteo_line(s));
    bytes += static_cast<int64_t>(lines.back().size()) + 1;
  }
  ddplab::data::CriteoRecord r;
  for (auto _ : state) {
    for (const auto& l : lines) benchmark::DoNotOptimize(ddplab::data::parse_criteo_line(l, r));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
  state.counters["target_bytes_per_s"] = 100e6;
}
BENCHMARK(BM_ParseCriteoLines)->Unit(benchmark::kMicrosecond);

void BM_MakeBatchFromShards(benchmark::State& state) {
  namespace fs = std::filesystem;
  static const fs::path dir = fs::temp_directory_path() / ("ddplab_microbench_" + std::to_string(::getpid()));
  struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  };
  static const Cleanup cleanup;
  static const bool made = [] {
    ddplab::data::GenerateOptions g;
    g.out_dir = dir.string();
    g.train = 65536;
    g.test = 1000;
    g.threads = 1;
    ddplab::data::generate(g, [](const std::vector<float>& p, const std::vector<float>& y) {
      return std::make_pair(ddplab::metrics::exact_auc(p, y), ddplab::metrics::log_loss(p, y));
    });
    return true;
  }();
  (void)made;
  ddplab::sys::configure_threads(1);
  ddplab::data::Dataset ds(dir.string(), ddplab::data::Split::kTrain);
  const auto order = ddplab::data::shuffled_order(ds.size(), 1, 0);
  const auto batch = static_cast<size_t>(state.range(0));
  size_t pos = 0;
  for (auto _ : state) {
    if (pos + batch > order.size()) pos = 0;
    auto b = ddplab::data::make_batch(ds, order.data() + pos, batch);
    benchmark::DoNotOptimize(b.rows.data_ptr());
    pos += batch;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_MakeBatchFromShards)->Arg(512)->Unit(benchmark::kMicrosecond);

void BM_ExactAuc(benchmark::State& state) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> s(static_cast<size_t>(state.range(0))), y(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = u(rng);
    y[i] = u(rng) < 0.25f ? 1.0f : 0.0f;
  }
  for (auto _ : state) benchmark::DoNotOptimize(ddplab::metrics::exact_auc(s, y));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_ExactAuc)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_FmInteraction(benchmark::State& state) {
  ddplab::sys::configure_threads(1);
  torch::NoGradGuard g;
  const auto e = torch::randn({state.range(0), 26, 16});
  for (auto _ : state) benchmark::DoNotOptimize(ddplab::DeepFMImpl::fm_interaction(e).data_ptr());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_FmInteraction)->Arg(512)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();

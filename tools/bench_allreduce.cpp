// `ddplab bench allreduce`: all-reduce time, algorithm and bus bandwidth per message size, in the
// style of nccl-tests, run under any launcher (each rank reads its place from the environment).
// busbw = algbw * 2(n-1)/n (NVIDIA nccl-tests, doc/PERFORMANCE.md; docs/concepts/metrics.md).
#include <algorithm>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "commands.h"
#include "ddplab/dist/env.h"
#include "ddplab/dist/process_group.h"
#include "ddplab/error.h"
#include "ddplab/report.h"
#include "ddplab/system.h"
#include "ddplab/timer.h"

namespace ddplab::tools {

struct BenchAllreduceOptions {
  int64_t min_bytes = 4;
  int64_t max_bytes = 64LL << 20;
  int64_t factor = 4;
  int64_t iters = 20;
  int64_t warmup = 5;
  std::string device = "cpu";
  double timeout = 120;
  std::string json;  ///< also write the rows here (rank 0), the input of `ddplab forecast`
  std::string backend = "auto";
  double small_target_us = 100;  ///< issue 18: an all-reduce of <= 1 KiB within this at 2 ranks
  double busbw_target = 3.0;     ///< issue 18: 64 MiB at >= this bus bandwidth (GB/s)
};

int run_bench_allreduce(const BenchAllreduceOptions& o) {
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.factor < 2) {
    throw ConfigError(fmt::format("--min-bytes {} --max-bytes {} --factor {}: need 4 <= min <= max and factor >= 2",
                                  o.min_bytes, o.max_bytes, o.factor));
  }
  const auto env = dist::detect_environment();
  if (env.distributed()) set_process_rank(env.rank);
  sys::configure_threads(1);
  torch::Device device = sys::parse_device(o.device);
  if (device.is_cuda() && !device.has_index())
    device = torch::Device(torch::kCUDA, static_cast<int8_t>(env.local_rank));
  dist::ProcessGroupOptions po;
  po.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout * 1000));
  po.backend = o.backend;
  auto pg = dist::ProcessGroup::join(env, device, po);
  const int n = pg->size();
  const std::string backend = pg->backend_name();
  const bool root = pg->rank() == 0;
  if (root) {
    fmt::print(
        "# ddplab bench allreduce: {} rank(s), backend {}{}, device {}, float32 sum, {} iterations after {} warm-up\n",
        n, pg->backend_name(), pg->allreduce_algorithm().empty() ? "" : " (" + pg->allreduce_algorithm() + ")",
        device.str(), o.iters, o.warmup);
    fmt::print(
        "# busbw = algbw * 2(n-1)/n; time: the slowest rank's mean per call, each call started after a barrier\n");
    fmt::print("{:>12} {:>12} {:>11} {:>10} {:>10} {:>7}\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
               "busbw(GB/s)", "#wrong");
  }
  int64_t wrong_total = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
    const int64_t count = bytes / 4;
    // Values from (rank, index) so the sum is exact: rank + (index % 7).
    const auto base = (torch::arange(count, torch::kInt64) % 7).to(torch::kFloat32);
    auto t = (base + static_cast<float>(pg->rank())).to(device);
    for (int64_t i = 0; i < o.warmup; ++i) pg->allreduce(t);
    const auto fresh = (base + static_cast<float>(pg->rank())).to(device);
    double timed = 0.0;
    for (int64_t i = 0; i < o.iters; ++i) {
      t.copy_(fresh);  // restore the inputs (untimed) so the result stays exactly checkable
      if (device.is_cuda()) torch::cuda::synchronize();
      pg->barrier();
      const auto start = StepTimer::Clock::now();
      pg->allreduce(t);
      if (device.is_cuda()) torch::cuda::synchronize();
      timed += seconds_since(start);
    }
    auto secs = torch::tensor({timed / static_cast<double>(o.iters)}, torch::kFloat64).to(device);
    // The slowest rank defines the collective's time: all-reduce max via gather to every rank.
    std::vector<torch::Tensor> all(static_cast<size_t>(n));
    for (auto& a : all) a = torch::empty_like(secs);
    pg->allgather(all, secs);
    double slowest = 0;
    for (const auto& a : all) slowest = std::max(slowest, a.item<double>());
    // Check the result of the last call: sum over ranks of (rank + i%7) = n*(i%7) + n(n-1)/2.
    const auto expected = base * static_cast<float>(n) + static_cast<float>(n * (n - 1) / 2);
    const int64_t wrong = t.to(torch::kCPU).ne(expected).sum().item<int64_t>();
    wrong_total += wrong;
    const double algbw = static_cast<double>(bytes) / slowest / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    if (root) {
      fmt::print("{:>12} {:>12} {:>11.1f} {:>10.3f} {:>10.3f} {:>7}\n", bytes, count, slowest * 1e6, algbw, busbw,
                 wrong);
      rows.push_back({{"bytes", bytes}, {"seconds", slowest}, {"algbw_gb_per_s", algbw}, {"busbw_gb_per_s", busbw}});
    }
  }
  pg->shutdown();
  if (root) fmt::print("# {} wrong elements in all: {}\n", wrong_total, wrong_total == 0 ? "OK" : "FAILED");
  if (root) {
    // The performance targets, as verdict lines (the exit status stays the correctness check's:
    // ddplab forecast runs this benchmark on whatever transport it is asked to model).
    double small = -1, large_busbw = -1;
    int64_t large_bytes = 0;
    for (const auto& row : rows) {
      const auto bytes = row["bytes"].get<int64_t>();
      if (bytes <= 1024) small = std::max(small, row["seconds"].get<double>() * 1e6);
      if (bytes >= (64LL << 20)) large_busbw = row["busbw_gb_per_s"].get<double>(), large_bytes = bytes;
    }
    if (small >= 0) {
      fmt::print("# small messages (<= 1 KiB): slowest {:.1f} us   target <= {:.0f} us   {}\n", small,
                 o.small_target_us, small <= o.small_target_us ? "OK" : "FAILED");
    }
    if (large_busbw >= 0) {
      fmt::print("# {} MiB busbw {:.2f} GB/s   target >= {:.1f} GB/s   {}\n", large_bytes >> 20, large_busbw,
                 o.busbw_target, large_busbw >= o.busbw_target ? "OK" : "FAILED");
    }
  }
  if (root && !o.json.empty()) {
    const nlohmann::json j = {{"benchmark", "allreduce"}, {"ranks", n},
                              {"backend", backend},       {"allreduce_algorithm", pg->allreduce_algorithm()},
                              {"device", device.str()},   {"iterations", o.iters},
                              {"wrong", wrong_total},     {"rows", rows}};
    write_file_atomic(o.json, j.dump(2) + "\n");
  }
  return wrong_total == 0 ? 0 : 1;
}

void setup_bench_allreduce(CLI::App& bench) {
  auto o = std::make_shared<BenchAllreduceOptions>();
  auto* sub = bench.add_subcommand("allreduce", "All-reduce time, algbw and busbw per size (run under a launcher)");
  sub->add_option("--min-bytes", o->min_bytes, "Smallest message")->capture_default_str();
  sub->add_option("--max-bytes", o->max_bytes, "Largest message")->capture_default_str();
  sub->add_option("--factor", o->factor, "Size step factor")->capture_default_str();
  sub->add_option("--iters", o->iters, "Timed calls per size")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Untimed calls per size")->capture_default_str();
  sub->add_option("--device", o->device, "cpu (Gloo) or cuda (NCCL)")->capture_default_str();
  sub->add_option("--comm-timeout", o->timeout, "Seconds before a collective fails")->capture_default_str();
  sub->add_option("--backend", o->backend,
                  "auto (gloo on CPU, nccl on CUDA), gloo, nccl, or mpi (under mpirun; `ddplab launch` sets "
                  "DDPLAB_BACKEND=mpi when it starts the ranks through mpirun)")
      ->envname("DDPLAB_BACKEND")
      ->check(CLI::IsMember({"auto", "gloo", "mpi", "nccl"}))
      ->capture_default_str();
  sub->add_option("--json", o->json, "Rank 0 also writes the rows to this JSON file (read by ddplab forecast)");
  sub->add_option("--small-target-us", o->small_target_us, "Target: slowest all-reduce of <= 1 KiB, microseconds")
      ->capture_default_str();
  sub->add_option("--busbw-target", o->busbw_target, "Target: bus bandwidth of >= 64 MiB, GB/s")->capture_default_str();
  sub->callback([o] { exit_status() = run_bench_allreduce(*o); });
}

}  // namespace ddplab::tools

// `ddplab bench train`: single-rank training throughput of the course model, next to its lower
// bound — the step's dense-layer GEMM FLOPs at the single-thread SGEMM rate measured in the same
// run — with the phase split and an OK/FAILED verdict against the target (issue 18: the step
// takes at most 1.35x that bound). Definitions: docs/concepts/metrics.md.
#include <algorithm>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench_common.h"
#include "commands.h"
#include "ddplab/data/loader.h"
#include "ddplab/deepfm.h"
#include "ddplab/error.h"
#include "ddplab/fused_adam.h"
#include "ddplab/report.h"
#include "ddplab/system.h"
#include "ddplab/timer.h"
#include "ddplab/train.h"

namespace ddplab::tools {
namespace {

struct BenchTrainOptions {
  int64_t batch = 512;
  int threads = 1;
  std::string device = "cpu";
  int64_t warmup = 10;
  int64_t min_steps = 30;
  double min_seconds = 5.0;
  double target = 1.35;             ///< largest allowed step time / GEMM-only bound
  std::string optimizer = "fused";  ///< fused (the kit's one-pass Adam) or torch (torch::optim::Adam)
  bool sparse_gradients = true;     ///< row-sparse embedding gradients (fused only)
  bool tune_allocator = true;
  std::string json;
};

}  // namespace

namespace {

int run_bench_train(const BenchTrainOptions& o) {
  if (o.batch < 1) throw ConfigError(fmt::format("--batch {}: must be at least 1", o.batch));
  if (o.target < 1)
    throw ConfigError(fmt::format("--target {}: a step cannot beat its GEMM bound; give a ratio >= 1", o.target));
  if (o.optimizer != "fused" && o.optimizer != "torch") {
    throw ConfigError(fmt::format("--optimizer {}: must be fused or torch", o.optimizer));
  }
  const torch::Device device = sys::parse_device(o.device);
  const double peak = device.is_cpu() ? sys::measure_sgemm_gflops(1.0) : 0.0;
  sys::configure_threads(o.threads);
  if (o.tune_allocator) sys::tune_allocator();
  torch::manual_seed(0);

  const auto batches = synthetic_batches(o.batch, 16, device);
  if (o.sparse_gradients && o.optimizer != "fused") {
    throw ConfigError("--sparse-gradients: torch::optim::Adam refuses sparse gradients; add --dense-gradients");
  }
  DeepFMOptions model_options;
  model_options.sparse_gradients = o.sparse_gradients;
  DeepFM model(model_options);
  model->to(device);
  auto opt = optim::make_adam(o.optimizer, model->parameters(), torch::optim::AdamOptions(1e-3));
  StepTimer timer;
  if (device.is_cuda()) timer.set_synchronizer([] { torch::cuda::synchronize(); });
  auto step = [&](const data::Batch& b) {
    timer.begin_step();
    train_step(model, *opt, b, timer);  // no sync: one process
    timer.end_step();
  };
  for (int64_t i = 0; i < o.warmup; ++i) step(batches[static_cast<size_t>(i) % batches.size()]);
  timer.reset();
  const auto start = StepTimer::Clock::now();
  for (int64_t i = 0; i < o.min_steps || seconds_since(start) < o.min_seconds; ++i) {
    step(batches[static_cast<size_t>(i) % batches.size()]);
  }

  const double step_median = median(timer.step_seconds());
  const double samples_per_s = static_cast<double>(o.batch) / step_median;
  const double gflops = deepfm_train_flops_per_sample() * samples_per_s / 1e9;
  const double fraction = peak > 0 ? gflops / (peak * o.threads) : 0.0;
  // The GEMM-only bound: the step's dense-layer FLOPs at the SGEMM rate, nothing else.
  const double bound =
      peak > 0 ? deepfm_train_flops_per_sample() * static_cast<double>(o.batch) / (peak * 1e9 * o.threads) : 0.0;
  const double ratio = bound > 0 ? step_median / bound : 0.0;
  const bool ok = device.is_cpu() ? ratio <= o.target : true;

  fmt::print(
      "bench train: DeepFM (3,338,913 params), batch {}, {} thread(s), device {}, {} Adam, {} steps after {} "
      "warm-up{}\n",
      o.batch, o.threads, device.str(),
      o.optimizer == "fused"
          ? (o.sparse_gradients ? "the kit's one-pass, row-sparse embedding gradients," : "the kit's one-pass")
          : "torch::optim::",
      timer.steps(), o.warmup, o.tune_allocator ? "" : ", glibc malloc defaults");
  fmt::print("  step time (median)   {:8.2f} ms\n", step_median * 1e3);
  fmt::print("  throughput           {:8.0f} samples/s\n", samples_per_s);
  fmt::print("  dense-layer FLOPs    {:8.2f} MFLOP/sample -> {:.1f} GFLOP/s achieved\n",
             deepfm_train_flops_per_sample() / 1e6, gflops);
  const double total = timer.total(Phase::kForward) + timer.total(Phase::kBackward) + timer.total(Phase::kOptimizer);
  fmt::print("  phase split          forward {:.0f}% | backward {:.0f}% | optimizer {:.0f}%\n",
             100 * timer.total(Phase::kForward) / total, 100 * timer.total(Phase::kBackward) / total,
             100 * timer.total(Phase::kOptimizer) / total);
  if (device.is_cpu()) {
    fmt::print("  SGEMM peak (1 thread) {:7.1f} GFLOP/s measured in this run\n", peak);
    fmt::print("  fraction of peak     {:8.1f}%\n", 100 * fraction);
    fmt::print("  GEMM-only bound      {:8.2f} ms   (the step's GEMM FLOPs at {} thread(s) x peak)\n", bound * 1e3,
               o.threads);
    fmt::print("  step / bound         {:8.2f}x   target <= {:.2f}x   {}\n", ratio, o.target, ok ? "OK" : "FAILED");
  } else {
    fmt::print("  (no CPU SGEMM target on {}; figures reported only)\n", device.str());
  }
  if (!o.json.empty()) {
    const nlohmann::json j = {{"benchmark", "train"},
                              {"batch", o.batch},
                              {"threads", o.threads},
                              {"device", device.str()},
                              {"steps", timer.steps()},
                              {"step_median_s", step_median},
                              {"samples_per_s", samples_per_s},
                              {"gflops", gflops},
                              {"sgemm_peak_gflops", peak},
                              {"fraction_of_peak", fraction},
                              {"optimizer", o.optimizer},
                              {"sparse_gradients", o.sparse_gradients},
                              {"gemm_bound_s", bound},
                              {"ratio_to_bound", ratio},
                              {"target", o.target},
                              {"ok", ok},
                              {"phases",
                               {{"forward", timer.total(Phase::kForward)},
                                {"backward", timer.total(Phase::kBackward)},
                                {"optimizer", timer.total(Phase::kOptimizer)}}}};
    write_file_atomic(o.json, j.dump(2) + "\n");
  }
  return ok ? 0 : 1;
}

}  // namespace

void setup_bench_train(CLI::App& bench) {
  auto o = std::make_shared<BenchTrainOptions>();
  auto* train = bench.add_subcommand("train", "Single-rank training throughput vs the measured SGEMM peak");
  train->add_option("--batch", o->batch, "Batch size")->capture_default_str();
  train->add_option("--threads", o->threads, "Intra-op threads")->capture_default_str();
  train->add_option("--device", o->device, "cpu, cuda, cuda:N or auto")->capture_default_str();
  train->add_option("--warmup", o->warmup, "Warm-up steps (not timed)")->capture_default_str();
  train->add_option("--min-steps", o->min_steps, "Minimum timed steps")->capture_default_str();
  train->add_option("--min-seconds", o->min_seconds, "Minimum timed seconds")->capture_default_str();
  train->add_option("--target", o->target, "Largest allowed step time / GEMM-only bound (FLOPs at threads x peak)")
      ->capture_default_str();
  train->add_option("--optimizer", o->optimizer, "fused (the kit's one-pass Adam) or torch (torch::optim::Adam)")
      ->capture_default_str();
  train
      ->add_flag("--sparse-gradients,!--dense-gradients", o->sparse_gradients,
                 "Row-sparse embedding gradients (the one-pass Adam only)")
      ->capture_default_str();
  train
      ->add_flag("--tune-allocator,!--no-tune-allocator", o->tune_allocator,
                 "Keep freed memory in the process (glibc defaults page-fault every step)")
      ->capture_default_str();
  train->add_option("--json", o->json, "Also write the figures to this JSON file");
  train->callback([o] { exit_status() = run_bench_train(*o); });
}

}  // namespace ddplab::tools

// `ddplab bench pytorch`: the kit's data-parallel trainer (ddp_train) against stock PyTorch DDP
// (tools/bench/pytorch_ddp.py, run by Debian's python3-torch under torchrun) on the same shards,
// batch, threads, BLAS and algorithm (dense Adam, DDP's overlapped buckets), interleaved run by run
// so that both meet the same machine; medians of the runs, the ratio, OK/FAILED against the
// target (issue 18: >= 1.5x at every world size). --epoch trains one epoch each and compares the
// test AUC as well (within 0.005).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ddplab/config.h"
#include "ddplab/data/shard.h"
#include "ddplab/error.h"
#include "ddplab/launch.h"
#include "ddplab/report.h"
#include "ddplab/timer.h"
#include "trial.h"

namespace fs = std::filesystem;

namespace ddplab::tools {
namespace {

struct BenchPytorchOptions {
  std::vector<int> ranks = {1, 2};
  int64_t batch = 512;
  int64_t steps = 200;
  int64_t warmup = 20;
  int repeats = 3;
  bool epoch = false;
  std::string data;
  std::string python = "/usr/bin/python3";
  std::string torchrun;  ///< default: that Python's own launcher (python -m torch.distributed.run)
  std::string script;
  std::string
      trainer;  ///< the kit's trainer; default ddp_train beside this program (another build's, for a before/after)
  std::string backend = "auto";  ///< the kit's transport (gloo, or mpi through mpirun)
  std::string sync = "overlap";  ///< the kit's rung: overlap is DDP's; sparse exchanges the looked-up rows
  double target = 1.5;
  double max_auc_gap = 0.005;
  double timeout = 1800;
  std::string json;
};

struct Result {
  double samples_per_s = 0;
  double auc = -1;
};

Result run_kit(const BenchPytorchOptions& o, int n, const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::string> args = {o.trainer,
                                   "--data",
                                   o.data,
                                   "--batch",
                                   std::to_string(o.batch),
                                   "--threads",
                                   "1",
                                   "--sync",
                                   o.sync,
                                   "--log-every",
                                   "0",
                                   "--eval-samples",
                                   o.epoch ? "0" : "1000",
                                   "--report",
                                   (dir / "rank{rank}.json").string()};
  if (!o.epoch) args.insert(args.end(), {"--max-steps", std::to_string(o.warmup + o.steps)});
  LaunchSpec spec;
  spec.nproc = n;
  spec.command = args;
  if (o.backend == "mpi" && n > 1) start_with_mpirun(spec, n);
  run_captured(spec, o.timeout, fmt::format("the kit's trainer on {} rank(s)", n));
  Result r;
  double slowest = 0;
  for (int k = 0; k < n; ++k) {
    const auto rep = RunReport::load((dir / fmt::format("rank{}.json", k)).string());
    slowest = std::max(slowest, rep.at("phases").at("step_median").get<double>());
    if (k == 0 && rep.contains("eval")) r.auc = rep.at("eval").at("auc").get<double>();
  }
  r.samples_per_s = static_cast<double>(n * o.batch) / slowest;
  return r;
}

Result run_pytorch(const BenchPytorchOptions& o, int n) {
  std::vector<std::string> args =
      {o.script,    "--data", o.data, "--batch", std::to_string(o.batch), "--warmup", std::to_string(o.warmup),
       "--threads", "1"};
  args.insert(args.end(), {"--steps", o.epoch ? "0" : std::to_string(o.warmup + o.steps)});
  if (o.epoch) args.insert(args.end(), {"--eval-samples", "1000000000"});
  LaunchSpec spec;
  spec.nproc = 1;
  if (n == 1) {
    spec.command = {o.python};  // one process: no DDP, the way one trains on one device
  } else {
    // Debian's torchrun 1.13 fails in to_map without --redirects/--tee (docs/concepts/launching.md);
    // 2.x still takes both.
    spec.command = {"/usr/bin/env", "-u", "RANK", "-u", "WORLD_SIZE"};
    if (o.torchrun.empty()) {
      spec.command.insert(spec.command.end(), {o.python, "-m", "torch.distributed.run"});
    } else {
      spec.command.push_back(o.torchrun);
    }
    spec.command.insert(spec.command.end(),
                        {"--standalone", "--nproc_per_node", std::to_string(n), "--redirects", "1", "--tee", "1"});
  }
  spec.command.insert(spec.command.end(), args.begin(), args.end());
  const std::string out = run_captured(spec, o.timeout, fmt::format("PyTorch DDP on {} rank(s)", n));
  const size_t at = out.find("PYTORCH_RESULT ");
  if (at == std::string::npos) throw Error(fmt::format("PyTorch DDP on {} rank(s) printed no result:\n{}", n, out));
  const auto j = nlohmann::json::parse(out.substr(at + 15, out.find('\n', at) - at - 15));
  Result r;
  r.samples_per_s = j.at("samples_per_s").get<double>();
  r.auc = j.value("test_auc", -1.0);
  return r;
}

int run_bench_pytorch(BenchPytorchOptions o) {
  o.backend = bench_backend(o.backend, 2);  // auto: Open MPI where the kit can start ranks through mpirun
  if (o.data.empty()) {
    const char* env = std::getenv("DDPLAB_DATA");
    o.data = env != nullptr ? env : "data/ctr-small";
  }
  if (!fs::exists(fs::path(o.data) / "meta.json")) {
    throw ConfigError(fmt::format("--data {}: no data set there (./kit main generates data/ctr-small)", o.data));
  }
  o.data = fs::canonical(o.data).string();
  if (o.script.empty()) o.script = (fs::path(DDPLAB_SOURCE_DIR) / "tools" / "bench" / "pytorch_ddp.py").string();
  if (!fs::exists(o.script)) throw ConfigError(fmt::format("--script {}: not found", o.script));
  if (o.trainer.empty()) o.trainer = (fs::canonical("/proc/self/exe").parent_path() / "ddp_train").string();
  if (!fs::exists(o.trainer)) throw ConfigError(fmt::format("--trainer {}: not found", o.trainer));
  for (const auto& [what, path] :
       {std::pair<const char*, std::string>{"--python", o.python}, {"--torchrun", o.torchrun}}) {
    if (!path.empty() && ::access(path.c_str(), X_OK) != 0) {
      throw ConfigError(
          fmt::format("{} {}: not an executable (Debian's torch 1.13: python3-torch, which tools/setup-debian.sh "
                      "installs; torch 2.x: .venv/bin/python, which DDPLAB_TORCH=pip ./kit build installs)",
                      what, path));
    }
  }
  // Which PyTorch the peer is: printed and recorded, since the ratio depends on it.
  std::string peer_version;
  {
    LaunchSpec v;
    v.nproc = 1;
    v.command = {o.python, "-c", "import torch; print('torch', torch.__version__)"};
    const std::string out = run_captured(v, 120, fmt::format("{} (the PyTorch peer's Python)", o.python));
    const size_t at = out.find("torch ");
    if (at == std::string::npos) throw ConfigError(fmt::format("--python {}: has no torch:\n{}", o.python, out));
    peer_version = out.substr(at + 6, out.find('\n', at) - at - 6);
  }
  if (o.repeats < 1) throw ConfigError(fmt::format("--repeats {}: need at least 1", o.repeats));
  const fs::path scratch = fs::temp_directory_path() / fmt::format("ddplab-bench-pytorch-{}", ::getpid());
  fmt::print(
      "bench pytorch: DeepFM on {}, batch {} a rank, 1 thread a rank, dense Adam; the kit's "
      "{} (--sync {}, {}) against PyTorch {} DDP ({} under {}), {}, interleaved, {} repeat(s)\n",
      o.data, o.batch, o.trainer, o.sync, o.backend == "mpi" ? "mpi" : "gloo", peer_version, o.script, o.python,
      o.epoch ? "one epoch each" : fmt::format("{} steps after {} warm-up", o.steps, o.warmup), o.repeats);
  std::map<int, std::vector<Result>> kit, torch_runs;
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (int n : o.ranks) {
      kit[n].push_back(run_kit(o, n, scratch / fmt::format("kit-{}-{}", n, rep)));
      torch_runs[n].push_back(run_pytorch(o, n));
      fmt::print("  repeat {}, {} rank(s): kit {:.0f}, PyTorch {:.0f} samples/s\n", rep + 1, n,
                 kit[n].back().samples_per_s, torch_runs[n].back().samples_per_s);
    }
  }
  fs::remove_all(scratch);
  auto med = [](const std::vector<Result>& v, bool auc) {
    std::vector<double> x;
    for (const auto& r : v) x.push_back(auc ? r.auc : r.samples_per_s);
    return median(x);
  };
  fmt::print("{:>6} {:>14} {:>16} {:>7} {:>8} {:>10} {:>10}\n", "ranks", "kit samples/s", "PyTorch samples/s", "ratio",
             "target", "kit AUC", "PyTorch AUC");
  bool ok = true;
  nlohmann::json rows = nlohmann::json::array();
  for (int n : o.ranks) {
    const double k = med(kit[n], false), p = med(torch_runs[n], false), ratio = k / p;
    bool row_ok = ratio >= o.target;
    std::string aucs;
    double ka = -1, pa = -1;
    if (o.epoch) {
      ka = med(kit[n], true);
      pa = med(torch_runs[n], true);
      row_ok = row_ok && std::abs(ka - pa) <= o.max_auc_gap;
      aucs = fmt::format("{:>10.4f} {:>10.4f}", ka, pa);
    }
    ok = ok && row_ok;
    fmt::print("{:>6} {:>14.0f} {:>16.0f} {:>6.2f}x {:>7.2f}x {}   {}\n", n, k, p, ratio, o.target, aucs,
               row_ok ? "OK" : "FAILED");
    rows.push_back({{"ranks", n},
                    {"kit_samples_per_s", k},
                    {"pytorch_samples_per_s", p},
                    {"ratio", ratio},
                    {"kit_auc", ka},
                    {"pytorch_auc", pa},
                    {"ok", row_ok}});
  }
  fmt::print("  kit / PyTorch >= {:.2f}x at every world size{}: {}\n", o.target,
             o.epoch ? fmt::format(", test AUC within {}", o.max_auc_gap) : "", ok ? "OK" : "FAILED");
  if (!o.json.empty()) {
    const nlohmann::json j = {{"benchmark", "pytorch"}, {"batch", o.batch},
                              {"steps", o.steps},       {"epoch", o.epoch},
                              {"repeats", o.repeats},   {"backend", o.backend},
                              {"target", o.target},     {"ok", ok},
                              {"rows", rows},           {"pytorch", {{"python", o.python}, {"torch", peer_version}}}};
    write_file_atomic(o.json, j.dump(2) + "\n");
  }
  return ok ? 0 : 1;
}

}  // namespace

void setup_bench_pytorch(CLI::App& bench) {
  auto o = std::make_shared<BenchPytorchOptions>();
  auto* sub =
      bench.add_subcommand("pytorch", "The kit's trainer against stock PyTorch DDP, interleaved (ratio, OK/FAILED)");
  sub->add_option("--ranks", o->ranks, "World sizes")->delimiter(',')->capture_default_str();
  sub->add_option("--batch", o->batch, "Batch size a rank")->capture_default_str();
  sub->add_option("--steps", o->steps, "Timed steps a run (after --warmup)")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Steps left out of PyTorch's timing")->capture_default_str();
  sub->add_option("--repeats", o->repeats, "Interleaved runs of each; medians are compared")->capture_default_str();
  sub->add_flag("--epoch", o->epoch, "Train one epoch each and compare the test AUC too");
  sub->add_option("--data", o->data, "Data set (default: $DDPLAB_DATA or data/ctr-small)");
  sub->add_option("--python", o->python,
                  "A Python with torch: Debian's 1.13 (default), or torch 2.x in .venv/bin/python (DDPLAB_TORCH=pip)")
      ->capture_default_str();
  sub->add_option("--torchrun", o->torchrun, "Its launcher (default: python -m torch.distributed.run)");
  sub->add_option("--script", o->script,
                  "The PyTorch trainer (default: tools/bench/pytorch_ddp.py of the source tree)");
  sub->add_option("--trainer", o->trainer,
                  "The kit's trainer (default: ddp_train beside this program; another build's ddp_train "
                  "puts a before/after side by side)");
  sub->add_option("--backend", o->backend,
                  "The kit's transport: auto (mpi where the kit can start ranks through mpirun, as ddplab launch "
                  "--backend auto; else gloo), gloo (the kit's launcher), mpi")
      ->check(CLI::IsMember({"auto", "gloo", "mpi"}))
      ->capture_default_str();
  sub->add_option("--sync", o->sync,
                  "The kit's sync rung at 2+ ranks: overlap (DDP's buckets) or sparse (the looked-up rows); "
                  "both average the same gradient for the same dense Adam")
      ->check(CLI::IsMember({"overlap", "sparse", "bucketed", "per-param"}))
      ->capture_default_str();
  sub->add_option("--target", o->target, "Required kit / PyTorch throughput ratio")->capture_default_str();
  sub->add_option("--timeout", o->timeout, "Seconds before a run is stopped")->capture_default_str();
  sub->add_option("--json", o->json, "Also write the figures to this JSON file");
  sub->callback([o] { exit_status() = run_bench_pytorch(*o); });
}

}  // namespace ddplab::tools

// The flags every lab program shares. Each flag has an environment fallback (DDPLAB_<NAME>), so
// an instructor can set a course-wide default once; the table is in docs/concepts/metrics.md.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace ddplab {

struct LabOptions {
  std::string data = "data/ctr-small";  ///< --data, DDPLAB_DATA: folder written by `ddplab data gen`
  int64_t epochs = 1;                   ///< --epochs
  int64_t batch = 512;                  ///< --batch: per-rank batch size
  double lr = 1e-3;                     ///< --lr: Adam learning rate at a global batch of 512
  bool lr_scaling = true;               ///< --lr-scaling/--no-lr-scaling: lr x global batch / 512
  int threads = 1;                      ///< --threads, DDPLAB_THREADS: intra-op threads per rank
  std::string device = "cpu";           ///< --device, DDPLAB_DEVICE: cpu, cuda, cuda:N, auto
  uint64_t seed = 0;                    ///< --seed: model initialisation and shuffling
  bool same_init = true;                ///< --same-init/--rank-init: every rank seeds with --seed, or --seed + rank
  double comm_timeout = 60.0;           ///< --comm-timeout, DDPLAB_COMM_TIMEOUT: seconds before a collective fails
  std::string backend = "auto";    ///< --backend, DDPLAB_BACKEND: auto (gloo on CPU, nccl on CUDA), gloo, mpi, nccl
  std::string report;              ///< --report, DDPLAB_REPORT: run report path ("{rank}" is replaced)
  int64_t log_every = 100;         ///< --log-every: progress line every N steps (0: off)
  int64_t max_steps = 0;           ///< --max-steps: stop after N steps (0: full epochs)
  uint64_t train_samples = 0;      ///< --train-samples: use the first N training samples (0: all)
  uint64_t eval_samples = 0;       ///< --eval-samples: evaluate on the first N test samples (0: all)
  std::string save_model;          ///< --save-model: write the final parameters here (rank 0)
  std::string log_level = "info";  ///< --log-level, DDPLAB_LOG_LEVEL
  std::string trace;               ///< --trace, DDPLAB_TRACE: timeline file ("{rank}" is replaced; empty: off)
  int64_t trace_steps = 50;        ///< --trace-steps, DDPLAB_TRACE_STEPS: keep the first and last N steps (0: all)

  /// Learning rate actually used for a global batch of `global_batch` samples.
  double effective_lr(int64_t global_batch) const;
  /// Report path for `rank`: --report with "{rank}" replaced, else runs/LAB/rankR.json.
  std::string report_path(const std::string& lab, int rank) const;
  /// Timeline path for `rank`: --trace with "{rank}" replaced; empty when tracing is off.
  std::string trace_path(int rank) const;
  nlohmann::json to_json() const;
};

/// Registers the shared flags on `app`, writing into `opts`.
void add_lab_options(CLI::App& app, LabOptions& opts);

/// Checks value ranges after parsing; throws ddplab::ConfigError naming the flag and value.
void validate(const LabOptions& opts);

}  // namespace ddplab

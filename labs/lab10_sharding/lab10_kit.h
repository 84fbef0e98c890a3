// Lab 10's apparatus, read-only for students (tested in tests/lab10_kit_test.cpp): the driver's
// flags, the probes that try each exercise once in a world of one, the step of each --shard mode
// (with its comm tally, its memory figures and the DDP + Adam shadow it is compared with), the
// check of a partition, and the check that a sharded checkpoint loads at 1, 2 and 3 ranks.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "lab10.h"

#include "ddplab/dist/communicator.h"
#include "ddplab/lab.h"
#include "ddplab/memory.h"
#include "ddplab/step.h"

namespace lab10 {

/// The driver's own flags.
struct Flags {
  std::string shard = "zero2";  ///< none (DDP + Adam), zero1 (10.2) or zero2 (10.3)
  int64_t align = 32;           ///< elements of one alignment unit (128 bytes of float)
  bool parity = false;          ///< compare every step with a DDP + Adam shadow of the model
  bool checkpoint = false;      ///< at the end: save the shards (10.4) and load them at 1, 2 and 3 ranks
};
void add_flags(ddplab::LabFlags& f, Flags& flags);

/// Each exercise once on three small tensors in a world of one.
void add_probes(ddplab::LabProgram& program);

/// What is wrong with `p` as a partition of `numels` over `world` ranks in units of `align`
/// (lab10.h, 10.1): the first element owned by no shard or by two, a piece that is not where its
/// parameter is, a boundary that is not the contract's, shards that differ by more than a unit.
/// Empty when it is right.
std::string partition_problem(const Partition& p, const std::vector<int64_t>& numels, int world, int64_t align);

/// DDP + Adam: one all-reduce of the flat gradients, averaged, written back to every parameter's
/// gradient, then `adam` steps over the whole model. The --shard none step and the parity shadow.
void ddp_adam_step(ddplab::dist::Communicator& comm, const std::vector<torch::Tensor>& params,
                   torch::optim::Optimizer& adam);

/// A copy of the model trained by DDP + Adam on the same gradients, for --parity: before each
/// sharded step it takes the rank's own gradients; after it, it steps and records the largest
/// difference between its parameters and the model's.
class Shadow {
 public:
  Shadow(const std::vector<torch::Tensor>& params, double lr);
  void take_gradients(const std::vector<torch::Tensor>& params);
  void step_and_compare(ddplab::dist::Communicator& comm, const std::vector<torch::Tensor>& params);
  double max_abs_diff() const { return max_abs_diff_; }
  int64_t steps() const { return steps_; }

 private:
  std::vector<torch::Tensor> copy_;
  std::unique_ptr<torch::optim::Adam> adam_;
  double max_abs_diff_ = 0;
  int64_t steps_ = 0;
};

/// One collective kind's traffic over the optimizer steps: calls, payload bytes, seconds, and the
/// bytes a ring sends for them (dist::ring_bytes).
struct Traffic {
  int64_t calls = 0, bytes = 0, ring_bytes = 0;
  double seconds = 0;
};

/// The optimizer step of one --shard mode over the model's parameters, with its figures.
class Sharded {
 public:
  Sharded(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const Flags& flags, std::vector<torch::Tensor> params);
  /// The parts of one step: `loss`, and this mode's update (timed as Phase::kOptimizer, the
  /// collectives inside it).
  ddplab::StepParts parts(std::function<torch::Tensor()> loss);
  /// What timed_step zeroes the model's gradients with (an SGD at learning rate 0 that never steps).
  torch::optim::Optimizer& zeroer() { return *zeroer_; }
  /// Records the section "sharding" and the verdicts of the run's mode.
  void report(ddplab::LabRun& run) const;
  /// --checkpoint: every rank saves its shard (10.4) into shards/ next to the report, then loads
  /// the files at 1, 2 and 3 ranks and compares them with the live state (verdict
  /// reshard_identical). Collective.
  void check_checkpoint(ddplab::LabRun& run);

  const Partition& partition() const { return partition_; }
  const Traffic& traffic(ddplab::dist::Op op) const { return traffic_[static_cast<size_t>(op)]; }
  int64_t steps() const { return steps_; }

 private:
  void step();
  void measure_memory();

  ddplab::dist::Communicator& comm_;
  Flags flags_;
  double lr_;
  std::vector<torch::Tensor> params_;
  std::vector<int64_t> numels_;
  ddplab::memory::Tracker tracker_;
  Partition partition_;
  bool partitioned_ = false;  ///< 10.1 written: the partition is the student's
  ShardState state_;
  std::unique_ptr<torch::optim::Optimizer> full_adam_, zeroer_;
  std::unique_ptr<Shadow> shadow_;
  std::array<Traffic, ddplab::dist::kNumOps> traffic_{};
  int64_t steps_ = 0;
  nlohmann::json memory_ = nlohmann::json::object();
};

}  // namespace lab10

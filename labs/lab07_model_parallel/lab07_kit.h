// Lab 07's apparatus: the kit's code around the student's split, pipeline, sharded lookup and
// recomputation, read-only for students and unit-tested in tests/lab07_kit_test.cpp. The driver's
// flags and their combinations; the probes; where each rank's parameters live in each mode
// (Placement); the split's stage functions over micro-batches, timed in their phases, with the
// GPipe order they ran in (Stages); the per-rank memory of a step held to a budget (StepMemory);
// and what the run measured - traffic against its formula, idle time, memory - as verdicts and the
// report's "model_parallel" section. At the end every rank gets the whole trained model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "lab07.h"

#include "ddplab/data/loader.h"
#include "ddplab/deepfm.h"
#include "ddplab/dist/loopback.h"
#include "ddplab/lab.h"
#include "ddplab/memory.h"
#include "ddplab/timer.h"

namespace lab07 {

/// The driver's own flags.
struct Flags {
  std::string mode = "dp";  ///< dp, split (07.1), pipeline (07.2), sharded (07.3)
  std::string optimizer = "adam";
  int64_t micro_batches = 4, embedding_dim = 16, device_memory_mb = 0;
  bool recompute = false, autocast = false;
  bool split() const { return mode == "split" || mode == "pipeline"; }
  bool sharded() const { return mode == "sharded"; }
  /// Micro-batches a step runs: --micro-batches for the pipeline, else 1.
  int64_t micro() const { return mode == "pipeline" ? micro_batches : 1; }
  ddplab::DeepFMOptions model_options() const;
};
void add_flags(ddplab::LabFlags& f, Flags& flags);
/// Throws ConfigError for a combination the modes do not allow (the split needs 2 ranks; the
/// split runs neither --recompute nor --autocast; more micro-batches than samples in a batch).
void check_flags(const Flags& flags, int world, int64_t batch);

/// Each exercise once in a world of one. The split and the pipeline refuse a world of one, which
/// is all a probe can give them: any error but NotImplemented counts as written.
void add_probes(ddplab::LabProgram& program);

/// What recomputation saves, measured on a copy of the MLP at `batch` before training: the
/// tensors alive between the MLP's forward and its backward, beyond its output. Records the
/// report's model_parallel_recompute section and the verdict `recompute_saves_memory`.
void measure_recompute(ddplab::LabRun& run, ddplab::DeepFM& model, int64_t batch);

/// Where this rank's parameters live in the mode, and what its optimizer steps.
struct Placement {
  std::vector<torch::Tensor> params;  ///< what this rank's optimizer steps
  std::vector<torch::Tensor> dense;   ///< the data-parallel ones (gradients all-reduced)
  ShardLayout layout;                 ///< sharded: the tables' layout
  /// Sharded: this rank's tables, [its rows, D + 1] (each row: D embedding values and the
  /// first-order weight, so one lookup and one all-to-all serve both).
  torch::Tensor shard;
};
/// Places the parameters of `model` (on every rank, the same weights) for `flags.mode`: the split
/// gives rank 0 the tables and the FM, rank 1 the MLP; sharded gives each rank some tables (07.3's
/// plan) and frees the full tables it was initialised from; dp keeps everything.
Placement place(ddplab::DeepFM& model, const Flags& flags, int rank, int world, int64_t batch);

/// The tensors one step of this rank holds, measured (memory::Tracker), held to a budget.
class StepMemory {
 public:
  StepMemory(ddplab::memory::Tracker& tracker, int64_t budget_mb) : tracker_(tracker), budget_mb_(budget_mb) {}
  void begin_step();
  /// Notes the activations alive now beyond the step's start (call after each forward).
  void note_held();
  /// After the update: the step's peak. Over the budget, throws Error "out of device memory on rank
  /// R in step S" with what the memory holds (parameters, gradients, optimizer state, the rest).
  void end_step(int64_t step, int rank, const std::vector<torch::Tensor>& params, torch::optim::Optimizer& optimizer);
  int64_t peak() const noexcept { return peak_max_; }
  int64_t held() const noexcept { return held_max_; }

 private:
  ddplab::memory::Tracker& tracker_;
  int64_t budget_mb_;
  int64_t start_live_ = 0, held_max_ = 0, peak_max_ = 0;
};

/// The split's stage functions (StageFns) over micro-batches of the current batch, each forward
/// and backward timed in its phase; records whether every forward ran before the first backward.
class Stages {
 public:
  Stages(ddplab::DeepFM& model, ddplab::StepTimer& timer, StepMemory& memory, int64_t micro_batches);
  Stages(const Stages&) = delete;
  Stages& operator=(const Stages&) = delete;
  const StageFns& fns() const noexcept { return fns_; }
  /// Starts a step on `batch` (kept by reference until the next).
  void begin(const ddplab::data::Batch& batch);
  /// After the stages ran: whether the step ran GPipe's order (all m forwards before the first
  /// backward); shares the loss the last stage computed with the other (one float, counted as a
  /// broadcast: not part of the lesson's traffic) and updates this rank's parameters
  /// (Phase::kOptimizer). Returns the step's loss.
  double end(ddplab::dist::Communicator& comm, double loss, torch::optim::Optimizer& optimizer);
  /// The order part of end() alone.
  void end_order();
  bool gpipe_order() const noexcept { return gpipe_; }
  /// Samples [first, end) of micro-batch i of a batch of b samples (the first b % m get one more).
  static std::pair<int64_t, int64_t> range(int64_t b, int64_t m, int64_t i);

 private:
  void forward_ran();
  void backward_ran();
  ddplab::DeepFM& model_;
  ddplab::StepTimer& timer_;
  StepMemory& memory_;
  int64_t m_;
  const ddplab::data::Batch* batch_ = nullptr;
  int64_t forwards_ = 0, backwards_ = 0, forwards_before_first_backward_ = -1;
  bool gpipe_ = true;
  StageFns fns_;
};

/// Idle: per step, the share of the step (without its data wait) this rank spent neither in forward
/// nor in backward, median over the steps after the first (the only one, if there is one).
double idle_fraction(const ddplab::StepTimer& timer);
/// Median seconds of a step without its data wait, over the steps after the first.
double step_seconds(const ddplab::StepTimer& timer);

/// What the run measured, gathered from every rank (collective): step times and idle fractions;
/// the split's boundary traffic (verdict `boundary_traffic`) and, for the pipeline, its schedule
/// (verdict `gpipe_schedule`) and bubble; sharded, the all-to-all's bytes (verdict
/// `all_to_all_traffic`); every mode, the memory of a step. Writes the report's model_parallel
/// section.
struct Measured {
  int64_t steps = 0, step_batch = 0;
  double lr = 0;
  const ddplab::dist::StatsWindow* traffic = nullptr;  ///< the training loop's collectives
  const StepMemory* memory = nullptr;
  bool gpipe_order = true;
};
void report(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const Flags& flags, const Placement& placement,
            torch::optim::Optimizer& optimizer, const Measured& measured);

/// Every rank gets the whole trained model: the split's stages and the sharded tables are
/// broadcast from their owners into `model` (collective).
void assemble(ddplab::DeepFM& model, ddplab::dist::Communicator& comm, const Flags& flags, const Placement& placement);

}  // namespace lab07

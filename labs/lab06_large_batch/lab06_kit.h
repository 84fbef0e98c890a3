// Lab 06's apparatus: the kit's code around the student's schedules, accumulator and global
// batch, read-only for students and unit-tested in tests/lab06_kit_test.cpp. The driver's flags;
// the probes; the run's plan (its global batch and the two groups' schedules: 06.3's, or the
// driver's own while 06.3 is not written); and AccumulationWatch, the micro-step functions the
// student's Accumulator drives, timed in their phases, which see from outside what the
// accumulator did: the groups of micro-steps, the divisor of each loss, the step index given to the
// schedule and the learning rates applied. Reported as verdicts and the "large_batch" section.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "lab06.h"

#include "ddplab/data/loader.h"
#include "ddplab/deepfm.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"

namespace lab06 {

/// The driver's own flags.
struct Flags {
  int64_t accumulate = 1, base_batch = 512, warmup_steps = 0;
  std::string rule = "linear", embedding_rule = "same", optimizer = "adam";
  LrFlags lr_flags(double base_lr) const;
};
void add_flags(ddplab::LabFlags& f, Flags& flags);

/// Each exercise once on something tiny in a world of one: 06.1 on a two-group optimizer, 06.2 on
/// a one-micro-step epoch of a tiny model, 06.3 on a world of one.
void add_probes(ddplab::LabProgram& program);

/// The run's global batch and the schedules of its two parameter groups {embeddings, dense}.
struct Plan {
  GlobalBatch batch;
  std::vector<Schedule> schedules;
  std::array<double, 2> target{};  ///< each group's rate after warm-up (06.1), when written
  bool derived = false;            ///< 06.3's (false: the driver's own, 06.3 not written)
  bool targets = false;            ///< 06.1's target_lr was there to compute `target`
};
/// 06.3's plan from the job, or the driver's labelled as its own without it; prints it and records
/// the verdict `global_batch_derived` with the batch and both schedules as its figures.
Plan make_plan(ddplab::LabRun& run, const Flags& flags);

/// The optimizer over the model's two groups {embeddings, dense}, both at `lr`.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Flags& flags, ddplab::DeepFM& model, double lr);

/// The micro-step functions the Accumulator drives, and what they saw.
class AccumulationWatch {
 public:
  /// `schedules`: apply the plan's schedules at each optimizer step (06.1 written).
  AccumulationWatch(ddplab::DeepFM& model, torch::optim::Optimizer& optimizer, ddplab::dist::GradSync& sync,
                    ddplab::StepTimer& timer, const Plan& plan, bool schedules);
  const MicroStepFns& fns() const noexcept { return fns_; }
  /// The micro-batch the next micro-step trains on.
  void next(const ddplab::data::Batch& batch);
  /// One micro-step without the student's accumulator (06.2 not written): a whole optimizer step.
  double plain_step();
  double forward_loss() const noexcept { return forward_loss_; }
  int64_t optimizer_steps() const noexcept { return steps_; }
  int64_t micro_steps() const noexcept { return micro_; }
  const std::vector<int64_t>& group_sizes() const noexcept { return group_sizes_; }
  /// Whether every loss given to backward was the forward's divided by its group's size.
  bool losses_divided() const noexcept { return bad_divisor_group_ < 0; }
  /// Whether each optimizer step was given the number of optimizer steps before it.
  bool schedule_counts_steps() const noexcept { return bad_step_index_ < 0; }
  const std::vector<std::array<double, 2>>& learning_rates() const noexcept { return lrs_; }

  /// Verdicts `losses_divided_by_group_size`, `one_sync_per_step` (from `allreduces` and the sync's
  /// buckets), `schedule_counts_optimizer_steps` and `learning_rates`, and the "large_batch" section.
  void report(ddplab::LabRun& run, const Flags& flags, const Plan& plan, bool accumulator, int64_t allreduces,
              int64_t allreduce_bytes) const;

 private:
  ddplab::DeepFM& model_;
  torch::optim::Optimizer& optimizer_;
  ddplab::dist::GradSync& sync_;
  ddplab::StepTimer& timer_;
  const Plan& plan_;
  bool schedules_;
  MicroStepFns fns_;
  const ddplab::data::Batch* batch_ = nullptr;
  double forward_loss_ = 0;
  int64_t steps_ = 0, micro_ = 0, samples_ = 0, in_group_ = 0;
  int64_t bad_step_index_ = -1, bad_step_at_ = -1, bad_divisor_group_ = -1;
  double bad_divisor_ = 0;
  std::vector<double> divisors_;  // of the open group
  std::vector<int64_t> group_sizes_;
  std::vector<std::array<double, 2>> lrs_;  // per optimizer step, as applied
};

/// "3 x 3, 1" for the group sizes 3, 3, 3, 1.
std::string describe_groups(const std::vector<int64_t>& sizes);

}  // namespace lab06

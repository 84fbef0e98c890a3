// Lab 06 (large global batches): what the student writes in lab06_student.cpp — the learning-rate
// schedule of each parameter group (06.1: none | linear | sqrt scaling with a linear warm-up),
// gradient accumulation under the runtime's no_sync() (06.2), and the global batch derived from
// the launcher's environment instead of a hard-coded world size (06.3).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddplab/dist/env.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/error.h"

namespace lab06 {

/// How a group's learning rate follows the global batch B_global, with k = B_global / base_batch:
/// none keeps base_lr, linear multiplies it by k (Goyal et al. 2017, for SGD), sqrt by sqrt(k)
/// (the rule often argued for Adam; CowClip applies it to the dense layers of CTR models).
enum class Rule { kNone, kLinear, kSqrt };

/// "none" | "linear" | "sqrt" (given).
Rule parse_rule(const std::string& name);
const char* rule_name(Rule rule);

/// One parameter group's learning-rate schedule, in optimizer steps.
struct Schedule {
  double base_lr = 1e-3;     ///< the learning rate tuned at base_batch
  int64_t base_batch = 512;  ///< the global batch base_lr was tuned at
  int64_t global_batch = 512;
  Rule rule = Rule::kLinear;
  int64_t warmup_steps = 0;  ///< optimizer steps of the linear ramp from base_lr to the target
};

/// Exercise 06.1: the learning rate after warm-up: base_lr x 1 (none), x k (linear) or x sqrt(k)
/// (sqrt), where k = global_batch / base_batch as a double (k may be below 1). Throws
/// ddplab::ConfigError if base_lr <= 0, base_batch < 1, global_batch < 1 or warmup_steps < 0.
double target_lr(const Schedule& s);

/// Exercise 06.1: the learning rate of optimizer step `step` (0, 1, 2, ...): while
/// step < warmup_steps it ramps linearly from base_lr at step 0 towards the target,
///     base_lr + (target_lr - base_lr) x step / warmup_steps,
/// and from step warmup_steps on it is target_lr(s). With no warm-up every step gets the target.
/// Throws ddplab::ConfigError on a negative step and on what target_lr() rejects.
double lr_at(const Schedule& s, int64_t step);

/// Exercise 06.1: sets the learning rate of every parameter group of `optimizer` for optimizer
/// step `step`: group i gets lr_at(schedules[i], step) (Optimizer::param_groups(), and each
/// group's OptimizerOptions::set_lr). Throws ddplab::ConfigError if the optimizer has a different
/// number of groups than `schedules`.
void apply_schedules(torch::optim::Optimizer& optimizer, const std::vector<Schedule>& schedules, int64_t step);

/// The job's batch, as derived by 06.3.
struct GlobalBatch {
  int world_size = 1;
  int64_t per_rank_batch = 0;  ///< samples in one micro-batch on one rank
  int64_t accumulation = 1;    ///< micro-batches per optimizer step
  int64_t global_batch = 0;    ///< samples in one optimizer step, over all ranks
};

/// Exercise 06.3: the global batch of this job, from the launcher's environment (env.world_size:
/// WORLD_SIZE, OMPI_COMM_WORLD_SIZE, ..., see dist/env.h) — never from a constant — times the
/// per-rank batch and the accumulation steps. Throws ddplab::ConfigError if per_rank_batch or
/// accumulation is below 1 or env.world_size below 1.
GlobalBatch derive_global_batch(const ddplab::dist::Environment& env, int64_t per_rank_batch, int64_t accumulation);

/// The learning-rate flags of a run, before the job's size is known.
struct LrFlags {
  double base_lr = 1e-3;                ///< --lr: tuned at --base-batch
  int64_t base_batch = 512;             ///< --base-batch
  Rule rule = Rule::kLinear;            ///< --lr-rule, for the dense layers
  Rule embedding_rule = Rule::kLinear;  ///< --embedding-rule (--embedding-rule same: --lr-rule)
  int64_t warmup_steps = 0;             ///< --warmup-steps, in optimizer steps, both groups
};

/// Exercise 06.3: the schedules of the driver's two parameter groups, in this order: {embeddings,
/// dense}. Both start from flags.base_lr at flags.base_batch, warm up over flags.warmup_steps and
/// scale to `batch.global_batch`; the embeddings follow flags.embedding_rule, the dense layers
/// flags.rule. The rule itself does the scaling: base_lr is the flag's value on every cluster.
std::vector<Schedule> make_schedules(const GlobalBatch& batch, const LrFlags& flags);

/// What the driver does for one micro-step, each part timed in its phase. The accumulator decides
/// when each happens.
struct MicroStepFns {
  std::function<torch::Tensor()> forward;              ///< this micro-batch's mean loss (graph attached)
  std::function<void(const torch::Tensor&)> backward;  ///< sync.before_backward(loss) + loss.backward()
  std::function<void()> finish;                        ///< sync.finish(): all-reduce unless in no_sync()
  std::function<void(int64_t optimizer_step)> step;    ///< sets the step's learning rates, optimizer.step()
  std::function<void()> zero_grad;                     ///< optimizer.zero_grad()
};

/// Exercise 06.2: gradient accumulation over k micro-batches per optimizer step.
///
/// Contract: an epoch is begin_epoch(n) followed by n calls of micro_step() (n is the same on
/// every rank). The micro-steps are taken in groups of k; each group is one optimizer step:
///  - the group's first micro-step zeroes the gradients (fns.zero_grad);
///  - every micro-step runs fns.forward, divides the loss by the group's size, runs fns.backward
///    on it and then fns.finish — inside `sync.no_sync()` for every micro-step but the group's
///    last, so that the gradients are all-reduced once per group, the accumulated sum of its
///    micro-batches (the forward belongs inside the scope, as in DDP);
///  - the group's last micro-step then calls fns.step(t), t = optimizer steps taken before it in
///    this accumulator (0, 1, 2, ..., across epochs): the schedule counts optimizer steps, never
///    micro-steps.
/// Tail policy: when n is not a multiple of k, the epoch's last group is the r = n mod k
/// micro-batches left; its losses are divided by r (not k), so the step uses the mean gradient
/// of the samples it saw, and it is a full optimizer step (it counts for the schedule). Every
/// rank has the same n, so every rank takes the same groups and the same collectives.
/// micro_step returns the micro-batch's loss before the division, and `stepped` tells whether it
/// ended an optimizer step. begin_epoch(0) is an empty epoch (nothing to do); begin_epoch throws
/// ddplab::Error while the previous epoch has micro-steps left (its open group would be lost),
/// and micro_step throws ddplab::Error when called more than n times in an epoch.
class Accumulator {
 public:
  Accumulator(ddplab::dist::GradSync& sync, int64_t k);

  void begin_epoch(int64_t micro_steps);
  double micro_step(const MicroStepFns& fns, bool* stepped = nullptr);

  int64_t k() const noexcept { return k_; }
  /// Optimizer steps taken so far (all epochs).
  int64_t optimizer_steps() const noexcept { return optimizer_steps_; }

 private:
  ddplab::dist::GradSync& sync_;
  int64_t k_;
  int64_t micro_steps_ = 0;  ///< micro-steps in this epoch
  int64_t done_ = 0;         ///< micro-steps taken in this epoch
  int64_t group_start_ = 0;  ///< the micro-step the open group began at
  int64_t group_size_ = 0;   ///< micro-batches in the open group
  int64_t optimizer_steps_ = 0;
};

// ---- given ----

inline Accumulator::Accumulator(ddplab::dist::GradSync& sync, int64_t k) : sync_(sync), k_(k) {
  if (k < 1) throw ddplab::ConfigError("accumulation steps must be at least 1, got " + std::to_string(k));
}

inline Rule parse_rule(const std::string& name) {
  if (name == "none") return Rule::kNone;
  if (name == "linear") return Rule::kLinear;
  if (name == "sqrt") return Rule::kSqrt;
  throw ddplab::ConfigError("learning-rate rule '" + name + "': expected none, linear or sqrt");
}

inline const char* rule_name(Rule rule) {
  switch (rule) {
    case Rule::kNone: return "none";
    case Rule::kLinear: return "linear";
    case Rule::kSqrt: return "sqrt";
  }
  return "?";
}

}  // namespace lab06

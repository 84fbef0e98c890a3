// Lab 06 exercises: the learning-rate schedule (06.1), gradient accumulation (06.2) and the global
// batch derived from the job (06.3). Contracts: lab06.h.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "lab06.h"

namespace lab06 {

double target_lr(const Schedule& s) {
  // BEGIN STUDENT CODE (06.1: the target learning rate)
  if (!(s.base_lr > 0) || s.base_batch < 1 || s.global_batch < 1 || s.warmup_steps < 0) {
    throw ddplab::ConfigError(
        fmt::format("schedule: base_lr {} (> 0), base_batch {} and global_batch {} (>= 1), "
                    "warmup_steps {} (>= 0)",
                    s.base_lr, s.base_batch, s.global_batch, s.warmup_steps));
  }
  const double k = static_cast<double>(s.global_batch) / static_cast<double>(s.base_batch);
  switch (s.rule) {
    case Rule::kNone: return s.base_lr;
    case Rule::kLinear: return s.base_lr * k;
    case Rule::kSqrt: return s.base_lr * std::sqrt(k);
  }
  throw ddplab::ConfigError("schedule: unknown rule");
  // END STUDENT CODE
}

double lr_at(const Schedule& s, int64_t step) {
  // BEGIN STUDENT CODE (06.1: warm-up)
  if (step < 0) throw ddplab::ConfigError(fmt::format("schedule: step {} is negative", step));
  const double target = target_lr(s);
  if (step >= s.warmup_steps) return target;
  return s.base_lr + (target - s.base_lr) * static_cast<double>(step) / static_cast<double>(s.warmup_steps);
  // END STUDENT CODE
}

void apply_schedules(torch::optim::Optimizer& optimizer, const std::vector<Schedule>& schedules, int64_t step) {
  // BEGIN STUDENT CODE (06.1: one schedule per parameter group)
  auto& groups = optimizer.param_groups();
  if (groups.size() != schedules.size()) {
    throw ddplab::ConfigError(
        fmt::format("{} schedule(s) for an optimizer with {} parameter group(s)", schedules.size(), groups.size()));
  }
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lr_at(schedules[i], step));
  // END STUDENT CODE
}

GlobalBatch derive_global_batch(const ddplab::dist::Environment& env, int64_t per_rank_batch, int64_t accumulation) {
  // BEGIN STUDENT CODE (06.3: the global batch from the job)
  if (per_rank_batch < 1 || accumulation < 1 || env.world_size < 1) {
    throw ddplab::ConfigError(
        fmt::format("global batch: per-rank batch {}, accumulation {} and world size {} must "
                    "each be at least 1",
                    per_rank_batch, accumulation, env.world_size));
  }
  GlobalBatch b;
  b.world_size = env.world_size;
  b.per_rank_batch = per_rank_batch;
  b.accumulation = accumulation;
  b.global_batch = static_cast<int64_t>(env.world_size) * per_rank_batch * accumulation;
  return b;
  // END STUDENT CODE
}

std::vector<Schedule> make_schedules(const GlobalBatch& batch, const LrFlags& flags) {
  // BEGIN STUDENT CODE (06.3: the schedules of this job)
  Schedule s;
  s.base_lr = flags.base_lr;
  s.base_batch = flags.base_batch;
  s.global_batch = batch.global_batch;
  s.warmup_steps = flags.warmup_steps;
  Schedule embeddings = s, dense = s;
  embeddings.rule = flags.embedding_rule;
  dense.rule = flags.rule;
  return {embeddings, dense};
  // END STUDENT CODE
}

void Accumulator::begin_epoch(int64_t micro_steps) {
  // BEGIN STUDENT CODE (06.2: a new epoch)
  if (micro_steps < 0) throw ddplab::ConfigError(fmt::format("an epoch of {} micro-steps", micro_steps));
  if (done_ != micro_steps_) {
    throw ddplab::Error(
        fmt::format("accumulation: the previous epoch ended after {} of its {} micro-steps", done_, micro_steps_));
  }
  micro_steps_ = micro_steps;
  done_ = 0;
  group_start_ = 0;
  group_size_ = 0;
  // END STUDENT CODE
}

double Accumulator::micro_step(const MicroStepFns& fns, bool* stepped) {
  // BEGIN STUDENT CODE (06.2: one micro-step)
  if (done_ >= micro_steps_) {
    throw ddplab::Error(fmt::format("accumulation: micro-step {} of an epoch of {}", done_ + 1, micro_steps_));
  }
  if (done_ == group_start_) {
    group_size_ = std::min(k_, micro_steps_ - group_start_);  // the tail: what is left
    fns.zero_grad();
  }
  const bool last = done_ + 1 == group_start_ + group_size_;
  double value = 0;
  {
    std::optional<ddplab::dist::GradSync::NoSync> accumulate;
    if (!last) accumulate.emplace(sync_);
    const torch::Tensor loss = fns.forward();
    value = loss.item<double>();
    fns.backward(loss / static_cast<double>(group_size_));
    fns.finish();
  }
  ++done_;
  if (last) {
    fns.step(optimizer_steps_);
    ++optimizer_steps_;
    group_start_ = done_;
  }
  if (stepped != nullptr) *stepped = last;
  return value;
  // END STUDENT CODE
}

}  // namespace lab06

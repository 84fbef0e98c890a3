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
  throw ddplab::NotImplemented("06.1", "target_lr: base_lr x 1, k or sqrt(k)");
  // END STUDENT CODE
}

double lr_at(const Schedule& s, int64_t step) {
  // BEGIN STUDENT CODE (06.1: warm-up)
  throw ddplab::NotImplemented("06.1", "lr_at: the linear warm-up from base_lr to the target");
  // END STUDENT CODE
}

void apply_schedules(torch::optim::Optimizer& optimizer, const std::vector<Schedule>& schedules, int64_t step) {
  // BEGIN STUDENT CODE (06.1: one schedule per parameter group)
  throw ddplab::NotImplemented("06.1", "apply_schedules: each parameter group its own learning rate");
  // END STUDENT CODE
}

GlobalBatch derive_global_batch(const ddplab::dist::Environment& env, int64_t per_rank_batch, int64_t accumulation) {
  // BEGIN STUDENT CODE (06.3: the global batch from the job)
  throw ddplab::NotImplemented("06.3", "derive_global_batch: world size x per-rank batch x accumulation");
  // END STUDENT CODE
}

std::vector<Schedule> make_schedules(const GlobalBatch& batch, const LrFlags& flags) {
  // BEGIN STUDENT CODE (06.3: the schedules of this job)
  throw ddplab::NotImplemented("06.3", "make_schedules: the embeddings' and the dense layers' schedules");
  // END STUDENT CODE
}

void Accumulator::begin_epoch(int64_t micro_steps) {
  // BEGIN STUDENT CODE (06.2: a new epoch)
  throw ddplab::NotImplemented("06.2", "Accumulator::begin_epoch: start an epoch of micro-steps");
  // END STUDENT CODE
}

double Accumulator::micro_step(const MicroStepFns& fns, bool* stepped) {
  // BEGIN STUDENT CODE (06.2: one micro-step)
  throw ddplab::NotImplemented("06.2",
                               "Accumulator::micro_step: no_sync on all but the group's last, loss / group size");
  // END STUDENT CODE
}

}  // namespace lab06

// Lab 11 (a job that hangs): the functions the student implements in lab11_student.cpp — the
// fingerprint that lets the ranks compare the collectives they issue (11.1), the flight
// recorder's ring of the last collectives (11.2), the all-reduce of ranks whose data ran out at
// different steps (11.3) and the detector that names a straggler and what slows it (11.4) — and
// the kit's pieces they work with (lab11_kit.h: the communicator that checks and records every
// collective, the faults the driver injects, the figures the verdicts compare).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddplab/dist/communicator.h"
#include "ddplab/flight.h"

namespace lab11 {

/// How a rank's collective is called, as far as every rank must agree on it: the operation, the
/// reduction (for an all-reduce or a reduce-scatter; kSum for the kit's, kNone for the rest), the
/// element type and the shape of the tensor this rank gives it. Never the tensor's values: they
/// differ between ranks by design.
enum class Reduce { kNone = 0, kSum };
struct Call {
  ddplab::dist::Op op = ddplab::dist::Op::kCount;
  Reduce reduce = Reduce::kNone;
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> shape;
};

// ---- 11.1 ----

/// The running fingerprint after `call`, from the fingerprint `running` of every collective before
/// it (0 before the first). Two ranks' fingerprints must differ when any of their calls so far
/// differ in op, reduction, dtype, number of dimensions or any dimension, and must be equal when
/// they issued the same calls (so a fingerprint is a function of the calls alone, the same on every
/// rank and in every run: no std::hash of a pointer, no random seed). Order matters: the calls A
/// then B and B then A give different fingerprints.
uint64_t fingerprint(uint64_t running, const Call& call);

// ---- 11.2 ----

/// The flight recorder's memory: the last `capacity` collectives of this rank. `slots` holds them
/// in any arrangement you choose (reserve it, use it as a ring); `recorded` counts the distinct
/// collectives recorded so far. The kit reads every slot whose op is set (a default Entry's op,
/// Op::kCount, marks an empty slot) and sorts them by seq.
struct Ring {
  size_t capacity = 64;
  std::vector<ddplab::flight::Entry> slots;
  int64_t recorded = 0;
};

/// Records `e` in the ring. A collective is recorded when it is enqueued and again when it
/// completes or fails, with the same seq: an entry whose seq is already in the ring replaces that
/// entry in place (its state and end time change, its age does not); a new seq is the newest
/// entry, and once the ring holds `capacity` entries it replaces the oldest. Entries arrive in
/// increasing seq order; never more than `capacity` are kept, however many are recorded.
void record(Ring& ring, const ddplab::flight::Entry& e);

// ---- 11.3 ----

/// The gradient all-reduce of a job whose ranks may run out of data at different steps (DDP's
/// Join). `flat` holds this rank's mean gradient over its `samples` samples of this step, or
/// zeros and samples = 0 once this rank's data has run out (it has "joined": it keeps the others'
/// collectives company with nothing to add). Every rank, joined or not, calls this once per step
/// and issues exactly one all-reduce. Afterwards `flat` holds the mean gradient over every sample
/// the ranks saw this step (each rank's mean weighted by its samples), the same on every rank; the
/// return value is false when no rank had a sample (every rank has joined: the epoch is over, and
/// `flat` is left zero).
bool join_allreduce(ddplab::dist::Communicator& comm, torch::Tensor& flat, int64_t samples);

// ---- 11.4 ----

/// One rank's time over the last M steps, summed: waiting for batches, computing (forward,
/// backward, the optimizer) and inside the gradient collectives (which includes waiting there
/// for the slowest rank).
struct PhaseTimes {
  double data_wait = 0, compute = 0, comm = 0;
  int64_t steps = 0;
};

/// What the detector concludes.
struct Straggler {
  int rank = -1;              ///< the straggler, or -1 when there is none
  std::string phase;          ///< "data_wait" or "compute": where its extra time goes; "" when none
  double excess_s = 0;        ///< its extra seconds per step in that phase over the others' median
  double cost_samples_s = 0;  ///< samples/s the whole job loses to it
};

/// Names the straggler of a job from every rank's times (index = rank) and the job's samples per
/// step (all ranks together). A rank's work per step is (data_wait + compute) / steps; comm does
/// not count, since the others' waiting for the straggler shows there. The straggler is the rank
/// with the most work, if that exceeds the median of the other ranks' work by more than
/// `threshold` (a fraction: 0.1 = 10 %); otherwise there is none. Its phase is the phase in which
/// it exceeds the median of the other ranks' per-step time in that phase by the most, and
/// `excess_s` is that difference. The job runs at the pace of its slowest rank: a step takes the
/// longest of the ranks' (data_wait + compute + comm) / steps, and would take the straggler's work
/// minus the median of the others' work less without it; `cost_samples_s` is the samples/s of
/// that faster step minus the samples/s now.
Straggler find_straggler(const std::vector<PhaseTimes>& ranks, int64_t samples_per_step, double threshold = 0.1);

}  // namespace lab11

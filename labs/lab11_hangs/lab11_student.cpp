// Lab 11: your code goes between the BEGIN/END STUDENT CODE markers (contracts in lab11.h).
#include "lab11.h"

#include <algorithm>

#include <fmt/format.h>

#include "ddplab/error.h"

namespace lab11 {

uint64_t fingerprint(uint64_t running, const Call& call) {
  // BEGIN STUDENT CODE (11.1: the collective's fingerprint)
  (void)running, (void)call;
  throw ddplab::NotImplemented("11.1", "fold the call's op, reduction, dtype and shape into the running fingerprint");
  // END STUDENT CODE
}

void record(Ring& ring, const ddplab::flight::Entry& e) {
  // BEGIN STUDENT CODE (11.2: the flight recorder's ring)
  (void)ring, (void)e;
  throw ddplab::NotImplemented("11.2", "keep the last `capacity` collectives, updating an entry already in the ring");
  // END STUDENT CODE
}

bool join_allreduce(ddplab::dist::Communicator& comm, torch::Tensor& flat, int64_t samples) {
  // BEGIN STUDENT CODE (11.3: the all-reduce of ranks that ran out of data)
  (void)comm, (void)flat, (void)samples;
  throw ddplab::NotImplemented("11.3", "all-reduce the gradient weighted by its samples, and the samples");
  // END STUDENT CODE
}

Straggler find_straggler(const std::vector<PhaseTimes>& ranks, int64_t samples_per_step, double threshold) {
  // BEGIN STUDENT CODE (11.4: the straggler and its phase)
  (void)ranks, (void)samples_per_step, (void)threshold;
  throw ddplab::NotImplemented("11.4", "name the rank with the most work and the phase where it exceeds the others");
  // END STUDENT CODE
}

}  // namespace lab11

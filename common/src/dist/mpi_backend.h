// An Open MPI backend for CPU tensors behind c10d's backend interface (issue 18): the ranks of a
// job started by mpirun exchange through MPI (shared memory between ranks of one machine, the
// network across machines) instead of Gloo's TCP sockets and thread hand-offs. A collective is a
// non-blocking MPI call; waiting tests it until it completes or the timeout passes (so a missing
// peer is an error naming the collective, as with Gloo). Selected with --backend mpi; built when
// CMake finds MPI (Debian: libopenmpi-dev). Internal to common/ (process_group.cpp creates it).
#pragma once

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

#include "ddplab/config.h"

#ifdef DDPLAB_HAVE_MPI

#include <mpi.h>
#include <torch/torch.h>

#include "ddplab/dist/compat.h"

namespace ddplab::dist {

/// Initialises MPI once per process (thread level: serialized) and checks that MPI's view of the
/// job matches the launcher's (rank, size). Throws ConfigError when the process was not started
/// by mpirun (an MPI singleton of a job of several ranks) or the ranks disagree.
void mpi_init_for(int rank, int size);

/// The algorithm Open MPI's non-blocking all-reduce (libnbc) runs, as MPI's tool interface reads
/// its setting: "ring" (what mpi_init_for chooses at 2 ranks), "libnbc's own choice", ... or
/// "unknown" where the setting cannot be read. After mpi_init_for.
std::string mpi_allreduce_algorithm();

/// Rank 0's `value` on every rank (an MPI broadcast over MPI_COMM_WORLD, polled so that it gives up
/// after `timeout` with an error naming what it waited for). After mpi_init_for. The mpi backend's
/// ranks learn the port of rank 0's TCPStore this way: a port the launcher found free and let go of
/// can be taken by mpirun's own sockets before rank 0 binds it (seen in CI: rank 1 connected to
/// another listener and had its connection reset).
int mpi_share_from_rank0(int value, std::chrono::milliseconds timeout, const char* what);

/// Leaves MPI without finalizing, for a rank whose collective failed (timed out or out of step):
/// MPI_Finalize would wait for the peer that never came, while the c10d path aborts its backend
/// and exits. Once called, the process's exit skips MPI_Finalize; mpirun then stops the job's other
/// ranks, as for any rank that exits without it.
void abandon_mpi() noexcept;

/// Thrown by a collective whose ranks entered different collectives (see MpiBackend).
struct CollectivesOutOfStep : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Every collective first compares what each rank entered — its number in the job, kind, element
/// type, element count and root — in a small all-gather on a communicator of its own, and moves
/// data only when they agree. MPI leaves collectives that differ between ranks undefined (seen: a
/// lab 02 rank that skipped an all-reduce made Open MPI's next one fail with a truncation error and
/// abort in malloc_consolidate, a crash that named nothing); Gloo times out instead. With the check,
/// both ranks stop with "collectives out of step at #N: rank 0 allreduce float[..]; rank 1 ...", the
/// message of lab 11's fingerprints. Costs one extra small collective each (a few microseconds over
/// shared memory). DDPLAB_MPI_CHECK=off turns it off (to measure the transport alone).
class MpiBackend final : public compat::Backend {
 public:
  /// `rank`, `size`: the job's, as the launcher said (mpi_init_for checks them against MPI's).
  MpiBackend(int rank, int size);
  ~MpiBackend() override;
  /// Starts one MPI call of a collective, returns its error code.
  using Start = std::function<int(MPI_Request*)>;

  const std::string getBackendName() const override { return "mpi"; }
  c10::intrusive_ptr<compat::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<compat::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<compat::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<compat::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                                 std::vector<int64_t>& in_splits,
                                                 const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<compat::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<compat::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<compat::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

 private:
  /// What this rank entered: compared across ranks (when checking) before `steps` move the data.
  c10::intrusive_ptr<compat::Work> collective(const char* op, const at::Tensor* t, int64_t count, int64_t root,
                                              std::vector<at::Tensor> keep, std::vector<Start> steps, const char* name,
                                              std::function<void()> done = {});
  bool check_ = true;
  int64_t seq_ = 0;                      ///< collectives entered so far
  MPI_Comm check_comm_ = MPI_COMM_NULL;  ///< the comparisons' own communicator (MPI_Comm_dup)
};

}  // namespace ddplab::dist

#endif  // DDPLAB_HAVE_MPI

// An Open MPI backend for CPU tensors behind c10d's backend interface (issue 18): the ranks of a
// job started by mpirun exchange through MPI (shared memory between ranks of one machine, the
// network across machines) instead of Gloo's TCP sockets and thread hand-offs. A collective is a
// non-blocking MPI call; waiting tests it until it completes or the timeout passes (so a missing
// peer is an error naming the collective, as with Gloo). Selected with --backend mpi; built when
// CMake finds MPI (Debian: libopenmpi-dev). Internal to common/ (process_group.cpp creates it).
#pragma once

#include <chrono>
#include <string>

#include "ddplab/config.h"

#ifdef DDPLAB_HAVE_MPI

#include <torch/torch.h>

#include "ddplab/dist/compat.h"

namespace ddplab::dist {

/// Initialises MPI once per process (thread level: serialized) and checks that MPI's view of the
/// job matches the launcher's (rank, size). Throws ConfigError when the process was not started
/// by mpirun (an MPI singleton of a job of several ranks) or the ranks disagree.
void mpi_init_for(int rank, int size);

class MpiBackend final : public compat::Backend {
 public:
  /// `rank`, `size`: the job's, as the launcher said (mpi_init_for checks them against MPI's).
  MpiBackend(int rank, int size);
  ~MpiBackend() override;

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
};

}  // namespace ddplab::dist

#endif  // DDPLAB_HAVE_MPI

// A c10d process group behind the Communicator interface: rendezvous through a TCPStore that
// rank 0 hosts, Gloo for CPU tensors, NCCL for CUDA tensors where LibTorch has it, and a
// collective timeout that turns a hang into an error.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "ddplab/dist/communicator.h"
#include "ddplab/dist/compat.h"
#include "ddplab/dist/env.h"

namespace ddplab::dist {

struct ProcessGroupOptions {
  /// Collectives and the rendezvous fail after this long instead of hanging (--comm-timeout).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  /// How often each rank publishes the collective it entered last to the store, for the stall
  /// diagnosis in timeout errors (0: never).
  std::chrono::milliseconds publish_interval{std::chrono::milliseconds(200)};
  /// The collectives' transport: "auto" (Gloo for CPU tensors, NCCL for CUDA), "gloo", "nccl", or
  /// "mpi" (Open MPI, for ranks started by mpirun: shared memory between the ranks of a machine;
  /// no rendezvous store, so a stall names only this rank's collective).
  std::string backend = "auto";
  /// Gloo's I/O thread (one per network device: gloo::transport::tcp::Loop) runs at the idle
  /// scheduling class (SCHED_IDLE), so that its busy polling never takes a core from the thread
  /// that posts the next send or receive. Measured on a 2-core VM: a 16 B all-reduce at 2 ranks
  /// 0.8-1.2 ms -> 0.35 ms (docs/concepts/gradient-sync.md, "Why Gloo is slow here"). The
  /// environment variable DDPLAB_GLOO_IO=normal|idle overrides it (for the before/after figures).
  bool idle_gloo_io = true;
};

/// For a process that stops with an error: its exit will not finalize the transport. Over MPI,
/// MPI_Finalize waits for every rank, so a rank that failed on its own would wait until its peers
/// time out in a collective it never enters; c10d's ranks just exit. mpirun and the kit's launcher
/// then stop the other ranks, as for a failing rank over c10d. No-op without MPI. (run_lab calls
/// it for an error exit; a not-attempted exit still finalizes, so its peers may finish.)
void abandon_transport() noexcept;

/// NCCL runs one rank per GPU: two ranks of a communicator on one device fail inside NCCL
/// ("Duplicate GPU detected") or hang. Each rank publishes `device_key` (what identifies the
/// physical GPU: host and PCI bus id, whatever CUDA_VISIBLE_DEVICES calls it) and `label` (what a
/// person reads: "node1/cuda:0 (PCI 0000:00:06.0)") under keys of `store`, reads every rank's, and
/// throws ConfigError naming the ranks that share a device — on each rank alike, before any NCCL
/// communicator exists. The store's own timeout bounds the wait for a missing rank.
void require_one_device_per_rank(compat::Store& store, int rank, int size, const std::string& device_key,
                                 const std::string& label);

class ProcessGroup final : public Communicator {
 public:
  /// Joins the job described by `env`: rank 0 serves a TCPStore on MASTER_ADDR:MASTER_PORT, the
  /// others connect; then the backend for `device` is created (Gloo on CPU, NCCL on CUDA).
  /// A single process gets an in-memory store. Throws ddplab::Error naming the address on failure.
  static std::unique_ptr<ProcessGroup> join(const Environment& env, torch::Device device,
                                            const ProcessGroupOptions& opts = {});

  /// Over an existing store (tests run ranks as threads over one c10d::HashStore).
  ProcessGroup(c10::intrusive_ptr<compat::Store> store, int rank, int size, torch::Device device,
               const ProcessGroupOptions& opts = {});
  ~ProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(torch::Tensor& t) override;
  /// Launches the c10d allreduce and returns; Pending::wait() waits with the configured timeout.
  /// The ProcessGroup must outlive the returned Pending.
  std::shared_ptr<Pending> allreduce_async(torch::Tensor& t) override;
  void broadcast(torch::Tensor& t, int root) override;
  void allgather(std::vector<torch::Tensor>& out, const torch::Tensor& in) override;
  void all_to_all(torch::Tensor& out, const torch::Tensor& in) override;
  /// Checks the split sizes against the tensors (rank, sizes and sums in the error) before the
  /// exchange.
  void all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                  const std::vector<int64_t>& in_splits) override;
  /// The even all-to-all (chunk r of `in` to rank r: the (N-1)/N x payload a ring reduce-scatter
  /// sends) and a sum of the N chunks that arrive, on every backend alike: Gloo 1.13 has no
  /// reduce-scatter, and one path is one behaviour to test. NCCL's own reduce-scatter would move
  /// the same bytes; the NCCL path of this one has not run on a GPU.
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in) override;
  void send(const torch::Tensor& t, int dst, int tag = 0) override;
  void recv(torch::Tensor& t, int src, int tag = 0) override;
  void barrier() override;

  /// "gloo", "nccl" or "mpi".
  const std::string& backend_name() const noexcept { return backend_name_; }
  /// How the backend's all-reduce runs where the kit chose it: "Open MPI all-reduce: ring" for mpi
  /// (mpi_backend.cpp, mpi_init_for); "" for Gloo and NCCL.
  const std::string& allreduce_algorithm() const noexcept { return allreduce_algorithm_; }
  /// Waits for every rank, then releases the backend and the store (idempotent).
  void shutdown();
  /// How many of Gloo's I/O threads this group put at SCHED_IDLE (0 for NCCL and MPI, or with
  /// idle_gloo_io off).
  int idle_io_threads() const noexcept { return idle_io_threads_; }

 private:
  class AsyncWork;
  void wait(const c10::intrusive_ptr<compat::Work>& work, Op op);
  /// Waits for collective #sequence of `bytes` bytes; throws ddplab::Error naming them on timeout.
  void wait(const c10::intrusive_ptr<compat::Work>& work, Op op, int64_t sequence, int64_t bytes);
  /// Records the collective this rank just entered (read by the publisher thread).
  void note_entered(Op op, int64_t sequence, int64_t bytes);
  /// Writes this rank's last entered collective to the store if it changed.
  void publish_progress();
  /// "rank 0 last entered allreduce #12 (40 bytes); rank 1 ..." from the store, best effort.
  std::string describe_ranks();
  void start_publisher();
  /// Shuts the backend down (where this LibTorch has Backend::shutdown) and drops it and the store.
  void release_backend();
  void stop_publisher();
  std::atomic<int64_t> entered_seq_{0}, entered_bytes_{0}, published_seq_{-1};
  std::atomic<int> entered_op_{static_cast<int>(Op::kCount)};
  std::thread publisher_;
  std::mutex publisher_mutex_;
  std::condition_variable publisher_cv_;
  bool publisher_stop_ = false;
  /// NCCL moves CUDA tensors only: a CPU tensor given to a collective (the kit's metadata, a
  /// lab's agreement checks) travels through this rank's GPU, a copy each way. Gloo and MPI take
  /// CPU tensors as they are (staged() returns the tensor itself).
  torch::Tensor staged(const torch::Tensor& t) const;
  /// After a collective on staged(t): the result back into t where t was a host tensor.
  static void unstage(torch::Tensor& t, const torch::Tensor& on_device);

  int rank_, size_;
  torch::Device device_ = torch::kCPU;  ///< the device collectives run on: the rank's GPU under NCCL
  int idle_io_threads_ = 0;
  bool failed_ = false;  ///< a collective failed (timed out): the backend is aborted, not shut down
  std::string backend_name_;
  std::string allreduce_algorithm_;
  c10::intrusive_ptr<compat::Store> store_;
  c10::intrusive_ptr<compat::Backend> backend_;
  ProcessGroupOptions opts_;
};

}  // namespace ddplab::dist

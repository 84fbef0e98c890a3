// The collectives the labs use, behind one interface that counts calls, bytes and waiting time
// per collective, so labs and the grader can see communication volume. Algorithms (gradient
// sync strategies) only ever talk to this interface, never to a transport (style.md).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "ddplab/trace.h"

namespace ddplab::dist {

enum class Op { kAllreduce = 0, kBroadcast, kAllgather, kAllToAll, kSend, kRecv, kBarrier, kReduceScatter, kCount };
inline constexpr int kNumOps = static_cast<int>(Op::kCount);
const char* op_name(Op op);

/// Bytes one rank sends for a collective of `payload` bytes (the bytes counted in OpStats: the
/// input tensor's) on `world` ranks, by the ring algorithm's arithmetic (nccl-tests' "bus
/// bandwidth" factors): an all-reduce is a reduce-scatter then an all-gather and sends
/// 2(N-1)/N x payload; a reduce-scatter (N-1)/N x payload; an all-gather (N-1) x payload (its
/// input is one rank's chunk); an all-to-all (N-1)/N x payload; a broadcast, a send: the payload;
/// a receive, a barrier: 0. One rank: 0 for every collective. Rounded down.
int64_t ring_bytes(Op op, int64_t payload, int world);

/// Per-collective counters: calls, payload bytes (this rank's input tensor bytes) and the
/// wall time this rank spent inside the call (waiting for the collective to complete).
struct OpStats {
  int64_t calls = 0;
  int64_t bytes = 0;
  double seconds = 0.0;
};

/// Communicator statistics; `last` is the collective this rank entered most recently (for stall
/// diagnosis: sequence number, op, bytes).
struct CommStats {
  std::array<OpStats, kNumOps> ops{};
  int64_t sequence = 0;  ///< collectives entered so far
  Op last_op = Op::kCount;
  int64_t last_bytes = 0;
  int64_t total_calls() const;
  int64_t total_bytes() const;
  double total_seconds() const;
  nlohmann::json to_json() const;
};

/// A collective started by an *_async call. Until wait() returns, the tensor it was given must stay
/// alive and untouched: the transport may still be reading or writing it.
class Pending {
 public:
  virtual ~Pending() = default;
  /// Blocks until this rank's part of the collective is complete (throws like the blocking call
  /// on timeout). The time spent here is the collective's waiting time in CommStats. Calling it
  /// again is a no-op.
  virtual void wait() = 0;
};

/// Abstract communicator. Every call except allreduce_async is blocking for simplicity of the
/// labs' code: it returns when this rank's part of the collective is complete.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In-place sum over ranks. Average by dividing afterwards: Gloo and NCCL differ in AVG support.
  virtual void allreduce(torch::Tensor& t) = 0;
  /// Starts an in-place sum over ranks and returns at once, so that gradient sync can overlap
  /// communication with the rest of the backward pass. Counted like allreduce: the call and its
  /// bytes when it starts, the time spent in Pending::wait() as waiting time. Every rank must
  /// start its collectives in the same order. The default runs the blocking allreduce and returns
  /// a completed Pending (correct, only without overlap) for communicators with no async path.
  virtual std::shared_ptr<Pending> allreduce_async(torch::Tensor& t);
  /// In-place: every rank receives `root`'s tensor.
  virtual void broadcast(torch::Tensor& t, int root) = 0;
  /// out[r] receives rank r's `in` (out must hold size() tensors shaped like `in`).
  virtual void allgather(std::vector<torch::Tensor>& out, const torch::Tensor& in) = 0;
  /// Splits `in` along dim 0 into size() equal chunks; chunk r goes to rank r; `out` receives
  /// chunk `rank()` of every rank, in rank order (same shape as `in`).
  virtual void all_to_all(torch::Tensor& out, const torch::Tensor& in) = 0;
  /// Uneven all-to-all along dim 0 (c10d's alltoall_base with split sizes): the first
  /// in_splits[0] rows of `in` go to rank 0, the next in_splits[1] to rank 1, ...; `out` receives
  /// out_splits[r] rows from each rank r, in rank order. Rank r's in_splits[j] must equal rank j's
  /// out_splits[r], or the ranks exchange the wrong rows (Gloo may not notice). Counted like the
  /// even one: the call and the bytes of `in`.
  virtual void all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                          const std::vector<int64_t>& in_splits) = 0;
  /// Sums `in` over ranks and gives each rank its chunk of the sum: `in` splits along dim 0 into
  /// size() equal chunks, and `out` (shaped like one chunk) receives chunk rank() of the sum. The
  /// sharded optimizer's gradient reduction (lab 10). Counted as Op::kReduceScatter with the bytes
  /// of `in`.
  virtual void reduce_scatter(torch::Tensor& out, const torch::Tensor& in) = 0;
  virtual void send(const torch::Tensor& t, int dst, int tag = 0) = 0;
  virtual void recv(torch::Tensor& t, int src, int tag = 0) = 0;
  virtual void barrier() = 0;

  const CommStats& stats() const noexcept { return stats_; }
  void reset_stats() { stats_ = CommStats(); }

  /// Also records every collective on `trace` (--trace), where the statistics are counted: a
  /// blocking one from entry to return, an asynchronous one from launch to the return of its
  /// wait(). nullptr (the default): nothing is recorded and nothing is spent on it.
  void set_trace(std::shared_ptr<ddplab::trace::Recorder> trace) { tracer_ = std::move(trace); }
  ddplab::trace::Recorder* tracer() const noexcept { return tracer_.get(); }

  /// Called as each collective starts (a blocking one on entry, an asynchronous one at launch),
  /// after it is counted: its op, payload bytes and sequence number. For a program that checks
  /// which collectives a step issued and in what order (lab 04). An empty function (the default)
  /// observes nothing. It runs on the thread that issues the collective (for overlapped gradient
  /// sync, the autograd engine's), so it must not issue collectives itself.
  using Observer = std::function<void(Op op, int64_t bytes, int64_t sequence)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }

 protected:
  /// For asynchronous collectives: counts the call and its bytes as it starts and returns its
  /// sequence number (the "#N" in a timeout message).
  int64_t record_start(Op op, int64_t bytes);
  /// Adds the time spent waiting for an asynchronous collective.
  void record_wait(Op op, double seconds);

  /// Puts an asynchronous collective on the trace, if there is one: `lane` from
  /// tracer()->begin_collective() at launch, `start` the launch time.
  void trace_async(int lane, Op op, std::chrono::steady_clock::time_point start, int64_t bytes, int64_t sequence);

  /// Implementations call this around each blocking collective. The Communicator& form also
  /// puts the collective on the trace (--trace); the CommStats& form only counts it.
  class Recorder {
   public:
    Recorder(Communicator& c, Op op, int64_t bytes);
    Recorder(CommStats& s, Op op, int64_t bytes);
    ~Recorder();
    Recorder(const Recorder&) = delete;
    Recorder& operator=(const Recorder&) = delete;

   private:
    CommStats& s_;
    ddplab::trace::Recorder* trace_ = nullptr;
    Op op_;
    int lane_ = -1;
    int64_t bytes_ = 0, sequence_ = 0;
    std::chrono::steady_clock::time_point start_;
  };
  CommStats stats_;

 private:
  std::shared_ptr<ddplab::trace::Recorder> tracer_;
  Observer observer_;
};

/// The communicator's statistics over a window: from construction (or restart()) to now. For a
/// lab that reports what its training loop sent, without the set-up's collectives.
class StatsWindow {
 public:
  explicit StatsWindow(const Communicator& comm) : comm_(comm), start_(comm.stats()) {}
  void restart() { start_ = comm_.stats(); }
  int64_t calls(Op op) const { return now(op).calls - was(op).calls; }
  int64_t bytes(Op op) const { return now(op).bytes - was(op).bytes; }
  double seconds(Op op) const { return now(op).seconds - was(op).seconds; }
  /// bytes(op) / steps, 0 for no steps.
  int64_t bytes_per(Op op, int64_t steps) const { return steps > 0 ? bytes(op) / steps : 0; }

 private:
  const OpStats& now(Op op) const { return comm_.stats().ops[static_cast<size_t>(op)]; }
  const OpStats& was(Op op) const { return start_.ops[static_cast<size_t>(op)]; }
  const Communicator& comm_;
  CommStats start_;
};

/// Broadcasts every parameter and buffer of `module` from `root` (start every rank from rank 0's
/// weights).
void broadcast_module(Communicator& comm, torch::nn::Module& module, int root = 0);

}  // namespace ddplab::dist

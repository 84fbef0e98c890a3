// Lab 11's apparatus, read-only for students (tested in tests/lab11_kit_test.cpp): the driver's
// flags, the probes, the communicator that fingerprints (11.1) and records (11.2) every collective
// and turns a desync or a timeout into an error that names it, the faults the driver injects and
// what the tools must say about each, and the training step with its bucketed or joined (11.3)
// gradient all-reduce and the straggler watch (11.4).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "lab11.h"

#include "ddplab/deepfm.h"
#include "ddplab/dist/communicator.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/error.h"
#include "ddplab/flight.h"
#include "ddplab/lab.h"

namespace lab11 {

/// The driver's own flags.
struct Flags {
  /// none, extra-collective (rank 0 all-reduces a metric the others do not), bucket-order (one
  /// rank all-reduces its buckets in reverse order), uneven (one rank's data ends --fault-step
  /// steps early), freeze (one rank stops responding: SIGSTOP), die (one rank exits).
  std::string fault = "none";
  int fault_rank = -1;            ///< the rank the fault hits (-1: rank 0 for extra-collective, else the last)
  int64_t fault_step = 3;         ///< the step (0-based) at whose start the fault strikes
  int slow_rank = -1;             ///< a rank whose loader sleeps --slow-ms per batch (-1: none)
  double slow_ms = 0;             ///< its extra wait per batch
  bool join = false;              ///< the gradients go through 11.3's join_allreduce (uneven inputs end)
  bool parity = false;            ///< with --join: every step, compare with one process over the same samples
  int64_t fingerprint_every = 1;  ///< compare fingerprints before every K-th collective (0: never)
  int64_t flight = 64;            ///< flight recorder entries per rank (0: no recorder)
  int64_t straggler_every = 4;    ///< gather the ranks' phase times every M steps (0: never)
  double grace_s = 3;             ///< how long a timed-out rank waits for the others' dumps
};
void add_flags(ddplab::LabFlags& f, Flags& flags);

/// Each exercise once in a world of one.
void add_probes(ddplab::LabProgram& program);

/// Turns off the tools whose exercise the probes found missing (a skeleton trains without them).
void drop_missing(const ddplab::LabRun& run, Flags& f);

/// Where the ranks dump their flight recorders: flight/ beside the run's reports.
std::string flight_dir(const ddplab::LabRun& run);

/// The entries of the student's ring (every slot whose op is set), oldest first.
std::vector<ddplab::flight::Entry> in_order(const Ring& ring);
/// The Call of a collective on `t`.
Call call_of(ddplab::dist::Op op, const torch::Tensor& t);
/// "allreduce float[4096]".
std::string describe(const Call& c);

/// The ranks issued different collectives: thrown on every rank by the fingerprint check.
class Desync : public ddplab::Error {
 public:
  Desync(const std::string& message, int64_t seq, std::vector<std::string> calls)
      : ddplab::Error(message), seq(seq), calls(std::move(calls)) {}
  int64_t seq;                     ///< the first collective number at which the ranks differ (-1: unknown)
  std::vector<std::string> calls;  ///< what each rank issued as #seq (index = rank)
};

/// A collective failed (timed out, or the transport broke): thrown with the merged flight dumps.
class Hang : public ddplab::Error {
 public:
  Hang(const std::string& message, ddplab::flight::Stall stall) : ddplab::Error(message), stall(std::move(stall)) {}
  ddplab::flight::Stall stall;
};

/// A communicator over `inner` that, for every collective, records it in the flight recorder
/// (the student's record(), 11.2), folds it into the running fingerprint (11.1) and, before every
/// K-th, all-gathers the ranks' fingerprints and last K calls over `inner` and throws Desync on
/// every rank if they differ. When a collective throws, it dumps its ring to `flight_dir`, asks
/// the other ranks to dump theirs (a watcher thread on each rank answers), merges what arrives
/// within the grace period and throws Hang with the table.
class Watched final : public ddplab::dist::Communicator {
 public:
  Watched(ddplab::dist::Communicator& inner, const Flags& flags, std::string flight_dir);
  ~Watched() override;

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void allreduce(torch::Tensor& t) override;
  void broadcast(torch::Tensor& t, int root) override;
  void allgather(std::vector<torch::Tensor>& out, const torch::Tensor& in) override;
  void all_to_all(torch::Tensor& out, const torch::Tensor& in) override;
  void all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                  const std::vector<int64_t>& in_splits) override;
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in) override;
  void send(const torch::Tensor& t, int dst, int tag = 0) override;
  void recv(torch::Tensor& t, int src, int tag = 0) override;
  void barrier() override;

  /// The number the next collective gets.
  int64_t next_seq() const noexcept { return seq_; }
  /// The fingerprint checks so far: how many, their seconds, their bytes on this rank.
  int64_t checks() const noexcept { return checks_; }
  double check_seconds() const noexcept { return check_seconds_; }
  int64_t check_bytes() const noexcept { return check_bytes_; }
  /// This rank's dump now (the ring in order).
  ddplab::flight::Dump dump(const std::string& reason) const;
  const std::string& flight_dir() const noexcept { return dir_; }

 private:
  template <class Fn>
  void collective(ddplab::dist::Op op, const torch::Tensor& t, Fn&& fn);
  void check_fingerprints(int64_t seq);
  [[noreturn]] void on_failure(int64_t seq, const std::string& what);
  void watch();
  double now() const;

  ddplab::dist::Communicator& inner_;
  Flags flags_;
  std::string dir_;
  std::chrono::steady_clock::time_point start_;
  int64_t seq_ = 0;
  uint64_t running_ = 0;
  std::vector<Call> window_;  ///< the calls since the last check
  int64_t checks_ = 0, check_bytes_ = 0;
  double check_seconds_ = 0;
  mutable std::mutex ring_mutex_;
  Ring ring_;
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

/// What the run injects and what the tools must name: the fault's rank and step, and the
/// collective number the ranks reach at that step's start (the same on every rank until then).
class Faults {
 public:
  Faults(ddplab::LabRun& run, Watched& comm, const Flags& flags);
  /// Called at the start of every step: strikes when `step` is the fault's.
  void begin_step(int64_t step, double last_loss);
  /// Whether this rank all-reduces its buckets in reverse order at `step`.
  bool reversed(int64_t step) const;
  /// The batches rank `rank` gets in an epoch of `steps` (uneven: the fault's rank stops early).
  int64_t steps_for(int rank, int64_t steps) const;
  /// Runs the training; a Desync or a Hang is compared with the fault and recorded as verdict
  /// desync_named or hang_named, then rethrown (ranks other than 0 first give rank 0 a moment to
  /// write the job's report). A run that finishes records whether a fault should have stopped it.
  void expect(const std::function<void()>& train);
  const std::string& fault() const noexcept { return flags_.fault; }
  int fault_rank() const noexcept { return fault_rank_; }

 private:
  ddplab::LabRun& run_;
  Watched& comm_;
  Flags flags_;
  int fault_rank_ = -1;
  int64_t expected_seq_ = -1;  ///< the collective number at the start of the fault's step
};

/// The training: DeepFM with Adam, gradients all-reduced in buckets (the kit's, in bucket order,
/// reversed where the fault says) or by 11.3's join_allreduce (--join), the step timed by phases,
/// and every M steps the ranks' phase times gathered and given to 11.4's find_straggler.
class Trainer {
 public:
  Trainer(ddplab::LabRun& run, Watched& comm, const Flags& flags, ddplab::DeepFM model, Faults& faults);
  /// One epoch: every batch of this rank's share; with --join the rank keeps joining the others'
  /// all-reduces after its data ends, until no rank has data.
  void train_epoch(int64_t epoch);
  /// Records the section "hangs" and the verdicts join_weighted, straggler_named and
  /// fingerprint_overhead that this run's flags call for.
  void report() const;

 private:
  double step(const ddplab::data::Batch* batch);
  void sync_buckets(bool reversed);
  void check_join(const torch::Tensor& joined, int64_t epoch, int64_t step);
  void watch_stragglers();

  ddplab::LabRun& run_;
  Watched& comm_;
  Flags flags_;
  ddplab::DeepFM model_;
  Faults& faults_;
  std::vector<torch::Tensor> params_;
  std::vector<ddplab::dist::Bucket> buckets_;
  std::unique_ptr<torch::optim::Adam> adam_;
  int64_t step_ = 0, global_step_ = 0, epoch_ = 0, join_steps_ = 0;
  double last_loss_ = 0;
  double join_max_diff_ = -1;
  int64_t join_checked_ = 0, join_partial_ = 0;
  PhaseTimes window_;
  std::vector<Straggler> named_;
  std::vector<Straggler> expected_;
  std::vector<double> step_seconds_, check_seconds_;
};

}  // namespace lab11

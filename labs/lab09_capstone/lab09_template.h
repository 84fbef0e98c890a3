// The training template's apparatus (lab 09): what the driver needs around the student's
// checkpoint writer and reader and cost meter, read-only for students and unit-tested in
// tests/lab09_template_kit_test.cpp. The template's settings (one TOML file or the command line);
// the probes; checkpoint file names and the folder of a job; resuming; Checkpointer, which writes
// the job's checkpoints (rank 0 writes, every rank waits) and keeps the newest; the job's clock and
// its budget alarm's margins; the stop every rank agrees on; and the report's checkpoint, cost and
// loss-scaler sections with the run's verdicts. (lab09_kit.h holds the kit's definitions of
// lab09.h's helpers, which the student's code uses.)
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lab09.h"

#include "ddplab/cost.h"
#include "ddplab/grad_scaler.h"
#include "ddplab/lab.h"

namespace lab09 {

/// The template's settings, each a flag and a key of --config.
struct Settings {
  std::string sync = "bucketed", precision = "fp32";
  /// torch: torch::optim::Adam; fused: the kit's one-pass Adam, with row-sparse table gradients
  /// under --sync sparse on the CPU (the same algorithm; template.toml takes it).
  std::string adam = "torch";
  int64_t accumulate = 1, warmup_steps = 0, embedding_dim = 16;
  double input_dropout = 0;    ///< dropout on the dense features while training (draws random numbers)
  std::string checkpoint_dir;  ///< "": checkpoints/ next to the report
  int64_t checkpoint_every = 0, keep_checkpoints = 2;
  bool resume = false;
  std::string resume_from;
  std::string instance = "c6i.large", prices;
  double budget_usd = 0;
  int64_t kill_at_step = 0, sigterm_at_step = 0;
  /// --precision: autocast on (bf16, fp16), its dtype, and whether the loss scaler runs (fp16).
  bool autocast() const { return precision != "fp32"; }
  bool fp16() const { return precision == "fp16"; }
  torch::ScalarType low() const { return fp16() ? torch::kHalf : torch::kBFloat16; }
};
void add_flags(ddplab::LabFlags& f, Settings& s);
/// Throws ConfigError for --precision fp16 off CUDA (LibTorch's CPU autocast runs bfloat16 only).
void check_precision(const Settings& s, const torch::Device& device);

/// Each exercise once on a one-layer model before training, in a scratch folder of the process's
/// temporary directory: the writer (09.1), the reader (09.2; a file that is not a checkpoint when
/// there is no writer) and the meter (09.3).
void add_probes(ddplab::LabProgram& program);

/// Checkpoint files are step-<8 digits>.pt; anything else in the folder (the writer's temporary
/// files, which start with '.') is not one.
std::string checkpoint_name(int64_t step);
std::vector<std::filesystem::path> checkpoints_in(const std::filesystem::path& dir);
/// The checkpoint --resume/--resume-from names: the file itself, or the newest in a folder.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& from);
/// The job's checkpoint folder: --checkpoint-dir, else checkpoints/ next to the report.
std::filesystem::path checkpoint_dir(const ddplab::LabRun& run, const Settings& s);

/// The price the job is billed at (--instance in --prices); warns on rank 0 when the job has more
/// ranks than the instance has devices.
ddplab::cost::Price billed_price(const Settings& s, int world, bool rank0);

/// Where the job starts: step 0, or the checkpoint --resume / --resume-from names, loaded into the
/// model, the optimizer, the generator and the scaler (with 09.2; without it the job starts from
/// step 0, said once). Refuses a folder that holds another job's checkpoints, and a resume the
/// ranks do not agree on. A generator state that 09.2 did not return (an undefined tensor) or that
/// is not one is a CheckpointError saying so. Collective.
struct Resumed {
  Position at;
  std::string from;  ///< the file resumed from ("": a fresh start)
};
Resumed resume(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const Settings& s,
               const std::filesystem::path& dir, const JobIdentity& job, torch::nn::Module& model,
               torch::optim::Optimizer& optimizer, ddplab::amp::GradScaler* scaler, bool can_load, bool can_save);

/// The job's checkpoints: rank 0 writes (with 09.1) and keeps the newest `keep`, every rank waits
/// until the file is whole. Times each write, for the budget alarm's margin.
class Checkpointer {
 public:
  Checkpointer(std::filesystem::path dir, int64_t keep, bool enabled, const JobIdentity& job,
               const torch::nn::Module& model, torch::optim::Optimizer& optimizer, ddplab::amp::GradScaler* scaler,
               ddplab::dist::Communicator& comm);
  /// Writes the checkpoint of `at` (the scaler's state goes into it). Collective.
  void write(Position& at);
  int64_t written() const noexcept { return written_; }
  const std::string& last() const noexcept { return last_; }
  /// Seconds a full checkpoint (the model and Adam's two moments: 3x the model's tensors) takes at
  /// the slowest write rate seen so far; 0 before the first write.
  double full_write_seconds() const;

 private:
  std::filesystem::path dir_;
  int64_t keep_;
  bool enabled_;
  const JobIdentity& job_;
  const torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  ddplab::amp::GradScaler* scaler_;
  ddplab::dist::Communicator& comm_;
  int64_t written_ = 0;
  std::string last_;
  double full_bytes_ = 0, slowest_bytes_per_s_ = 0;
};

/// The job's clock: device-seconds billed are those before this attempt plus world size x this
/// attempt's wall time; and the recent optimizer steps' times, for the budget alarm.
class JobClock {
 public:
  JobClock(int world, double billed_before);
  double device_seconds() const;
  void begin_step();
  void end_step();
  /// The slowest of the last 10 steps (0 before the first).
  double slowest_recent_step() const;

 private:
  using Clock = std::chrono::steady_clock;
  int world_;
  double before_;
  Clock::time_point start_, step_start_;
  std::deque<double> recent_;
};

/// Rank 0's budget decision (09.3's over_budget) with margins against a noisy clock: the slowest
/// recent step, and twice a full checkpoint at the slowest write rate seen, priced.
bool budget_stop(const Settings& s, const ddplab::cost::Price& price, int world, const Spend& now,
                 const JobClock& clock, const Checkpointer& checkpoints);

/// The SIGTERM a preemption sends: noted, so the job stops at the next step with a checkpoint.
void watch_sigterm();
bool sigterm_received();
/// Why every rank stops after this step, agreed on by all ("": go on): any rank's SIGTERM, rank 0's
/// budget decision. Collective.
std::string agree_to_stop(ddplab::dist::Communicator& comm, bool sigterm, bool budget);

/// --input-dropout: the dense features of a training batch with dropout at `p` (each zeroed with
/// probability p, the rest scaled by 1 / (1 - p)); `dense` itself at p = 0. The mask is drawn on the
/// CPU from the default generator, whatever the device: the generator state a checkpoint holds
/// (rng_state()) is all a resumed job needs to draw the masks the job would have drawn.
torch::Tensor input_dropout(const torch::Tensor& dense, double p);

/// The learning rate of step `step` (0-based) with linear warm-up over `warmup` steps.
double warmup_lr(double target, int64_t warmup, int64_t step);

/// The progress line of the meter (rank 0, every --log-every steps).
void print_cost(const Spend& now, const ddplab::cost::Price& price, int64_t epochs);

/// The end of the run: how it stopped (verdict `sigterm_checkpoint` when by SIGTERM), what it
/// cost, and the report's sections checkpoint, cost and loss_scaler.
struct Ending {
  std::string stopped;  ///< "", "budget", "SIGTERM", "max-steps"
  Position at, resumed_at;
  std::string resumed_from;
  Spend spend;
  uint64_t samples_per_epoch = 0;
  int64_t epochs = 0;
  bool metered = false, saved = false;
};
void report(ddplab::LabRun& run, const Settings& s, const ddplab::cost::Price& price, const Ending& end,
            const Checkpointer& checkpoints, const std::filesystem::path& dir, const ddplab::amp::GradScaler* scaler);

}  // namespace lab09

// The scaffolding every lab program shares, so that a lab's main() shows only its lesson:
// flag parsing, threads and device, data sets, the timed step loop, progress line, evaluation
// bookkeeping, the run report, and the mapping of errors and skeleton stubs to exit codes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "ddplab/data/loader.h"
#include "ddplab/dist/communicator.h"
#include "ddplab/dist/env.h"
#include "ddplab/data/shard.h"
#include "ddplab/error.h"
#include "ddplab/options.h"
#include "ddplab/progress.h"
#include "ddplab/report.h"
#include "ddplab/timer.h"

namespace ddplab {

/// Test-set quality of a model (definitions: docs/concepts/metrics.md).
struct EvalResult {
  double auc = 0.0;
  double logloss = 0.0;
  uint64_t samples = 0;
};

/// One run of a lab program on one rank.
class LabRun {
 public:
  LabRun(std::string lab, LabOptions opts);
  ~LabRun();
  LabRun(const LabRun&) = delete;
  LabRun& operator=(const LabRun&) = delete;

  const std::string& lab() const noexcept { return lab_; }
  const LabOptions& options() const noexcept { return opts_; }
  torch::Device device() const noexcept { return device_; }
  int rank() const noexcept { return env_.rank; }
  int world_size() const noexcept { return env_.world_size; }
  /// Where this process sits in the job, from the launcher's variables (dist/env.h).
  const dist::Environment& environment() const noexcept { return env_; }
  /// Registers the communicator the lab trains with, so the report includes its statistics
  /// (calls, bytes and time per collective). The run keeps it alive until the report is written.
  void set_communicator(std::shared_ptr<const dist::Communicator> comm) { comm_ = std::move(comm); }
  const data::Dataset& train() const { return *train_; }
  const data::Dataset& test() const { return *test_; }
  /// Training samples in use (--train-samples, else the whole split).
  uint64_t train_size() const noexcept { return train_size_; }
  /// Test samples evaluated (--eval-samples, else the whole split).
  uint64_t eval_size() const noexcept { return eval_size_; }
  int64_t global_batch() const noexcept { return opts_.batch * env_.world_size; }
  /// Learning rate for this run's global batch (--lr, scaled unless --no-lr-scaling).
  double lr() const { return opts_.effective_lr(global_batch()); }
  StepTimer& timer() noexcept { return timer_; }
  RunReport& report() noexcept { return report_; }

  /// Call once before training with the steps one epoch takes on this rank: sets the progress
  /// line's total, keeps the model for the report and records its initial parameter digest.
  void start_training(std::shared_ptr<torch::nn::Module> model, int64_t steps_per_epoch);
  void begin_epoch(int64_t epoch);
  /// Starts a step and fetches its batch, timing the wait as Phase::kDataWait. False when the
  /// loader is exhausted or --max-steps is reached (no step is started then).
  bool next_batch(data::BatchLoader& loader, data::Batch& batch);
  /// Ends the step: records the loss and the batch's sample indices, prints progress.
  void end_step(const data::Batch& batch, double loss);
  void end_epoch();
  int64_t global_step() const noexcept { return step_; }
  int64_t epoch() const noexcept { return epoch_; }

  /// Records an exercise the skeleton has not implemented yet (reported as "not attempted").
  void not_attempted(const NotImplemented& e);
  /// Records the evaluation result (compared with the teacher's in the summary and report).
  void set_eval(const EvalResult& r);
  /// Writes the report and the summary; saves the model if asked. Returns the exit status.
  int finish();
  /// Writes a report with status "error" and `message`.
  void fail(const std::string& message);

 private:
  std::string lab_;
  LabOptions opts_;
  torch::Device device_{torch::kCPU};
  dist::Environment env_;
  std::shared_ptr<const dist::Communicator> comm_;
  std::unique_ptr<data::Dataset> train_, test_;
  uint64_t train_size_ = 0, eval_size_ = 0;
  StepTimer timer_;
  RunReport report_;
  std::unique_ptr<Progress> progress_;
  SampleLedger ledger_;
  int64_t step_ = 0, epoch_ = 0, epoch_steps_ = 0;
  uint64_t processed_ = 0;
  StepTimer::Clock::time_point epoch_start_{};
  std::shared_ptr<torch::nn::Module> model_;
  std::string initial_digest_;
  std::optional<EvalResult> eval_;
};

/// What a lab program is: its name, one-line description, extra flags, and its body.
struct LabProgram {
  std::string name;          ///< "lab01": names the report folder and the report's "lab"
  std::string description;   ///< shown by --help
  std::function<void(CLI::App&)> add_flags;  ///< optional lab-specific flags
  std::function<void(LabRun&)> body;         ///< the lab's training and evaluation
};

/// Parses flags, runs the body and maps the outcome to an exit status: 0 ok, 2 bad flags,
/// 3 (kExitNotAttempted) when a skeleton stub was reached, 1 for any other error. The report
/// is written in every case where a run was started.
int run_lab(const LabProgram& program, int argc, char** argv);

}  // namespace ddplab

// The scaffolding every lab program shares, so that a lab's main() shows only its lesson: flag
// parsing (the shared flags and the lab's own, each with an environment fallback), threads and
// device, data sets, joining the job, the epoch loop with its timed data wait, the progress line,
// evaluation bookkeeping, the run report, and the mapping of errors and skeleton stubs to exit
// codes. The training step itself is in train.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "ddplab/data/loader.h"
#include "ddplab/data/shard.h"
#include "ddplab/dist/agree.h"
#include "ddplab/dist/communicator.h"
#include "ddplab/dist/env.h"
#include "ddplab/dist/process_group.h"
#include "ddplab/error.h"
#include "ddplab/evaluate.h"
#include "ddplab/options.h"
#include "ddplab/progress.h"
#include "ddplab/report.h"
#include "ddplab/timer.h"
#include "ddplab/trace.h"

namespace ddplab {

namespace nvml {
class Sampler;
}

/// A lab program's own flags (--shard, --sync, ...), treated like the shared ones: each gets an
/// environment fallback DDPLAB_<NAME> (--no-shuffle: DDPLAB_NO_SHUFFLE) and its parsed value is
/// recorded in the run report's "config" (key "no_shuffle"), so a report says how it was made.
class LabFlags {
 public:
  explicit LabFlags(CLI::App& app) : app_(app) {}

  /// An option taking a value, e.g. option("--shard", shard, "strided or contiguous").
  template <class T>
  CLI::Option* option(const std::string& name, T& value, const std::string& help) {
    CLI::Option* o = app_.add_option(name, value, help)->envname(env_name(name))->capture_default_str();
    record(name, [&value] { return nlohmann::json(value); });
    return o;
  }
  /// A switch, e.g. flag("--stratify", stratify, "..."); DDPLAB_STRATIFY=1 sets it too.
  CLI::Option* flag(const std::string& name, bool& value, const std::string& help);

  /// The shared --optimizer flag (optim::make's names, "adam" or "sgd"), its help saying why the
  /// lab's default is what `name` holds.
  CLI::Option* optimizer(std::string& name, const std::string& why_default);

  /// Every lab flag's value (after parsing), keyed by config_key().
  nlohmann::json values() const;
  CLI::App& app() noexcept { return app_; }

  /// "--no-shuffle" -> "DDPLAB_NO_SHUFFLE".
  static std::string env_name(const std::string& name);
  /// "--no-shuffle" -> "no_shuffle".
  static std::string config_key(const std::string& name);

 private:
  void record(const std::string& name, std::function<nlohmann::json()> get);
  CLI::App& app_;
  std::vector<std::pair<std::string, std::function<nlohmann::json()>>> values_;
};

/// What a probe gets: a world of one (dist::Loopback: collectives leave their data as one rank
/// would) and the run's device.
struct ProbeContext {
  dist::Communicator& comm;
  torch::Device device;
};

/// A probe: one exercise tried once on something tiny before the lab's body runs
/// (LabProgram::probe), so a skeleton's run lists every missing exercise at once and the body
/// can carry on without the ones that are missing (LabRun::has, LabRun::without).
struct Probe {
  std::string exercise;  ///< "04.1"
  std::string what;      ///< "assign_buckets", named in a warning if the probe fails
  std::function<void(ProbeContext&)> run;
};

/// Runs each probe once, in order, and returns the exercises found missing. A stub's
/// NotImplemented goes to `missing` (which records it) and marks its exercise missing; any other
/// error is a warning naming the exercise and what was probed, and the exercise counts as
/// present, so that training meets the error again with its cause. One probe's failure is its
/// exercise's only: the next probe still runs.
/// On a CPU device each probe is first tried in a child process (crashing_probes): a probe that
/// kills its process or hangs is skipped here with a warning, so that only the runs that use its
/// exercise meet the crash.
std::set<std::string> run_probes(const std::vector<Probe>& probes, ProbeContext& ctx,
                                 const std::function<void(const NotImplemented&)>& missing);

/// The probes that crash (end their process by a signal) or do not return within `timeout_s`,
/// by index, with what happened ("killed the process (Segmentation fault)"): the probes run in
/// order in a forked child, started again after each one that crashed. Needs a fork-safe device
/// (a CPU).
std::map<size_t, std::string> crashing_probes(const std::vector<Probe>& probes, ProbeContext& ctx,
                                              double timeout_s = 60);

/// What one finished epoch did on this rank.
struct EpochSummary {
  int64_t epoch = 0;
  int64_t steps = 0;
  double seconds = 0.0;  ///< from the epoch's first batch request to its last step's end
  SampleLedger samples;  ///< the sample indices this rank trained on (count and digests)
};

/// One run of a lab program on one rank.
class LabRun {
 public:
  /// `lab_flags`: the lab's own flag values (LabFlags::values()), recorded in the report's config.
  LabRun(std::string lab, LabOptions opts, nlohmann::json lab_flags = nlohmann::json::object());
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
  const data::Dataset& train() const { return *train_; }
  const data::Dataset& test() const { return *test_; }
  /// Reopens the training split held in this process's memory (data::ShardReader's in_memory)
  /// when its files take at most `max_bytes`, else keeps it mapped; says which in the log. Call
  /// before the first loader. Returns whether it is in memory.
  bool hold_training_data_in_memory(uint64_t max_bytes = uint64_t{2} << 30);
  /// Training samples in use (--train-samples, else the whole split).
  uint64_t train_size() const noexcept { return train_size_; }
  /// Test samples evaluated (--eval-samples, else the whole split).
  uint64_t eval_size() const noexcept { return eval_size_; }
  int64_t batch() const noexcept { return opts_.batch; }
  int64_t global_batch() const noexcept { return opts_.batch * env_.world_size; }
  /// Steps one epoch over `samples` takes at this rank's batch size (the last batch may be short).
  int64_t steps_per_epoch(uint64_t samples) const;
  /// Steps of an epoch made of whole global batches (world size x --batch samples each), so that
  /// every rank takes the same number of steps and none waits at a collective for a peer that ran
  /// out of data; the rest of the split, fewer than one global batch, is left out. Throws
  /// ConfigError if the training samples do not fill one global batch.
  int64_t whole_global_batches() const;
  /// The loader of epoch `epoch` for `steps` whole global batches: the epoch's shuffled order
  /// (data::shuffled_order of --seed and the epoch) cut into global batches, this rank taking its
  /// slice [rank x B, (rank + 1) x B) of each (data::global_batch_slice).
  std::unique_ptr<data::BatchLoader> global_batch_loader(int64_t epoch, int64_t steps) const;
  /// Moves `module` to the run's device and gives every rank rank 0's weights and buffers: every
  /// replica of data parallel starts from the same model.
  void replicate(torch::nn::Module& module, dist::Communicator& comm) const;
  /// Learning rate for this run's global batch (--lr, scaled unless --no-lr-scaling).
  double lr() const { return opts_.effective_lr(global_batch()); }
  StepTimer& timer() noexcept { return timer_; }
  RunReport& report() noexcept { return report_; }

  // ---- joining the job ----
  /// Process-group options from the flags (--comm-timeout).
  dist::ProcessGroupOptions group_options() const;
  /// Joins the job the launcher started (rendezvous through its TCPStore) and registers the
  /// process group, so the report includes its statistics (calls, bytes and time per collective).
  /// A single process gets a group of one. The run keeps the group alive until the report is written.
  std::shared_ptr<dist::ProcessGroup> join();
  /// The same with another view of the job, e.g. lab 02's own reading of the environment, or
  /// dist::Environment{} for a world of one.
  std::shared_ptr<dist::ProcessGroup> join(const dist::Environment& env);
  /// Registers a communicator made elsewhere (its statistics go into the report). Its collectives
  /// reach the timeline only if it is given tracer() (comm->set_trace(run.tracer())); join() does that.
  void set_communicator(std::shared_ptr<const dist::Communicator> comm) { comm_ = std::move(comm); }
  /// The timeline (--trace), or nullptr when tracing is off. The timer records on it already.
  const std::shared_ptr<trace::Recorder>& tracer() const noexcept { return trace_; }

  // ---- the training loop ----
  /// Call once before training with the steps one epoch takes on this rank: sets the progress
  /// line's total, keeps the model for the report and records its initial parameter digest.
  void start_training(std::shared_ptr<torch::nn::Module> model, int64_t steps_per_epoch);

  /// One training step on a batch; returns the loss (usually ddplab::train_step, train.h).
  using StepFn = std::function<double(const data::Batch&)>;
  /// Runs one epoch: every batch of `loader` (until --max-steps), each timed as a step whose
  /// batch fetch is Phase::kDataWait and whose body is `step`; records losses, sample indices
  /// and the epoch's time in the report. If `step` throws, the step is abandoned (its time is not
  /// counted), the epoch is not closed, and the exception propagates.
  const EpochSummary& run_epoch(int64_t epoch, data::Loader& loader, const StepFn& step);
  /// The epoch run_epoch() closed last.
  const EpochSummary& last_epoch() const noexcept { return last_epoch_; }
  int64_t global_step() const noexcept { return step_; }

  // The pieces run_epoch() is made of, for a loop that needs to be written out.
  void begin_epoch(int64_t epoch);
  /// Starts a step and fetches its batch, timing the wait as Phase::kDataWait. False when the
  /// loader is exhausted or --max-steps is reached (no step is started then).
  bool next_batch(data::Loader& loader, data::Batch& batch);
  /// Ends the step: records the loss and the batch's sample indices, prints progress.
  void end_step(const data::Batch& batch, double loss);
  void end_epoch();

  // ---- the end of the run ----
  /// Records an exercise the skeleton has not implemented yet (reported as "not attempted"); an
  /// exercise is recorded once, however often its stub is reached.
  void not_attempted(const NotImplemented& e);
  /// Runs `exercise` (code that calls the student's functions). If a stub throws NotImplemented,
  /// records it and returns false, so the driver can carry on without that exercise.
  bool attempt(const std::function<void()>& exercise);
  /// Runs the program's probes (LabProgram::probe; ddplab::run_probes) on a world of one and the
  /// run's device, recording missing exercises as not attempted. run_lab calls it before the body.
  void run_probes(const std::vector<Probe>& probes);
  /// Whether every probe of `exercise` found it written (true for an exercise nothing probed).
  bool has(const std::string& exercise) const { return absent_.count(exercise) == 0; }
  /// When `exercise` is missing: rank 0 warns "<exercise> not attempted: <consequence>" and it
  /// returns true. False (and silent) when it is there.
  bool without(const std::string& exercise, const std::string& consequence) const;
  /// The end of data-parallel training: every rank compares its parameters with the others'
  /// (verdict `params_identical`, with this rank's digest), and, for a DeepFM, rank 0 evaluates
  /// it for the job while the others wait. Collective. Returns the comparison.
  dist::Agreement end_of_training(const std::shared_ptr<torch::nn::Module>& model, dist::Communicator& comm);
  /// Records the evaluation result (compared with the teacher's in the summary and report).
  void set_eval(const EvalResult& r);
  /// Every rank holds the same model: rank 0 evaluates it for the job, the others wait for it.
  void evaluate_on_rank0(DeepFM& model, dist::Communicator& comm);
  /// Waits for every rank of the launched job, through the launcher's rendezvous and nothing else:
  /// for ranks that never joined one group (independent trainers). `ddplab launch` stops every
  /// rank as soon as one exits with a non-zero status (3: not attempted), so a rank still working
  /// would lose its report. Nothing to do for a single process.
  void finish_together();
  /// The report's "utilization" section: the phase timers' busy fraction (compute / wall) and,
  /// on CUDA, NVML's median GPU utilization over the training ("source": "nvml" when sampled).
  nlohmann::json utilization() const;
  /// Writes the report, the timeline (--trace) and the summary; saves the model if asked.
  /// Returns the exit status.
  int finish();
  /// Writes a report (and the timeline) with status "error" and `message`.
  void fail(const std::string& message);

 private:
  /// Writes the timeline, if tracing, with the run's status in its metadata.
  void write_trace(const std::string& status, const std::string& message);

  std::string lab_;
  LabOptions opts_;
  torch::Device device_{torch::kCPU};
  dist::Environment env_;
  std::shared_ptr<trace::Recorder> trace_;  // before timer_ and comm_: they record on it
  std::shared_ptr<const dist::Communicator> comm_;
  std::unique_ptr<data::Dataset> train_, test_;
  uint64_t train_size_ = 0, eval_size_ = 0;
  StepTimer timer_;
  RunReport report_;
  std::unique_ptr<Progress> progress_;
  EpochSummary epoch_, last_epoch_;
  int64_t step_ = 0;
  uint64_t processed_ = 0;
  StepTimer::Clock::time_point epoch_start_{};
  std::shared_ptr<torch::nn::Module> model_;
  std::string initial_digest_;
  std::optional<EvalResult> eval_;
  std::set<std::string> missing_;        // exercises recorded as not attempted
  std::set<std::string> absent_;         // exercises a probe found missing
  std::unique_ptr<nvml::Sampler> nvml_;  // CUDA only: the device's utilization, sampled during training
};

/// What a lab program is: its name, one-line description, extra flags, and its body.
struct LabProgram {
  std::string name;                          ///< the lab's folder name (DDPLAB_LAB_NAME): the report's "lab" and folder
  std::string description;                   ///< shown by --help
  std::function<void(LabFlags&)> add_flags;  ///< optional lab-specific flags
  std::function<void(LabRun&)> body;         ///< the lab's training and evaluation
  /// False for a lab that scales the learning rate itself (lab 06): LabRun::lr() is then --lr
  /// unscaled, and --no-lr-scaling is an error instead of being silently ignored.
  bool lr_scaling_flag = true;
  /// The exercises tried once before the body (LabRun::run_probes), in declaration order.
  std::vector<Probe> probes;
  /// Declares a probe of `exercise`: `fn` calls the student's code on something tiny.
  void probe(std::string exercise, std::string what, std::function<void(ProbeContext&)> fn) {
    probes.push_back(Probe{std::move(exercise), std::move(what), std::move(fn)});
  }
};

/// Parses flags, runs the body and maps the outcome to an exit status: 0 ok, 2 bad flags,
/// 3 (kExitNotAttempted) when a skeleton stub was reached, 1 for any other error. The report
/// is written in every case where a run was started.
int run_lab(const LabProgram& program, int argc, char** argv);

}  // namespace ddplab

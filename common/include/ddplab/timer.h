// Step timer with named phases. Labs wrap each part of a training step in a scope, and the run
// report, the progress line and the grader's utilization check all read these totals
// (definitions: docs/concepts/metrics.md, "Phase times").
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ddplab {

namespace trace {
class Recorder;
}

/// The phases of a training step. kComm is *exposed* communication: time the step waits on a
/// collective that compute did not hide.
enum class Phase { kDataWait = 0, kForward, kBackward, kComm, kOptimizer, kCount };
inline constexpr int kNumPhases = static_cast<int>(Phase::kCount);

/// Snake-case name used in reports: data_wait, forward, backward, comm, optimizer.
const char* phase_name(Phase p);

/// Accumulates wall time per phase and per step. Not thread-safe: one timer per training loop.
class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;

  /// One finished step as the timer saw it (last_step()): its length, the seconds of each phase,
  /// and when each phase first began and last ended (Clock::time_point{} for a phase the step did
  /// not enter). A lab that measures something inside the step (when a collective started relative
  /// to backward) reads the phase boundaries here instead of reading the clock again.
  struct StepRecord {
    Clock::time_point start{}, end{};
    double seconds = 0.0;
    std::array<double, kNumPhases> phases{};
    std::array<Clock::time_point, kNumPhases> began{}, ended{};
    double phase(Phase p) const { return phases[static_cast<int>(p)]; }
    /// Whether the step entered phase `p`.
    bool entered(Phase p) const { return began[static_cast<int>(p)] != Clock::time_point{}; }
  };

  /// RAII scope: time from construction to destruction is added to one phase.
  class Scope {
   public:
    Scope(StepTimer& timer, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepTimer& timer_;
    Phase phase_;
    Clock::time_point start_;
  };

  StepTimer();
  /// Called before a phase ends and before a step ends, so asynchronous device work is charged
  /// to the phase that launched it (CUDA: torch::cuda::synchronize). Default: nothing.
  void set_synchronizer(std::function<void()> sync) { sync_ = std::move(sync); }
  /// Also records every step and phase on `trace` (--trace; nullptr: off, the default). The
  /// timer reads the clock anyway, so tracing adds only a push per phase.
  void set_trace(trace::Recorder* trace) noexcept { trace_ = trace; }

  [[nodiscard]] Scope scope(Phase p) { return Scope(*this, p); }
  void add(Phase p, double seconds);

  /// Marks the start of the run (first step's start); steps are timed between begin/end_step.
  void begin_step();
  void end_step();
  /// Abandons the step begun last (e.g. the loader had no batch left); its time is not counted.
  void cancel_step();

  double total(Phase p) const { return totals_[static_cast<int>(p)]; }
  /// Seconds from the first begin_step() to the last end_step().
  double wall() const;
  /// Sum of forward, backward and optimizer: the time the device computed.
  double compute() const;
  const std::vector<double>& step_seconds() const noexcept { return steps_; }
  /// Seconds of phase `p` in each finished step, in step order (a cancelled step's are left out;
  /// total() keeps them).
  std::vector<double> phase_per_step(Phase p) const;
  int64_t steps() const noexcept { return static_cast<int64_t>(steps_.size()); }
  /// The step end_step() closed last (a default record before the first one).
  const StepRecord& last_step() const noexcept { return last_; }
  /// The step in progress, so far: its phases and their boundaries up to now (seconds and end
  /// are set when it ends). For a step function that reads its own phases before returning.
  const StepRecord& current_step() const noexcept { return open_; }
  /// Forgets everything (after warm-up steps).
  void reset();

 private:
  void sync() const {
    if (sync_) sync_();
  }
  void record(Phase p, Clock::time_point start, Clock::time_point end);
  std::array<double, kNumPhases> totals_{};
  std::vector<double> steps_;
  std::vector<std::array<double, kNumPhases>> step_phases_;
  StepRecord open_, last_;  ///< the step begun last (its phases so far) and the one closed last
  Clock::time_point first_{}, step_start_{}, last_end_{};
  bool started_ = false, in_step_ = false;
  std::function<void()> sync_;
  trace::Recorder* trace_ = nullptr;
};

/// Seconds since an arbitrary start, for ad-hoc timing.
double seconds_since(StepTimer::Clock::time_point start);

/// Median of a non-empty sample (copies it).
double median(std::vector<double> values);

}  // namespace ddplab

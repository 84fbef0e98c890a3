// A per-rank timeline (--trace): the phases of every step and every collective, written as Chrome
// Trace Event JSON that Perfetto UI and chrome://tracing open. The kit's own writer, because
// Debian's LibTorch has no Kineto. Format and size: docs/concepts/metrics.md, "Timeline (--trace)".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddplab::trace {

inline constexpr const char* kTraceSchema = "ddplab.trace";
inline constexpr int kTraceVersion = 1;
/// tid of the steps and their phases; collectives use kCollectivesTid and up (one lane per
/// collective in flight at once, so the complete events of one track always nest).
inline constexpr int kStepsTid = 0;
inline constexpr int kCollectivesTid = 1;
inline constexpr int kMaxLanes = 16;
/// Events outside any step (the start-up broadcast, the end-of-run barrier) kept at most.
inline constexpr size_t kMaxOutsideEvents = 1024;

/// Records one rank's timeline in memory. Recording is a clock read the caller already made and
/// a push onto a vector whose capacity is reused after the first 2N steps, so it can sit in the
/// training step; the JSON is built only by write(). Only the first `keep_steps` and the last
/// `keep_steps` steps are kept (0: all), so a long run gives a file of bounded size.
///
/// Not thread-safe, like StepTimer and CommStats: the training thread records, and a collective
/// launched from an autograd hook runs while that thread is blocked in backward.
class Recorder {
 public:
  using Clock = std::chrono::steady_clock;

  /// `rank` becomes the events' pid. The origin of every timestamp is now.
  Recorder(int rank, int world_size, int64_t keep_steps);

  // ---- steps and phases (called by StepTimer) ----
  void begin_step(Clock::time_point start);
  /// Closes the step begun last with a "step N" event from its start to `end`.
  void end_step(Clock::time_point end);
  /// Forgets the step begun last and every event recorded in it (the loader had no batch left).
  void cancel_step();
  /// A phase (static name: phase_name()) inside the current step.
  void phase(const char* name, Clock::time_point start, Clock::time_point end);

  // ---- collectives (called by dist::Communicator) ----
  /// Takes a lane on the collectives track for a collective starting now; pass it to collective().
  int begin_collective();
  /// A collective (static name: op_name()) from launch to completion as this rank observed it,
  /// on the lane begin_collective() gave; `sequence` is the communicator's "#N".
  void collective(int lane, const char* op, Clock::time_point start, Clock::time_point end, int64_t bytes,
                  int64_t sequence, bool async);

  /// Free-form fields for the file's metadata (e.g. the lab's name and the run's status).
  nlohmann::json& metadata() noexcept { return meta_; }
  int64_t steps_recorded() const noexcept { return steps_; }

  /// The whole trace: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
  std::string to_json() const;
  /// Writes to_json() to `path` atomically (temporary file + rename); throws ddplab::Error naming it.
  void write(const std::string& path) const;

 private:
  enum class Kind : uint8_t { kStep, kPhase, kCollective };
  struct Event {
    const char* name;  // static; nullptr for a step ("step N")
    int64_t start_ns;  // since origin_
    int64_t dur_ns;
    int64_t step;  // -1 outside a step
    int64_t bytes;
    int64_t sequence;
    int16_t tid;
    Kind kind;
    bool async;
  };
  int64_t since_origin(Clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin_).count();
  }
  /// The buffer the current step's events go to, or nullptr outside a step when that one is full.
  std::vector<Event>* buffer();

  int rank_, world_size_;
  int64_t keep_;
  Clock::time_point origin_;
  int64_t origin_system_ns_;
  std::vector<Event> head_;               // steps [0, keep_) (all steps when keep_ is 0)
  std::vector<std::vector<Event>> ring_;  // steps >= keep_: step s in ring_[s % keep_]
  std::vector<Event> current_;            // the open step when it is one for the ring (swapped in at its end)
  std::vector<Event> outside_;            // before the first step, between and after steps
  int64_t steps_ = 0;                     // steps ended
  bool in_step_ = false;
  Clock::time_point step_start_{};
  size_t step_mark_ = 0;  // size of the step's buffer when the step began (cancel_step truncates)
  uint32_t lanes_busy_ = 0;
  int lanes_used_ = 0;
  int64_t dropped_outside_ = 0;
  nlohmann::json meta_ = nlohmann::json::object();
};

/// One input of merge(): a rank's trace file.
struct MergeInput {
  std::string path;
  nlohmann::json doc;
};

/// What merge() did, for the command to print.
struct MergeResult {
  nlohmann::json doc;
  std::string alignment;  ///< "steady_clock" (one machine) or "system_clock" (several)
  std::vector<double> shift_us;
};

/// `doc` (a merged trace) as text, one event per line like a rank's file.
std::string dump(const nlohmann::json& doc);
/// Writes `text` to `path` atomically (temporary file + rename); throws ddplab::Error naming it.
void write_atomic(const std::string& path, const std::string& text);

/// Reads a rank's trace file; throws ddplab::Error naming the file when it is not one.
nlohmann::json load(const std::string& path);

/// Puts the ranks' traces into one: every rank keeps its pid (two files of one rank are an error),
/// timestamps move to the earliest origin, and the events are sorted by ts (metadata first).
/// Files whose metadata show one boot of one machine share steady_clock and align exactly; across
/// machines the origins' system_clock readings are used, good to the clocks' synchronisation.
MergeResult merge(const std::vector<MergeInput>& inputs);

}  // namespace ddplab::trace

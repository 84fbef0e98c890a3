// The progress line rank 0 prints every N steps: step, unique samples/s, loss, memory and ETA
// ("print throughput and memory every 100 steps"; definitions in docs/concepts/metrics.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ddplab {

class Progress {
 public:
  /// total_steps: steps in the whole run (for the ETA); every: print every N steps (0: never);
  /// samples_per_step: unique samples one step consumes across all ranks.
  Progress(int64_t total_steps, int64_t every, int64_t samples_per_step);
  /// Records that `step` (0-based, counted over the run) finished with `loss`; prints on rank 0
  /// every `every` steps and at the last step. Returns the line it printed, or "".
  std::string update(int64_t step, double loss);
  /// Formats seconds as "1h02m", "3m05s" or "42s".
  static std::string format_duration(double seconds);

 private:
  int64_t total_, every_, samples_per_step_;
  std::chrono::steady_clock::time_point start_, window_start_;
  int64_t window_first_step_ = 0;
  double loss_sum_ = 0.0;
  int64_t loss_count_ = 0;
};

}  // namespace ddplab

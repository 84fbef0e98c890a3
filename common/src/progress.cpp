// Throughput over the last window, smoothed loss over the same window, ETA from the run so far.
#include "ddplab/progress.h"

#include <fmt/format.h>

#include "ddplab/error.h"
#include "ddplab/log.h"
#include "ddplab/memory.h"

namespace ddplab {

Progress::Progress(int64_t total_steps, int64_t every, int64_t samples_per_step)
    : total_(total_steps),
      every_(every),
      samples_per_step_(samples_per_step),
      start_(std::chrono::steady_clock::now()),
      window_start_(start_) {}

std::string Progress::format_duration(double seconds) {
  if (seconds < 0) seconds = 0;
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string Progress::update(int64_t step, double loss) {
  loss_sum_ += loss;
  ++loss_count_;
  const bool last = step + 1 == total_;
  if (every_ <= 0 || (!last && (step + 1) % every_ != 0)) return "";
  const auto now = std::chrono::steady_clock::now();
  const double window = std::chrono::duration<double>(now - window_start_).count();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int64_t window_steps = step + 1 - window_first_step_;
  const double rate = window > 0 ? static_cast<double>(window_steps * samples_per_step_) / window : 0.0;
  const double eta =
      step + 1 > 0 ? elapsed / static_cast<double>(step + 1) * static_cast<double>(total_ - step - 1) : 0.0;
  std::string mem = memory::human_bytes(memory::current_rss_bytes());
  if (const uint64_t cuda = memory::cuda_peak_allocated_bytes(); cuda > 0) {
    mem += " | cuda peak " + memory::human_bytes(cuda);
  }
  std::string line = fmt::format("step {:>{}}/{} | {:>9.0f} samples/s | loss {:.4f} | rss {} | ETA {}", step + 1,
                                 std::to_string(total_).size(), total_, rate,
                                 loss_sum_ / static_cast<double>(loss_count_), mem, format_duration(eta));
  window_start_ = now;
  window_first_step_ = step + 1;
  loss_sum_ = 0.0;
  loss_count_ = 0;
  if (process_rank() <= 0) log::write(log::Level::kInfo, line);
  return line;
}

}  // namespace ddplab

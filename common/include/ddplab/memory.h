// Memory readings for the progress line and the run report: resident set size of the process
// (peak and current) and, on CUDA, the caching allocator's peak.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace ddplab::memory {

/// Peak resident set size of this process in bytes (getrusage ru_maxrss).
uint64_t peak_rss_bytes();
/// Current resident set size in bytes (/proc/self/statm); 0 where unavailable.
uint64_t current_rss_bytes();
/// Peak bytes allocated by LibTorch's CUDA caching allocator on the current device; 0 on a
/// CPU-only build or when CUDA is not in use.
uint64_t cuda_peak_allocated_bytes();
/// "512.0 MiB" style.
std::string human_bytes(uint64_t bytes);

/// Tensor memory of this thread, measured: while a Tracker lives, the CPU allocator reports every
/// allocation and free of a LibTorch tensor made on the thread that created the tracker (and on
/// the threads LibTorch runs its work on for it) - c10's memory-reporting hook, the one the
/// profiler's profile_memory uses - and the tracker keeps the live bytes and their peak.
/// `cuda`: count the CUDA caching allocator's reports instead, which use the same hook (not yet
/// run on a GPU). One tracker per thread (a newer one replaces it until it ends); a tensor made
/// before it is not counted (create it before the model), nor are other threads' tensors.
class Tracker {
 public:
  explicit Tracker(bool cuda = false);
  ~Tracker();
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  /// Bytes of tensors allocated since the tracker started and not yet freed.
  int64_t live_bytes() const;
  /// The most live_bytes() has been since the start or the last reset_peak().
  int64_t peak_bytes() const;
  /// Starts a new peak at the current live bytes (e.g. at the start of a step).
  void reset_peak();
  /// Allocations and frees seen (a test that the hook is connected).
  int64_t events() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  std::unique_ptr<struct TrackerGuard> guard_;
};

}  // namespace ddplab::memory

// Memory readings for the progress line and the run report: resident set size of the process
// (peak and current) and, on CUDA, the caching allocator's peak.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace ddplab::memory {

/// Peak resident set size of this process in bytes (getrusage ru_maxrss).
uint64_t peak_rss_bytes();
/// Current resident set size in bytes (/proc/self/statm); 0 where unavailable.
uint64_t current_rss_bytes();
/// Peak bytes allocated by LibTorch's CUDA caching allocator on the current device; 0 on a
/// CPU-only build or when CUDA is not in use.
uint64_t cuda_peak_allocated_bytes();
/// Bytes of a tensor's elements (numel x element size; 0 for an undefined tensor): a collective's
/// payload, a bucket's share, a parameter's size.
int64_t bytes_of(const torch::Tensor& tensor);
/// Bytes of the defined tensors among `tensors`.
int64_t bytes_of(const std::vector<torch::Tensor>& tensors);

/// "512.0 MiB" style.
std::string human_bytes(uint64_t bytes);

/// Tensor memory of this process, measured. On CPU the first tracker puts a counting allocator in
/// front of LibTorch's CPU allocator (for the rest of the process), so every tensor allocated from
/// then on is counted when it is made and when it is freed, on any thread - a process's tensors
/// are its "device memory". A tracker reads the count relative to its start: tensors made before
/// it are not in live_bytes(). On CUDA it reads the caching allocator's statistics of device 0
/// instead (allocated bytes, current and peak; not yet run on a GPU). One tracker measures peaks at
/// a time: reset_peak() restarts the process's peak.
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
  /// Allocations and frees counted since the tracker started (CPU).
  int64_t events() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddplab::memory

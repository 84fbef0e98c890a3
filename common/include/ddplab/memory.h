// Memory readings for the progress line and the run report: resident set size of the process
// (peak and current) and, on CUDA, the caching allocator's peak.
#pragma once

#include <cstdint>
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

}  // namespace ddplab::memory

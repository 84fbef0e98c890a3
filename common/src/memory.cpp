// RSS from the kernel; CUDA peak from the caching allocator where this LibTorch has CUDA.
#include "ddplab/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <fmt/format.h>

#include "ddplab/config.h"
#ifdef DDPLAB_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/cuda.h>
#endif

namespace ddplab::memory {

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

uint64_t current_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t cuda_peak_allocated_bytes() {
#ifdef DDPLAB_HAVE_CUDA
  if (!torch::cuda::is_available()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const auto& peak =
      stats.allocated_bytes[static_cast<size_t>(c10::cuda::CUDACachingAllocator::StatType::AGGREGATE)].peak;
  return static_cast<uint64_t>(peak);
#else
  return 0;
#endif
}

std::string human_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, kUnits[u]);
}

// The hook: c10's allocators call reportMemoryUsageToProfiler(ptr, +/-bytes, ...) for each
// allocation and free when the thread's debug info of kind PROFILER_STATE says memory profiling is
// on; DebugInfoGuard installs ours for this thread, and LibTorch carries it to its worker threads
// (ThreadLocalState), as it does for the profiler.
struct Tracker::Impl : c10::MemoryReportingInfoBase {
  explicit Impl(c10::DeviceType type) : type(type) {}
  void reportMemoryUsage(void*, int64_t alloc_size, int64_t, int64_t, c10::Device device) override {
    if (device.type() != type) return;
    events.fetch_add(1, std::memory_order_relaxed);
    const int64_t now = live.fetch_add(alloc_size, std::memory_order_relaxed) + alloc_size;
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  bool memoryProfilingEnabled() const override { return true; }
  c10::DeviceType type;
  std::atomic<int64_t> live{0}, peak{0}, events{0};
};

struct TrackerGuard {
  explicit TrackerGuard(std::shared_ptr<c10::DebugInfoBase> info)
      : guard(c10::DebugInfoKind::PROFILER_STATE, std::move(info)) {}
  c10::DebugInfoGuard guard;
};

Tracker::Tracker(bool cuda) : impl_(std::make_shared<Impl>(cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU)) {
  guard_ = std::make_unique<TrackerGuard>(impl_);
}

Tracker::~Tracker() = default;

int64_t Tracker::live_bytes() const { return impl_->live.load(); }
int64_t Tracker::peak_bytes() const { return impl_->peak.load(); }
void Tracker::reset_peak() { impl_->peak.store(impl_->live.load()); }
int64_t Tracker::events() const { return impl_->events.load(); }

}  // namespace ddplab::memory

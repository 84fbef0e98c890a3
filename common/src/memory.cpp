// RSS from the kernel; CUDA peak from the caching allocator where this LibTorch has CUDA.
#include "ddplab/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <fmt/format.h>

#include "ddplab/config.h"
#include "ddplab/torch_compat.h"
#ifdef DDPLAB_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/cuda.h>
#endif

namespace ddplab::memory {
#ifdef DDPLAB_HAVE_CUDA
namespace compat {
// The caching allocator's statistics index: StatType moved from c10::cuda::CUDACachingAllocator (1.13)
// to c10::CachingAllocator, re-exported through c10::CachingDeviceAllocator (2.x).
#if DDPLAB_TORCH_AT_LEAST(2, 0) && __has_include(<c10/core/CachingDeviceAllocator.h>)
constexpr size_t kAggregateStat = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
#else
constexpr size_t kAggregateStat = static_cast<size_t>(c10::cuda::CUDACachingAllocator::StatType::AGGREGATE);
#endif
}  // namespace compat
#endif

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
  const auto& peak = stats.allocated_bytes[compat::kAggregateStat].peak;
  return static_cast<uint64_t>(peak);
#else
  return 0;
#endif
}

int64_t bytes_of(const torch::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.numel()) * static_cast<int64_t>(tensor.element_size()) : 0;
}

int64_t bytes_of(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += bytes_of(t);
  return n;
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

// CPU: a counting allocator in front of LibTorch's CPU allocator, installed once (for the life of
// the process: tensors it handed out hold its deleter). Every tensor allocated after that is
// counted when it is made and when it is freed, on whatever thread either happens: Gloo's worker
// threads drop the last reference to a collective's tensors as often as the caller does, so a
// per-thread count (c10's profiler hook, tried first) drifts upward by every free it misses.
namespace {

struct Counts {
  std::atomic<int64_t> live{0}, peak{0}, events{0};
  void add(int64_t n) {
    events.fetch_add(1, std::memory_order_relaxed);
    const int64_t now = live.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
};

Counts& counts() {
  static Counts* c = new Counts();  // never destroyed: frees may come during static destruction
  return *c;
}

// The DataPtr it hands out has the memory itself as its context, as c10's raw_allocate (ideep's
// bfloat16 kernels allocate through it) requires; the base allocator's DataPtr and the size live
// in a table keyed by that address until the memory is freed.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) DDPLAB_ALLOCATE_CONST override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    if (data == nullptr) return inner;  // zero bytes: nothing to count, nothing to free
    counts().add(static_cast<int64_t>(n));
    {
      std::lock_guard<std::mutex> lock(held_mutex());
      held().emplace(data, Held{std::move(inner), static_cast<int64_t>(n)});
    }
    return {data, data, &CountingAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::release; }
  DDPLAB_ALLOCATOR_COPY_DATA

 private:
  struct Held {
    c10::DataPtr inner;  // frees the memory through the base allocator's deleter
    int64_t bytes = 0;
  };
  // Never destroyed, like counts(): frees may come during static destruction.
  static std::unordered_map<void*, Held>& held() {
    static auto* h = new std::unordered_map<void*, Held>();
    return *h;
  }
  static std::mutex& held_mutex() {
    static auto* m = new std::mutex();
    return *m;
  }
  static void release(void* data) {
    Held h;
    {
      std::lock_guard<std::mutex> lock(held_mutex());
      auto it = held().find(data);
      TORCH_INTERNAL_ASSERT(it != held().end(), "ddplab's counting allocator: free of memory it did not allocate");
      h = std::move(it->second);
      held().erase(it);
    }
    counts().add(-h.bytes);
  }  // h.inner frees the memory here, outside the lock
  c10::Allocator* base_;
};

void install_counting_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingAllocator* alloc = new CountingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(alloc, /*priority=*/1);  // above the default allocator's 0
  });
}

int64_t device_live(bool cuda) {
#ifdef DDPLAB_HAVE_CUDA
  if (cuda) {
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    return st.allocated_bytes[compat::kAggregateStat].current;
  }
#endif
  (void)cuda;
  return counts().live.load();
}

}  // namespace

struct Tracker::Impl {
  bool cuda = false;
  int64_t base_live = 0, base_events = 0;
};

Tracker::Tracker(bool cuda) : impl_(std::make_shared<Impl>()) {
  impl_->cuda = cuda;
  if (!cuda) install_counting_allocator();
  impl_->base_live = device_live(cuda);
  impl_->base_events = counts().events.load();
  reset_peak();
}

Tracker::~Tracker() = default;

int64_t Tracker::live_bytes() const { return device_live(impl_->cuda) - impl_->base_live; }

int64_t Tracker::peak_bytes() const {
#ifdef DDPLAB_HAVE_CUDA
  if (impl_->cuda) {
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    return st.allocated_bytes[compat::kAggregateStat].peak - impl_->base_live;
  }
#endif
  return counts().peak.load() - impl_->base_live;
}

void Tracker::reset_peak() {
#ifdef DDPLAB_HAVE_CUDA
  if (impl_->cuda) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    return;
  }
#endif
  counts().peak.store(counts().live.load());
}

int64_t Tracker::events() const { return counts().events.load() - impl_->base_events; }

}  // namespace ddplab::memory

// NVML through dlopen: the handful of entry points the sampler needs, with NVML's own types
// declared here (nvml.h is not in Debian's archive, and the ABI of these calls is stable).
#include "ddplab/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "ddplab/log.h"
#include "ddplab/timer.h"

namespace ddplab::nvml {
namespace {

using nvmlReturn_t = int;  // NVML_SUCCESS = 0
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

}  // namespace

struct Sampler::Api {
  void* handle = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlDevice_t device = nullptr;

  std::string describe(nvmlReturn_t rc) const {
    const char* s = error_string != nullptr ? error_string(rc) : nullptr;
    return s != nullptr ? fmt::format("{} (NVML error {})", s, rc) : fmt::format("NVML error {}", rc);
  }
  ~Api() {
    if (shutdown != nullptr && device != nullptr) shutdown();
    if (handle != nullptr) ::dlclose(handle);
  }
};

nlohmann::json Summary::to_json() const {
  if (!available) return {{"available", false}, {"why", why_unavailable}};
  return {{"available", true},
          {"samples", samples},
          {"gpu_median", gpu_median},
          {"memory_median", memory_median},
          {"memory_used_peak_bytes", memory_used_peak},
          {"interval_ms", interval_ms}};
}

Sampler::Sampler(int device_index, std::chrono::milliseconds interval, std::string library)
    : device_index_(device_index), interval_(interval) {
  if (library.empty()) {
    const char* env = std::getenv("DDPLAB_NVML_LIBRARY");
    library = env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
  }
  auto api = std::make_unique<Api>();
  api->handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr) {
    const char* e = ::dlerror();
    why_ = fmt::format("{} could not be loaded: {}", library, e != nullptr ? e : "unknown error");
    return;
  }
  auto sym = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(api->handle, name));
    if (fn == nullptr && why_.empty()) why_ = fmt::format("{} has no {}: not an NVML library", library, name);
  };
  sym("nvmlInit_v2", api->init);
  sym("nvmlShutdown", api->shutdown);
  sym("nvmlDeviceGetHandleByIndex_v2", api->handle_by_index);
  sym("nvmlDeviceGetUtilizationRates", api->utilization);
  sym("nvmlDeviceGetMemoryInfo", api->memory);
  sym("nvmlErrorString", api->error_string);
  if (!why_.empty()) return;
  if (const nvmlReturn_t rc = api->init(); rc != 0) {
    why_ = fmt::format("{}: nvmlInit_v2 failed: {}", library, api->describe(rc));
    api->shutdown = nullptr;  // nothing to shut down
    return;
  }
  if (const nvmlReturn_t rc = api->handle_by_index(static_cast<unsigned>(device_index), &api->device); rc != 0) {
    why_ = fmt::format("{}: no device {}: {}", library, device_index, api->describe(rc));
    api->shutdown();
    api->shutdown = nullptr;
    return;
  }
  api_ = std::move(api);
}

Sampler::~Sampler() { stop(); }

bool Sampler::read(Sample& s) {
  nvmlUtilization_t u{};
  nvmlMemory_t m{};
  nvmlReturn_t rc = api_->utilization(api_->device, &u);
  if (rc == 0) rc = api_->memory(api_->device, &m);
  if (rc != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (read_error_.empty()) {
      read_error_ = api_->describe(rc);
      log::warn("NVML: reading device {} failed: {}", device_index_, read_error_);
    }
    return false;
  }
  s.gpu_percent = u.gpu;
  s.memory_percent = u.memory;
  s.memory_used_bytes = m.used;
  return true;
}

void Sampler::loop() {
  const auto start = std::chrono::steady_clock::now();
  auto next = start;
  while (running_.load()) {
    Sample s;
    if (read(s)) {
      s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::lock_guard<std::mutex> lock(mu_);
      samples_.push_back(s);
    }
    next += interval_;
    // Sleep in short slices so that stop() returns within a few milliseconds.
    while (running_.load() && std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(next - std::chrono::steady_clock::now(),
                                                                                std::chrono::milliseconds(5)));
    }
  }
}

void Sampler::start() {
  if (!available() || running_.exchange(true)) return;
  thread_ = std::thread([this] { loop(); });
}

void Sampler::stop() {
  if (!running_.exchange(false)) return;
  if (thread_.joinable()) thread_.join();
}

std::vector<Sample> Sampler::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

Summary Sampler::summary() const {
  Summary s;
  s.available = available();
  s.why_unavailable = why_;
  s.interval_ms = static_cast<double>(interval_.count());
  std::vector<double> gpu, mem;
  for (const Sample& x : samples()) {
    gpu.push_back(x.gpu_percent);
    mem.push_back(x.memory_percent);
    s.memory_used_peak = std::max(s.memory_used_peak, x.memory_used_bytes);
  }
  s.samples = static_cast<int64_t>(gpu.size());
  if (!gpu.empty()) {
    s.gpu_median = median(gpu);  // ddplab/timer.h
    s.memory_median = median(mem);
  }
  return s;
}

}  // namespace ddplab::nvml

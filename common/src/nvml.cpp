// NVML through dlopen: the handful of entry points the sampler needs. Where NVML's header is at
// hand (a CUDA build: the toolkit's nvml.h, or PyPI's nvidia-nvml-dev) the entry points' types come
// from it, so the compiler checks every signature the sampler calls through; elsewhere (Debian's
// CPU build: nvml.h is not in Debian's archive) the same declarations are written here, with the
// layouts of NVML's ABI-stable v1 structs. The library itself is the driver's, loaded at run time.
#include "ddplab/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "ddplab/config.h"
#include "ddplab/log.h"
#include "ddplab/timer.h"

#if DDPLAB_HAVE_NVML_H_01
#define NVML_NO_UNVERSIONED_FUNC_DEFS  // name the _v2 entry points explicitly, as dlsym does
#include <nvml.h>
#endif

namespace ddplab::nvml {
namespace {

#if DDPLAB_HAVE_NVML_H_01
using Return = nvmlReturn_t;
using Device = nvmlDevice_t;
using Utilization = nvmlUtilization_t;
using Memory = nvmlMemory_t;
using InitFn = decltype(&::nvmlInit_v2);
using ShutdownFn = decltype(&::nvmlShutdown);
using HandleByIndexFn = decltype(&::nvmlDeviceGetHandleByIndex_v2);
using UtilizationFn = decltype(&::nvmlDeviceGetUtilizationRates);
using MemoryFn = decltype(&::nvmlDeviceGetMemoryInfo);
using ErrorStringFn = decltype(&::nvmlErrorString);
using DriverVersionFn = decltype(&::nvmlSystemGetDriverVersion);
using DeviceNameFn = decltype(&::nvmlDeviceGetName);
#else
enum Return { NVML_SUCCESS = 0 };
using Device = struct nvmlDevice_st*;
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using HandleByIndexFn = Return (*)(unsigned int, Device*);
using UtilizationFn = Return (*)(Device, Utilization*);
using MemoryFn = Return (*)(Device, Memory*);
using ErrorStringFn = const char* (*)(Return);
using DriverVersionFn = Return (*)(char*, unsigned int);
using DeviceNameFn = Return (*)(Device, char*, unsigned int);
#endif
constexpr unsigned kTextSize =
    96;  // >= NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE (80), NVML_DEVICE_NAME_V2_BUFFER_SIZE (96)

}  // namespace

struct Sampler::Api {
  void* handle = nullptr;
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  HandleByIndexFn handle_by_index = nullptr;
  UtilizationFn utilization = nullptr;
  MemoryFn memory = nullptr;
  ErrorStringFn error_string = nullptr;
  DriverVersionFn driver_version = nullptr;
  DeviceNameFn device_name = nullptr;
  Device device = nullptr;

  std::string describe(Return rc) const {
    const char* s = error_string != nullptr ? error_string(rc) : nullptr;
    return s != nullptr ? fmt::format("{} (NVML error {})", s, static_cast<int>(rc))
                        : fmt::format("NVML error {}", static_cast<int>(rc));
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
  sym("nvmlSystemGetDriverVersion", api->driver_version);
  sym("nvmlDeviceGetName", api->device_name);
  if (!why_.empty()) return;
  if (const Return rc = api->init(); rc != 0) {
    why_ = fmt::format("{}: nvmlInit_v2 failed: {}", library, api->describe(rc));
    api->shutdown = nullptr;  // nothing to shut down
    return;
  }
  if (const Return rc = api->handle_by_index(static_cast<unsigned>(device_index), &api->device); rc != 0) {
    why_ = fmt::format("{}: no device {}: {}", library, device_index, api->describe(rc));
    api->shutdown();
    api->shutdown = nullptr;
    return;
  }
  char text[kTextSize] = {};
  if (api->driver_version(text, kTextSize) == 0) driver_ = text;
  std::fill(text, text + kTextSize, '\0');
  if (api->device_name(api->device, text, kTextSize) == 0) device_name_ = text;
  api_ = std::move(api);
}

Sampler::~Sampler() { stop(); }

bool Sampler::read(Sample& s) {
  Utilization u{};
  Memory m{};
  Return rc = api_->utilization(api_->device, &u);
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

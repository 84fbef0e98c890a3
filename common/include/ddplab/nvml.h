// Device utilization from NVML, the library nvidia-smi reads. It is loaded at run time (dlopen)
// so that every program still starts where it is missing (any CPU-only machine) and says why, and
// it is sampled on a side thread. NVML's "GPU utilization" is the percentage of the sample
// period in which at least one kernel ran on the device — not how many SMs were busy (a single
// one-block kernel running all the time reads 100 %).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddplab::nvml {

/// One reading of one device (nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo).
struct Sample {
  double seconds = 0;           ///< since start()
  unsigned gpu_percent = 0;     ///< time a kernel ran, over NVML's last sample period
  unsigned memory_percent = 0;  ///< time the memory was read or written, likewise
  uint64_t memory_used_bytes = 0;
};

/// What a sampling run saw.
struct Summary {
  bool available = false;
  std::string why_unavailable;  ///< set when !available, e.g. "libnvidia-ml.so.1: cannot open ..."
  int64_t samples = 0;
  double gpu_median = 0;     ///< median of gpu_percent over the samples
  double memory_median = 0;  ///< median of memory_percent
  uint64_t memory_used_peak = 0;
  double interval_ms = 0;
  /// {"available", "samples", "gpu_median", ...} or {"available": false, "why": ...}.
  nlohmann::json to_json() const;
};

/// Samples one device every `interval` between start() and stop(). The library is
/// `library`, else $DDPLAB_NVML_LIBRARY, else libnvidia-ml.so.1. Construction never throws
/// for a missing or broken NVML: available() is then false and why_unavailable() says why.
class Sampler {
 public:
  explicit Sampler(int device_index, std::chrono::milliseconds interval = std::chrono::milliseconds(100),
                   std::string library = "");
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  bool available() const noexcept { return api_ != nullptr; }
  const std::string& why_unavailable() const noexcept { return why_; }
  /// The driver's version ("580.159.03") and the device's name ("NVIDIA H200"), read at
  /// construction; empty when unavailable.
  const std::string& driver_version() const noexcept { return driver_; }
  const std::string& device_name() const noexcept { return device_name_; }
  /// Starts the side thread (no-op when unavailable or running).
  void start();
  /// Stops it and keeps the samples (no-op when not running).
  void stop();
  Summary summary() const;
  std::vector<Sample> samples() const;

 private:
  struct Api;
  void loop();
  bool read(Sample& s);

  int device_index_;
  std::chrono::milliseconds interval_;
  std::string why_;
  std::string driver_, device_name_;
  std::unique_ptr<Api> api_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  mutable std::mutex mu_;
  std::vector<Sample> samples_;
  std::string read_error_;  // the first failed read, reported once
};

}  // namespace ddplab::nvml

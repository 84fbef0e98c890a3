// Thread configuration, BLAS detection through the dynamic loader, and SGEMM measurement.
#include "ddplab/system.h"

#include <dlfcn.h>
#include <link.h>
#include <malloc.h>
#include <sched.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/version.h>
#include <fmt/format.h>

#include "ddplab/error.h"
#include "ddplab/timer.h"

namespace ddplab::sys {
namespace {

template <typename Fn>
Fn find_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

int collect_objects(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') out->emplace_back(info->dlpi_name);
  return 0;
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

}  // namespace

void configure_threads(int threads) {
  if (threads < 1) throw ConfigError(fmt::format("--threads must be at least 1, got {}", threads));
  torch::set_num_threads(threads);
  if (auto set = find_symbol<void (*)(int)>("openblas_set_num_threads")) set(threads);
}

void tune_allocator() {
  // Fixed thresholds also switch off glibc's dynamic threshold, which otherwise keeps
  // unmapping blocks larger than the last one freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);                          // serve blocks up to 1 GiB from the heap
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());  // never give the heap top back
  mallopt(M_TOP_PAD, 64 << 20);                                // grow the heap in 64 MiB steps
}

BlasInfo blas_info() {
  BlasInfo info;
  std::vector<std::string> objects;
  ::dl_iterate_phdr(collect_objects, &objects);
  for (const auto& obj : objects) {
    std::error_code ec;
    const std::string real = std::filesystem::weakly_canonical(obj, ec).string();
    const std::string path = ec ? obj : real;
    const std::string file = std::filesystem::path(path).filename().string();
    if (!contains(file, "blas") && !contains(file, "mkl_") && !contains(file, "blis")) continue;
    if (contains(path, "openblas")) {
      info.vendor = "openblas";
    } else if (contains(file, "mkl")) {
      info.vendor = "mkl";
    } else if (contains(file, "blis")) {
      info.vendor = "blis";
    } else if (contains(file, "libblas") && info.vendor.empty()) {
      info.vendor = "reference";  // Debian's netlib BLAS: /usr/lib/<arch>/blas/libblas.so.3
    } else {
      continue;
    }
    info.library = path;
    if (info.vendor != "reference") break;
  }
  if (auto cfg = find_symbol<char* (*)()>("openblas_get_config")) {
    info.config = cfg();
    if (info.vendor.empty() || info.vendor == "reference") info.vendor = "openblas";
  }
  if (auto nt = find_symbol<int (*)()>("openblas_get_num_threads")) info.threads = nt();
  if (auto core = find_symbol<char* (*)()>("openblas_get_corename")) info.core = core();
  if (info.vendor.empty()) {
    // A LibTorch with BLAS linked statically (pip wheels carry MKL) shows it only in its config.
    const std::string cfg = torch_build_config();
    info.vendor = contains(cfg, "BLAS_INFO=mkl") ? "mkl" : contains(cfg, "BLAS_INFO=open") ? "openblas" : "unknown";
    info.library = "(linked into LibTorch)";
  }
  info.optimized = info.vendor == "openblas" || info.vendor == "mkl" || info.vendor == "blis";
  return info;
}

double measure_sgemm_gflops(double min_seconds) {
  const int saved = at::get_num_threads();
  configure_threads(1);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({512, 429});
  const auto w = torch::randn({400, 429});
  const auto b = torch::randn({400});
  const double flops = 2.0 * 512 * 429 * 400;
  for (int i = 0; i < 3; ++i) (void)torch::linear(x, w, b);  // warm-up
  std::vector<double> rates;
  const auto start = StepTimer::Clock::now();
  while (seconds_since(start) < min_seconds || rates.size() < 5) {
    const auto t0 = StepTimer::Clock::now();
    const auto y = torch::linear(x, w, b);
    rates.push_back(flops / seconds_since(t0) / 1e9);
    if (rates.size() > 100000) break;
  }
  configure_threads(saved);
  return median(rates);
}

torch::Device parse_device(const std::string& spec) {
  std::string s = spec;
  if (s == "auto") s = torch::cuda::is_available() ? "cuda" : "cpu";
  if (s == "cpu") return torch::kCPU;
  if (s.rfind("cuda", 0) == 0) {
    torch::Device d = torch::kCPU;
    try {
      d = torch::Device(s);
    } catch (const c10::Error&) {
      throw ConfigError(fmt::format("--device '{}' is not a device (use cpu, cuda, cuda:N or auto)", spec));
    }
    if (!torch::cuda::is_available()) {
      const CudaInfo info = cuda_info();
      if (!info.compiled) {
        throw ConfigError(fmt::format(
            "--device {}: this build of the kit has no CUDA: it was built against LibTorch {}, a CPU-only build. "
            "Build it against a CUDA LibTorch (DDPLAB_TORCH=pip ./kit build; docs/concepts/build.md) on a machine "
            "with a GPU, or run on --device cpu",
            spec, TORCH_VERSION));
      }
      throw ConfigError(fmt::format(
          "--device {}: this build has CUDA {} but the process sees no GPU ({}{}); check the driver "
          "(nvidia-smi) and CUDA_VISIBLE_DEVICES, or run on --device cpu (ddplab doctor shows what CUDA sees)",
          spec, info.toolkit, info.why_no_device.empty() ? "LibTorch found no device" : info.why_no_device,
          info.driver.empty() ? "; no CUDA driver" : fmt::format("; driver runs CUDA {}", info.driver)));
    }
    if (d.has_index() && d.index() >= static_cast<int>(torch::cuda::device_count())) {
      throw ConfigError(fmt::format("--device {}: this machine has {} CUDA device(s), cuda:0 to cuda:{}", spec,
                                    torch::cuda::device_count(), torch::cuda::device_count() - 1));
    }
    return d;
  }
  throw ConfigError(fmt::format("--device '{}' is not a device (use cpu, cuda, cuda:N or auto)", spec));
}

torch::Device device_for_rank(torch::Device device, int local_rank) {
  if (!device.is_cuda() || device.has_index()) return device;
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (local_rank < gpus) return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  // A launcher that binds each rank to its own GPUs (SLURM's --gpus-per-task, a container per GPU)
  // sets CUDA_VISIBLE_DEVICES per rank, and rank N's first GPU is then its cuda:0. Two ranks that end
  // up on one physical GPU anyway are stopped by NCCL's check (require_one_device_per_rank).
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && *visible != '\0' && gpus >= 1) {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
  }
  throw ConfigError(fmt::format(
      "--device cuda: local rank {} would use cuda:{}, but this machine has {} visible GPU(s); NCCL runs one rank "
      "per GPU, so start at most {} rank(s) per machine (or run the ranks on --device cpu over Gloo)",
      local_rank, local_rank, gpus, gpus));
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

std::string torch_build_config() { return at::show_config(); }

}  // namespace ddplab::sys

// Facts about the machine and the LibTorch build that change performance: thread settings, which
// BLAS is really loaded (Debian's reference BLAS is ~20x slower than OpenBLAS for LibTorch's
// GEMMs), the measured single-thread SGEMM rate, and run-time device selection.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace ddplab::sys {

/// Sets LibTorch's intra-op threads and, when OpenBLAS is loaded, OpenBLAS's own thread count
/// (its pthread build ignores torch::set_num_threads and would take every core otherwise).
void configure_threads(int threads);

/// Keeps freed memory in the process instead of returning it to the kernel. Each training step
/// allocates and frees tens of MB of temporaries (the embedding gradients, Adam's intermediates);
/// with glibc's defaults those blocks are mmap'ed and unmapped every step and every page faults
/// back in: measured here, a DeepFM step took 106 ms with the defaults and 25 ms after this call.
/// Idempotent; call before training.
void tune_allocator();

struct BlasInfo {
  std::string library;  ///< resolved path of the loaded BLAS shared object, "" if none found
  std::string vendor;   ///< "openblas", "mkl", "blis", "reference", or "unknown"
  std::string config;   ///< openblas_get_config() where available
  std::string core;     ///< openblas_get_corename(): the kernels OpenBLAS chose for this CPU ("Prescott", "SkylakeX")
  int threads = 0;      ///< openblas_get_num_threads() where available, else 0
  bool optimized = false;
};
/// Inspects the shared objects mapped into this process and LibTorch's build configuration.
BlasInfo blas_info();

/// Single-thread SGEMM rate in GFLOP/s through torch::linear on the shapes of DeepFM's first layer
/// (512x429 by 429x400): median over repeats for at least min_seconds. Restores the thread count.
double measure_sgemm_gflops(double min_seconds = 0.5);

/// Parses --device: "cpu", "cuda", "cuda:N" or "auto" (CUDA when available). Throws
/// ddplab::ConfigError naming the flag and the reason when CUDA is asked for and not available: a
/// kit built against a CPU-only LibTorch (and how to rebuild), or a CUDA build that sees no GPU
/// (the CUDA runtime's own reason), or an index past the devices there are.
torch::Device parse_device(const std::string& spec);

/// The device of local rank `local_rank` for a parsed --device: "cuda" without an index becomes
/// cuda:`local_rank` (NCCL runs one rank per GPU); throws ConfigError naming the rank when this
/// machine has fewer GPUs than that. CPU and indexed devices are returned as given.
torch::Device device_for_rank(torch::Device device, int local_rank);

/// What this build and this machine give CUDA (ddplab doctor): compiled in or not, the CUDA
/// runtime, driver and devices the process sees, and NCCL as compiled against and as loaded.
struct CudaInfo {
  struct Device {
    std::string name;
    int major = 0, minor = 0;  ///< compute capability
    int64_t memory_bytes = 0;
  };
  bool compiled = false;        ///< this build has CUDA (a CUDA LibTorch)
  std::string toolkit;          ///< the CUDA the kit compiled against ("13.2"), "" when not compiled
  std::string runtime;          ///< cudaRuntimeGetVersion ("13.2")
  std::string driver;           ///< cudaDriverGetVersion: the newest CUDA the driver runs, "" without one
  std::vector<Device> devices;  ///< what cudaGetDeviceCount and cudaGetDeviceProperties report
  std::string why_no_device;    ///< the runtime's reason when devices is empty ("no CUDA-capable device ...")
  std::string nccl_compiled;    ///< nccl.h's version the kit's ProcessGroupNCCL was compiled with, "" without NCCL
  std::string nccl_loaded;      ///< ncclGetVersion of the libnccl this process loaded, "" when none is loaded
};
CudaInfo cuda_info();

/// Cores this process may run on (sched_getaffinity), at least 1.
int usable_cores();

/// LibTorch's own build description (torch::show_config()).
std::string torch_build_config();

}  // namespace ddplab::sys

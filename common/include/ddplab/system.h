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
  int threads = 0;      ///< openblas_get_num_threads() where available, else 0
  bool optimized = false;
};
/// Inspects the shared objects mapped into this process and LibTorch's build configuration.
BlasInfo blas_info();

/// Single-thread SGEMM rate in GFLOP/s through torch::linear on the shapes of DeepFM's first layer
/// (512x429 by 429x400): median over repeats for at least min_seconds. Restores the thread count.
double measure_sgemm_gflops(double min_seconds = 0.5);

/// Parses --device: "cpu", "cuda", "cuda:N" or "auto" (CUDA when available). Throws
/// ddplab::ConfigError naming the flag when CUDA is asked for and not available.
torch::Device parse_device(const std::string& spec);

/// Cores this process may run on (sched_getaffinity), at least 1.
int usable_cores();

/// LibTorch's own build description (torch::show_config()).
std::string torch_build_config();

}  // namespace ddplab::sys

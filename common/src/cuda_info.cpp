// What CUDA this build and this machine give (system.h: CudaInfo, parse_device's reasons). The
// CUDA runtime is called directly — the kit links it through LibTorch's CUDA target — and NCCL's
// version is read from the libnccl that libtorch_cuda loaded (the kit itself does not link NCCL).
// Compiled in every build; without CUDA it only says so.
#include <dlfcn.h>

#include <string>

#include <fmt/format.h>

#include "ddplab/config.h"
#include "ddplab/system.h"

#ifdef DDPLAB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef DDPLAB_HAVE_NCCL
#include <nccl.h>
#endif

namespace ddplab::sys {
namespace {

/// 13020 -> "13.2" (CUDA's and NCCL's version codes; NCCL >= 2.9: major*10000 + minor*100 + patch).
[[maybe_unused]] std::string cuda_version(int code) { return fmt::format("{}.{}", code / 1000, (code % 1000) / 10); }
[[maybe_unused]] std::string nccl_version(int code) {
  return code >= 20900 ? fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
                       : fmt::format("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100);
}

}  // namespace

CudaInfo cuda_info() {
  CudaInfo info;
#ifdef DDPLAB_HAVE_CUDA
  info.compiled = true;
  info.toolkit = cuda_version(CUDART_VERSION);
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) info.runtime = cuda_version(v);
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) info.driver = cuda_version(v);
  int n = 0;
  if (const cudaError_t rc = cudaGetDeviceCount(&n); rc != cudaSuccess) {
    info.why_no_device = fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(rc), cudaGetErrorName(rc));
    (void)cudaGetLastError();  // leave no sticky error for LibTorch
    n = 0;
  } else if (n == 0) {
    info.why_no_device = "cudaGetDeviceCount: 0 devices";
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    info.devices.push_back({p.name, p.major, p.minor, static_cast<int64_t>(p.totalGlobalMem)});
  }
#endif
#ifdef DDPLAB_HAVE_NCCL
  info.nccl_compiled = nccl_version(NCCL_VERSION_CODE);
  using GetVersion = ncclResult_t (*)(int*);
  if (auto* get = reinterpret_cast<GetVersion>(::dlsym(RTLD_DEFAULT, "ncclGetVersion")); get != nullptr) {
    int code = 0;
    if (get(&code) == ncclSuccess) info.nccl_loaded = nccl_version(code);
  }
#endif
  return info;
}

}  // namespace ddplab::sys

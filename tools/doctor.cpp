// `ddplab doctor`: what this machine and this LibTorch build give the labs: versions and build
// flags, which BLAS is really loaded and its single-thread SGEMM rate, cores, CUDA, NCCL, Gloo.
#include <iostream>
#include <memory>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "commands.h"
#include "ddplab/config.h"
#include "ddplab/cxx_runtime.h"
#include "ddplab/memory.h"
#include "ddplab/nvml.h"
#include "ddplab/openblas_kernels.h"
#include "ddplab/report.h"
#include "ddplab/system.h"

namespace ddplab::tools {
namespace {

struct DoctorOptions {
  bool json = false;
  bool strict = false;
  bool openblas_coretype = false;
  double sgemm_seconds = 0.5;
  /// Below this single-thread SGEMM rate a BLAS is called out as unoptimised (the reference BLAS
  /// gives ~4.5 GFLOP/s here, OpenBLAS ~150).
  double min_sgemm_gflops = 20.0;
};

/// "KEY=value" from LibTorch's build description (values end at a comma or a line end), or "".
std::string setting(const std::string& text, const std::string& key) {
  const auto pos = text.find(key + "=");
  if (pos == std::string::npos) return "";
  const auto end = text.find_first_of(",\n", pos);
  return text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

/// "compiled, no device (...)", "compiled, 1 device(s): NVIDIA H200 (sm_90, 139.8 GiB)", "not compiled ...".
std::string cuda_line(const sys::CudaInfo& c) {
  if (!c.compiled) return "not compiled (this LibTorch is a CPU-only build; a CUDA build: DDPLAB_TORCH=pip)";
  std::string versions = fmt::format("CUDA {} toolkit, runtime {}, {}", c.toolkit, c.runtime.empty() ? "?" : c.runtime,
                                     c.driver.empty() ? "no driver" : "driver runs CUDA " + c.driver);
  if (c.devices.empty()) return fmt::format("compiled, no device ({}; {})", versions, c.why_no_device);
  std::vector<std::string> names;
  for (const auto& d : c.devices) {
    names.push_back(fmt::format("{} (sm_{}{}, {})", d.name, d.major, d.minor,
                                memory::human_bytes(static_cast<uint64_t>(d.memory_bytes))));
  }
  return fmt::format("compiled, {} device(s): {}; {}; cuDNN {}", c.devices.size(), fmt::join(names, ", "), versions,
                     torch::cuda::cudnn_is_available() ? "yes" : "no");
}

int run_doctor(const DoctorOptions& o) {
  const std::string better_core = sys::better_openblas_coretype();
  if (o.openblas_coretype) {  // for scripts: ./kit exports it before running the tests
    if (!better_core.empty()) std::cout << better_core << "\n";
    return 0;
  }
  const auto blas = sys::blas_info();
  const double sgemm = sys::measure_sgemm_gflops(o.sgemm_seconds);
  const bool cuda = torch::cuda::is_available();
  const bool blas_ok = blas.optimized && sgemm >= o.min_sgemm_gflops;
  const std::string cfg = sys::torch_build_config();
  const sys::CudaInfo ci = sys::cuda_info();
  // NVML (the driver's library), read the way a lab's utilization sampler reads it.
  std::unique_ptr<nvml::Sampler> nv;
  if (ci.compiled) nv = std::make_unique<nvml::Sampler>(0);
  // The kit compiles ProcessGroupNCCL with nccl.h's layout: the libnccl loaded must match it.
  const bool nccl_ok = ci.nccl_compiled.empty() || ci.nccl_loaded.empty() || ci.nccl_loaded == ci.nccl_compiled;
  // A torch wheel's exported std::filesystem must not stand in for the C++ runtime's (Flags.cmake).
  const std::string fs_lib = sys::std_filesystem_library();
  const bool fs_ok = fs_lib.empty() || fs_lib.find("libstdc++") != std::string::npos;
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : ci.devices) {
    devices.push_back(
        {{"name", d.name}, {"capability", fmt::format("{}.{}", d.major, d.minor)}, {"memory_bytes", d.memory_bytes}});
  }

  nlohmann::json j =
      {{"ddplab", {{"version", DDPLAB_VERSION}, {"build_type", DDPLAB_BUILD_TYPE}, {"lab_tree", DDPLAB_LAB_TREE}}},
       {"torch",
        {{"version", TORCH_VERSION}, {"cxx11_abi", _GLIBCXX_USE_CXX11_ABI}, {"parallel", at::get_parallel_info()}}},
       {"blas",
        {{"vendor", blas.vendor},
         {"library", blas.library},
         {"config", blas.config},
         {"core", blas.core},
         {"better_core", better_core},
         {"optimized", blas.optimized},
         {"sgemm_gflops_1thread", sgemm}}},
       {"cpu", {{"usable_cores", sys::usable_cores()}, {"intra_op_threads", at::get_num_threads()}}},
       {"cuda",
        {{"compiled", ci.compiled},
         {"available", cuda},
         {"toolkit", ci.toolkit},
         {"runtime", ci.runtime},
         {"driver", ci.driver},
         {"devices", cuda ? torch::cuda::device_count() : 0},
         {"device_list", devices},
         {"why_no_device", ci.why_no_device},
         {"cudnn", cuda && torch::cuda::cudnn_is_available()}}},
       {"nvml", nv == nullptr ? nlohmann::json{{"available", false}, {"why", "no CUDA in this build"}}
                              : nlohmann::json{{"available", nv->available()},
                                               {"why", nv->why_unavailable()},
                                               {"driver", nv->driver_version()},
                                               {"device", nv->device_name()}}},
       {"c10d",
        {{"gloo", DDPLAB_HAVE_GLOO_01 == 1},
         {"nccl", DDPLAB_HAVE_NCCL_01 == 1},
         {"nccl_compiled", ci.nccl_compiled},
         {"nccl_loaded", ci.nccl_loaded}}},
       {"cxx_runtime", {{"std_filesystem_from", fs_lib}}},
       {"verdict", {{"blas_ok", blas_ok}, {"nccl_ok", nccl_ok}, {"std_filesystem_ok", fs_ok}}}};
  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("ddplab {} ({} build, lab tree: {})\n", DDPLAB_VERSION, DDPLAB_BUILD_TYPE, DDPLAB_LAB_TREE);
    fmt::print("LibTorch      {} (C++11 ABI {}, built as C++{})\n", TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI,
               __cplusplus / 100 % 100);
    std::vector<std::string> settings;
    for (const char* key : {"BLAS_INFO", "LAPACK_INFO", "USE_MKLDNN", "USE_OPENMP", "USE_NCCL", "USE_MPI"}) {
      if (auto kv = setting(cfg, key); !kv.empty()) settings.push_back(kv);
    }
    if (!settings.empty()) fmt::print("              {}\n", fmt::join(settings, ", "));
    fmt::print("BLAS          {} ({})\n", blas.vendor, blas.library.empty() ? "not found" : blas.library);
    if (!blas.config.empty()) fmt::print("              {}\n", blas.config);
    if (!better_core.empty()) {
      fmt::print(
          "              OpenBLAS chose its {} kernels, older than this CPU supports (it did not recognise the\n"
          "              CPU's model, as under many hypervisors). ddplab launch, the grader, the benchmarks and\n"
          "              ./kit set OPENBLAS_CORETYPE={} for the programs they start, and a lab run directly\n"
          "              restarts itself with it; for other programs (your own, a Python torch):\n"
          "              export OPENBLAS_CORETYPE={}\n",
          blas.core, better_core, better_core);
    }
    fmt::print("SGEMM         {:.1f} GFLOP/s on one thread (512x429 by 429x400, torch::linear)  {}\n", sgemm,
               blas_ok ? "OK" : "SLOW");
    if (!blas_ok) {
      fmt::print(
          "              LibTorch is not using an optimized BLAS: expect training ~20x slower. On Debian run\n"
          "              sudo apt-get install libopenblas0-openmp && sudo update-alternatives --set \\\n"
          "                libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3\n"
          "              (tools/setup-debian.sh does this).\n");
    }
    fmt::print("CPU           {} usable cores; LibTorch intra-op threads {}\n", sys::usable_cores(),
               at::get_num_threads());
    fmt::print("CUDA          {}\n", cuda_line(ci));
    if (nv != nullptr) {
      fmt::print("NVML          {}\n",
                 nv->available() ? fmt::format("driver {}, device 0: {}", nv->driver_version(), nv->device_name())
                                 : "not loaded: " + nv->why_unavailable());
    }
    std::string nccl = "no (not built)";
    if (DDPLAB_HAVE_NCCL_01) {
      nccl = fmt::format("yes, compiled against nccl.h {}; {}", ci.nccl_compiled,
                         ci.nccl_loaded.empty() ? "no libnccl loaded"
                                                : fmt::format("libnccl {} loaded{}", ci.nccl_loaded,
                                                              nccl_ok ? ""
                                                                      : " — MISMATCH: ProcessGroupNCCL's layout "
                                                                        "follows nccl.h; rebuild against the "
                                                                        "NCCL headers of the NCCL torch loads"));
    }
    fmt::print("c10d          Gloo {}, NCCL {}\n", DDPLAB_HAVE_GLOO_01 ? "yes" : "no (not built)", nccl);
    fmt::print("C++ runtime   std::filesystem from {}{}\n", fs_lib.empty() ? "?" : fs_lib,
               fs_ok ? "" : " — NOT the C++ runtime: a torch wheel's copy, which can crash (reconfigure the build)");
  }
  return (o.strict && (!blas_ok || !nccl_ok || !fs_ok)) ? 1 : 0;
}

}  // namespace

void setup_doctor(CLI::App& app) {
  auto opts = std::make_shared<DoctorOptions>();
  auto* sub = app.add_subcommand("doctor", "Check the LibTorch build, the BLAS it loads, cores, CUDA, NCCL and Gloo");
  sub->add_flag("--json", opts->json, "Print the findings as JSON");
  sub->add_flag("--strict", opts->strict,
                "Exit 1 when the BLAS is not an optimized one, the NCCL loaded is not the one compiled against, or "
                "std::filesystem is not the C++ runtime's");
  sub->add_flag("--openblas-coretype", opts->openblas_coretype,
                "Print only the OPENBLAS_CORETYPE this CPU should use when OpenBLAS chose older kernels (nothing "
                "when it chose well or is not loaded)");
  sub->add_option("--sgemm-seconds", opts->sgemm_seconds, "Time spent measuring SGEMM")->capture_default_str();
  sub->add_option("--min-sgemm-gflops", opts->min_sgemm_gflops, "Single-thread SGEMM rate below which BLAS is SLOW")
      ->capture_default_str();
  sub->callback([opts] { exit_status() = run_doctor(*opts); });
}

}  // namespace ddplab::tools

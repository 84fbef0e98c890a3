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
#include "ddplab/report.h"
#include "ddplab/system.h"

namespace ddplab::tools {
namespace {

struct DoctorOptions {
  bool json = false;
  bool strict = false;
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

int run_doctor(const DoctorOptions& o) {
  const auto blas = sys::blas_info();
  const double sgemm = sys::measure_sgemm_gflops(o.sgemm_seconds);
  const bool cuda = torch::cuda::is_available();
  const bool blas_ok = blas.optimized && sgemm >= o.min_sgemm_gflops;
  const std::string cfg = sys::torch_build_config();

  nlohmann::json j =
      {{"ddplab", {{"version", DDPLAB_VERSION}, {"build_type", DDPLAB_BUILD_TYPE}, {"lab_tree", DDPLAB_LAB_TREE}}},
       {"torch",
        {{"version", TORCH_VERSION}, {"cxx11_abi", _GLIBCXX_USE_CXX11_ABI}, {"parallel", at::get_parallel_info()}}},
       {"blas",
        {{"vendor", blas.vendor},
         {"library", blas.library},
         {"config", blas.config},
         {"optimized", blas.optimized},
         {"sgemm_gflops_1thread", sgemm}}},
       {"cpu", {{"usable_cores", sys::usable_cores()}, {"intra_op_threads", at::get_num_threads()}}},
       {"cuda",
        {{"available", cuda},
         {"devices", cuda ? torch::cuda::device_count() : 0},
         {"cudnn", cuda && torch::cuda::cudnn_is_available()}}},
       {"c10d", {{"gloo", DDPLAB_HAVE_GLOO_01 == 1}, {"nccl", DDPLAB_HAVE_NCCL_01 == 1}}},
       {"verdict", {{"blas_ok", blas_ok}}}};
  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("ddplab {} ({} build, lab tree: {})\n", DDPLAB_VERSION, DDPLAB_BUILD_TYPE, DDPLAB_LAB_TREE);
    fmt::print("LibTorch      {} (C++11 ABI {})\n", TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI);
    std::vector<std::string> settings;
    for (const char* key : {"BLAS_INFO", "LAPACK_INFO", "USE_MKLDNN", "USE_OPENMP", "USE_NCCL", "USE_MPI"}) {
      if (auto kv = setting(cfg, key); !kv.empty()) settings.push_back(kv);
    }
    if (!settings.empty()) fmt::print("              {}\n", fmt::join(settings, ", "));
    fmt::print("BLAS          {} ({})\n", blas.vendor, blas.library.empty() ? "not found" : blas.library);
    if (!blas.config.empty()) fmt::print("              {}\n", blas.config);
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
    fmt::print("CUDA          {}\n", cuda ? fmt::format("{} device(s), cuDNN {}", torch::cuda::device_count(),
                                                        torch::cuda::cudnn_is_available() ? "yes" : "no")
                                          : "not available");
    fmt::print("c10d          Gloo {}, NCCL {}\n", DDPLAB_HAVE_GLOO_01 ? "yes" : "no (not built)",
               DDPLAB_HAVE_NCCL_01 ? "yes" : "no (not built)");
  }
  return (o.strict && !blas_ok) ? 1 : 0;
}

}  // namespace

void setup_doctor(CLI::App& app) {
  auto opts = std::make_shared<DoctorOptions>();
  auto* sub = app.add_subcommand("doctor", "Check the LibTorch build, the BLAS it loads, cores, CUDA, NCCL and Gloo");
  sub->add_flag("--json", opts->json, "Print the findings as JSON");
  sub->add_flag("--strict", opts->strict, "Exit 1 when the BLAS is not an optimized one");
  sub->add_option("--sgemm-seconds", opts->sgemm_seconds, "Time spent measuring SGEMM")->capture_default_str();
  sub->add_option("--min-sgemm-gflops", opts->min_sgemm_gflops, "Single-thread SGEMM rate below which BLAS is SLOW")
      ->capture_default_str();
  sub->callback([opts] { exit_status() = run_doctor(*opts); });
}

}  // namespace ddplab::tools

// Shared lab flags: parsing, environment fallbacks, validation messages, derived values.
#include "ddplab/options.h"

#include <cstdlib>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ddplab/config.h"
#include "ddplab/error.h"
#include "ddplab/openblas_kernels.h"
#include "ddplab/system.h"

namespace {

ddplab::LabOptions parse(std::vector<std::string> args) {
  CLI::App app;
  ddplab::LabOptions o;
  ddplab::add_lab_options(app, o);
  std::reverse(args.begin(), args.end());
  app.parse(args);
  return o;
}

TEST(LabOptions, DefaultsFollowTheStandardRun) {
  const auto o = parse({});
  EXPECT_EQ(o.batch, 512);
  EXPECT_EQ(o.threads, 1);
  EXPECT_DOUBLE_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.device, "cpu");
  EXPECT_NO_THROW(ddplab::validate(o));
}

TEST(LabOptions, FlagsAndEnvironmentFallback) {
  ::setenv("DDPLAB_DATA", "/tmp/from-env", 1);
  ::setenv("DDPLAB_THREADS", "2", 1);
  auto o = parse({"--batch", "256", "--no-lr-scaling"});
  EXPECT_EQ(o.data, "/tmp/from-env");
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.batch, 256);
  EXPECT_FALSE(o.lr_scaling);
  o = parse({"--threads", "4"});  // the flag wins over the environment
  EXPECT_EQ(o.threads, 4);
  ::unsetenv("DDPLAB_DATA");
  ::unsetenv("DDPLAB_THREADS");
}

TEST(LabOptions, LinearLrScalingAndReportPath) {
  ddplab::LabOptions o;
  EXPECT_DOUBLE_EQ(o.effective_lr(2048), 4e-3);
  o.lr_scaling = false;
  EXPECT_DOUBLE_EQ(o.effective_lr(2048), 1e-3);
  EXPECT_EQ(o.report_path("lab01", 0), "runs/lab01/rank0.json");
  o.report = "out/r{rank}.json";
  EXPECT_EQ(o.report_path("lab01", 3), "out/r3.json");
}

TEST(LabOptions, ValidationNamesFlagAndValue) {
  ddplab::LabOptions o;
  o.batch = 0;
  try {
    ddplab::validate(o);
    FAIL();
  } catch (const ddplab::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--batch 0"), std::string::npos) << e.what();
  }
  o = {};
  o.log_level = "loud";
  EXPECT_THROW(ddplab::validate(o), ddplab::ConfigError);
}

TEST(ParseDevice, CpuAutoAndBadNames) {
  EXPECT_TRUE(ddplab::sys::parse_device("cpu").is_cpu());
  if (!torch::cuda::is_available()) {
    EXPECT_TRUE(ddplab::sys::parse_device("auto").is_cpu());
    // Why CUDA cannot be had, by build: a CPU-only LibTorch says to rebuild; a CUDA build on a
    // machine without a GPU gives the CUDA runtime's own reason.
    const auto info = ddplab::sys::cuda_info();
    EXPECT_EQ(info.compiled, DDPLAB_HAVE_CUDA_01 == 1);
    for (const char* spec : {"cuda", "cuda:1"}) {
      try {
        ddplab::sys::parse_device(spec);
        FAIL() << spec;
      } catch (const ddplab::ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(std::string("--device ") + spec + ":"), std::string::npos) << what;
        if (info.compiled) {
          EXPECT_NE(what.find("sees no GPU (cudaGetDeviceCount: "), std::string::npos) << what;
        } else {
          EXPECT_NE(what.find("this build of the kit has no CUDA"), std::string::npos) << what;
          EXPECT_NE(what.find("DDPLAB_TORCH=pip ./kit build"), std::string::npos) << what;
        }
      }
    }
  }
  EXPECT_THROW(ddplab::sys::parse_device("tpu"), ddplab::ConfigError);
  EXPECT_THROW(ddplab::sys::parse_device("cuda:x"), ddplab::ConfigError);
}

TEST(ParseDevice, ARankPastTheMachinesGpusIsNamed) {
  ::unsetenv("CUDA_VISIBLE_DEVICES");  // no per-rank binding: a rank past the GPUs is an error
  EXPECT_TRUE(ddplab::sys::device_for_rank(torch::kCPU, 3).is_cpu());
  EXPECT_EQ(ddplab::sys::device_for_rank(torch::Device(torch::kCUDA, 0), 3).index(), 0);  // given: kept
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  try {
    ddplab::sys::device_for_rank(torch::Device(torch::kCUDA), gpus);
    FAIL() << "local rank " << gpus << " on " << gpus << " GPU(s)";
  } catch (const ddplab::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(fmt::format("local rank {} would use cuda:{}, but this machine has {} visible GPU(s)", gpus,
                                    gpus, gpus)),
              std::string::npos)
        << what;
  }
}

TEST(CudaInfo, SaysWhatWasCompiledAndWhatIsLoaded) {
  const auto info = ddplab::sys::cuda_info();
  if (!info.compiled) {
    EXPECT_TRUE(info.toolkit.empty() && info.devices.empty() && info.nccl_compiled.empty());
    return;
  }
  EXPECT_FALSE(info.toolkit.empty());
  EXPECT_FALSE(info.runtime.empty()) << "the CUDA runtime answers without a driver";
  EXPECT_EQ(info.devices.empty(), !info.why_no_device.empty());
  EXPECT_EQ(static_cast<int>(info.devices.size()), static_cast<int>(torch::cuda::device_count()));
#if DDPLAB_HAVE_NCCL_01
  // The kit allocates ProcessGroupNCCL with nccl.h's layout: the libnccl libtorch_cuda loaded must be
  // the version the kit compiled against (pip: the nvidia-nccl wheel's header and library).
  EXPECT_FALSE(info.nccl_compiled.empty());
  EXPECT_EQ(info.nccl_loaded, info.nccl_compiled);
#endif
}

TEST(System, BlasIsDetectedAndThreadsConfigurable) {
  const auto info = ddplab::sys::blas_info();
  EXPECT_FALSE(info.vendor.empty());
  ddplab::sys::configure_threads(1);
  EXPECT_EQ(torch::get_num_threads(), 1);
  EXPECT_THROW(ddplab::sys::configure_threads(0), ddplab::ConfigError);
  EXPECT_GE(ddplab::sys::usable_cores(), 1);
}

// OpenBLAS's fallback kernels on a CPU it did not recognise are named with the best ones the CPU's
// flags allow; a core it chose well, or a CPU without AVX, gets no advice.
TEST(System, OpenBlasCoreTypeIsAdvisedOnlyWhenOpenBlasChoseOlderKernels) {
  using ddplab::sys::better_openblas_coretype;
  const std::string avx512 = " fpu sse2 avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl";
  EXPECT_EQ(better_openblas_coretype("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(better_openblas_coretype("prescott", avx512), "SkylakeX");
  EXPECT_EQ(better_openblas_coretype("Nehalem", " sse2 avx avx2 fma"), "Haswell");
  EXPECT_EQ(better_openblas_coretype("Core2", " sse2 avx"), "Sandybridge");
  // avx512f alone (no bw/vl: Knights Landing) is not enough for the SkylakeX kernels.
  EXPECT_EQ(better_openblas_coretype("Prescott", " avx avx2 fma avx512f avx512cd"), "Haswell");
  EXPECT_EQ(better_openblas_coretype("Prescott", " sse2 sse3"), "");
  EXPECT_EQ(better_openblas_coretype("SkylakeX", avx512), "");
  EXPECT_EQ(better_openblas_coretype("Haswell", avx512), "");
  EXPECT_EQ(better_openblas_coretype("Zen", " avx avx2 fma"), "");
  // A flag that only starts like one asked for does not count.
  EXPECT_EQ(better_openblas_coretype("Prescott", " avx avx2x fmax"), "Sandybridge");
}

}  // namespace

// The NVML sampler against a stand-in library (fake_nvml, built next to this test) and against
// libraries that are missing or are not NVML: a CPU-only machine must run, and say why.
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "ddplab/nvml.h"

namespace {

using ddplab::nvml::Sampler;
using namespace std::chrono_literals;

TEST(Nvml, AMissingLibraryIsUnavailableAndSaysWhy) {
  Sampler s(0, 10ms, "/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(s.available());
  EXPECT_NE(s.why_unavailable().find("/nonexistent/libnvidia-ml.so.1 could not be loaded"), std::string::npos)
      << s.why_unavailable();
  s.start();  // no-ops
  s.stop();
  const auto sum = s.summary();
  EXPECT_FALSE(sum.available);
  EXPECT_EQ(sum.samples, 0);
  EXPECT_EQ(sum.to_json().at("available"), false);
  EXPECT_EQ(sum.to_json().at("why"), s.why_unavailable());
}

TEST(Nvml, ALibraryThatIsNotNvmlIsUnavailable) {
  Sampler s(0, 10ms, "libm.so.6");
  EXPECT_FALSE(s.available());
  EXPECT_NE(s.why_unavailable().find("has no nvmlInit_v2: not an NVML library"), std::string::npos)
      << s.why_unavailable();
}

TEST(Nvml, SamplesTheFakeDeviceOnASideThread) {
  ::setenv("FAKE_NVML_GPU", "20,80,80", 1);
  ::setenv("FAKE_NVML_MEM_MB", "3072", 1);
  Sampler s(0, 5ms, DDPLAB_FAKE_NVML);
  ASSERT_TRUE(s.available()) << s.why_unavailable();
  EXPECT_EQ(s.driver_version(), "999.1.2-fake");  // what doctor prints
  EXPECT_EQ(s.device_name(), "Fake GPU 0");
  s.start();
  std::this_thread::sleep_for(150ms);
  s.stop();
  const auto n = s.samples().size();
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(s.samples().size(), n) << "no samples after stop()";
  const auto sum = s.summary();
  ASSERT_GE(sum.samples, 6) << "150 ms at 5 ms";
  // The readings cycle 20, 80, 80: the median is 80 for any run of at least three samples.
  EXPECT_DOUBLE_EQ(sum.gpu_median, 80);
  EXPECT_DOUBLE_EQ(sum.memory_median, 40);
  EXPECT_EQ(sum.memory_used_peak, 3072ull << 20);
  const auto j = sum.to_json();
  EXPECT_EQ(j.at("available"), true);
  EXPECT_EQ(j.at("samples"), sum.samples);
  for (size_t i = 1; i < s.samples().size(); ++i) EXPECT_GT(s.samples()[i].seconds, s.samples()[i - 1].seconds);
  ::unsetenv("FAKE_NVML_GPU");
  ::unsetenv("FAKE_NVML_MEM_MB");
}

TEST(Nvml, AFailedInitAndAMissingDeviceAreReported) {
  ::setenv("FAKE_NVML_INIT_FAILS", "1", 1);
  {
    Sampler s(0, 5ms, DDPLAB_FAKE_NVML);
    EXPECT_FALSE(s.available());
    EXPECT_NE(s.why_unavailable().find("nvmlInit_v2 failed: Unknown Error (NVML error 999)"), std::string::npos)
        << s.why_unavailable();
  }
  ::unsetenv("FAKE_NVML_INIT_FAILS");
  Sampler s(3, 5ms, DDPLAB_FAKE_NVML);
  EXPECT_FALSE(s.available());
  EXPECT_NE(s.why_unavailable().find("no device 3: Invalid Argument"), std::string::npos) << s.why_unavailable();
}

TEST(Nvml, TheLibraryComesFromTheEnvironmentWhenNotGiven) {
  ::setenv("DDPLAB_NVML_LIBRARY", DDPLAB_FAKE_NVML, 1);
  Sampler s(0, 5ms);
  EXPECT_TRUE(s.available()) << s.why_unavailable();
  ::unsetenv("DDPLAB_NVML_LIBRARY");
}

}  // namespace

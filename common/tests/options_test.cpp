// Shared lab flags: parsing, environment fallbacks, validation messages, derived values.
#include "ddplab/options.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "ddplab/error.h"
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
    try {
      ddplab::sys::parse_device("cuda");
      FAIL();
    } catch (const ddplab::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos);
    }
  }
  EXPECT_THROW(ddplab::sys::parse_device("tpu"), ddplab::ConfigError);
}

TEST(System, BlasIsDetectedAndThreadsConfigurable) {
  const auto info = ddplab::sys::blas_info();
  EXPECT_FALSE(info.vendor.empty());
  ddplab::sys::configure_threads(1);
  EXPECT_EQ(torch::get_num_threads(), 1);
  EXPECT_THROW(ddplab::sys::configure_threads(0), ddplab::ConfigError);
  EXPECT_GE(ddplab::sys::usable_cores(), 1);
}

}  // namespace

// A lab's own flags (lab.h, LabFlags): the environment fallback each gets, the names it derives,
// and the values recorded for the run report.
#include <algorithm>
#include <cstdlib>

#include <gtest/gtest.h>

#include "ddplab/lab.h"

namespace {

using ddplab::LabFlags;

/// Sets an environment variable for the lifetime of the object.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

int parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes them in reverse order
  app.parse(args);
  return 0;
}

TEST(LabFlags, DerivesTheEnvironmentNameAndTheConfigKeyFromTheLongName) {
  EXPECT_EQ(LabFlags::env_name("--no-shuffle"), "DDPLAB_NO_SHUFFLE");
  EXPECT_EQ(LabFlags::config_key("--no-shuffle"), "no_shuffle");
  EXPECT_EQ(LabFlags::env_name("--shuffle,!--no-shuffle"), "DDPLAB_SHUFFLE");
  EXPECT_EQ(LabFlags::config_key("--sync"), "sync");
}

TEST(LabFlags, RecordsEveryValueUnderItsKey) {
  CLI::App app;
  LabFlags f(app);
  std::string shard = "strided";
  int64_t accum = 1;
  bool stratify = false, shuffle = true;
  f.option("--shard", shard, "");
  f.option("--accum", accum, "");
  f.flag("--stratify", stratify, "");
  f.flag("--shuffle,!--no-shuffle", shuffle, "");
  parse(app, {"--shard", "contiguous", "--accum", "4", "--stratify", "--no-shuffle"});
  EXPECT_EQ(f.values(),
            (nlohmann::json{{"shard", "contiguous"}, {"accum", 4}, {"stratify", true}, {"shuffle", false}}));
}

TEST(LabFlags, DefaultsAreRecordedWhenAFlagIsNotGiven) {
  CLI::App app;
  LabFlags f(app);
  std::string sync = "bucketed";
  f.option("--sync", sync, "");
  parse(app, {});
  EXPECT_EQ(f.values(), (nlohmann::json{{"sync", "bucketed"}}));
}

TEST(LabFlags, TheEnvironmentIsTheFallbackAndTheCommandLineWins) {
  const ScopedEnv a("DDPLAB_SHARD", "contiguous");
  const ScopedEnv b("DDPLAB_SHUFFLE", "0");
  const ScopedEnv c("DDPLAB_STRATIFY", "1");
  {
    CLI::App app;
    LabFlags f(app);
    std::string shard = "strided";
    bool shuffle = true, stratify = false;
    f.option("--shard", shard, "");
    f.flag("--shuffle,!--no-shuffle", shuffle, "");
    f.flag("--stratify", stratify, "");
    parse(app, {});
    EXPECT_EQ(shard, "contiguous");
    EXPECT_FALSE(shuffle);
    EXPECT_TRUE(stratify);
  }
  {
    CLI::App app;
    LabFlags f(app);
    std::string shard = "strided";
    f.option("--shard", shard, "");
    parse(app, {"--shard", "strided"});
    EXPECT_EQ(shard, "strided");
  }
}

TEST(LabFlags, AValidatorStillRejectsABadValue) {
  CLI::App app;
  LabFlags f(app);
  std::string order = "natural";
  f.option("--order", order, "")->check(CLI::IsMember({"natural", "label-sorted"}));
  EXPECT_THROW(parse(app, {"--order", "sorted"}), CLI::ValidationError);
}

}  // namespace

// The lab platform's pieces that need no data set (lab.h): probes run once each in declaration
// order; a stub marks its exercise missing and is recorded; another error is only a warning, the
// exercise counts as present, and the probes after it still run; a probe that crashes or hangs is
// skipped.
#include "ddplab/lab.h"

#include <chrono>
#include <csignal>
#include <thread>

#include <gtest/gtest.h>

#include "ddplab/dist/loopback.h"

namespace {

TEST(Probes, AStubMarksItsExerciseMissingAndAnErrorStaysItsProbes) {
  ddplab::LabProgram program;
  std::vector<std::string> ran;
  program.probe("04.1", "assign_buckets", [&](ddplab::ProbeContext& ctx) {
    ran.push_back("04.1a");
    EXPECT_EQ(ctx.comm.size(), 1);  // a world of one
    torch::Tensor t = torch::ones({2});
    ctx.comm.allreduce(t);
  });
  program.probe("04.1", "BucketedSync", [&](ddplab::ProbeContext&) {
    ran.push_back("04.1b");
    throw ddplab::NotImplemented("04.1", "BucketedSync");
  });
  program.probe("04.2", "OverlapSync", [&](ddplab::ProbeContext&) {
    ran.push_back("04.2");
    throw std::runtime_error("bucket 3 of 2");  // written, but wrong: training meets it again
  });
  program.probe("04.3", "unreached_parameters", [&](ddplab::ProbeContext&) {
    ran.push_back("04.3");
    throw ddplab::NotImplemented("04.3");
  });
  ddplab::dist::Loopback loop;
  ddplab::ProbeContext ctx{loop, torch::kCPU};
  std::vector<std::string> recorded;
  const auto absent = ddplab::run_probes(program.probes, ctx,
                                         [&](const ddplab::NotImplemented& e) { recorded.push_back(e.exercise()); });
  EXPECT_EQ(ran, (std::vector<std::string>{"04.1a", "04.1b", "04.2", "04.3"}));
  EXPECT_EQ(absent, (std::set<std::string>{"04.1", "04.3"}));  // one stub among 04.1's probes is enough
  EXPECT_EQ(recorded, (std::vector<std::string>{"04.1", "04.3"}));
  EXPECT_EQ(loop.stats().total_calls(), 1);
}

// A probe that crashes (the student's code dereferences a bad pointer) or never returns is its own
// exercise's failure only: it is tried in a child process first and skipped here with a warning,
// the other probes run in this process as before (their effects are this process's), and the lab
// goes on to the runs that do not use that exercise.
TEST(Probes, ACrashingOrHangingProbeIsSkippedAndTheOthersRunHere) {
  ddplab::LabProgram program;
  std::vector<std::string> ran;
  program.probe("05.1", "AutocastScope", [&](ddplab::ProbeContext&) { ran.push_back("05.1"); });
  program.probe("05.2", "LossScaler", [&](ddplab::ProbeContext&) {
    ran.push_back("05.2");
    std::raise(SIGSEGV);
  });
  program.probe("05.3", "share_found_inf", [&](ddplab::ProbeContext&) {
    ran.push_back("05.3");
    throw ddplab::NotImplemented("05.3");
  });
  ddplab::dist::Loopback loop;
  ddplab::ProbeContext ctx{loop, torch::kCPU};
  std::vector<std::string> recorded;
  const auto absent = ddplab::run_probes(program.probes, ctx,
                                         [&](const ddplab::NotImplemented& e) { recorded.push_back(e.exercise()); });
  EXPECT_EQ(ran, (std::vector<std::string>{"05.1", "05.3"}));  // 05.2 crashed in the child only
  EXPECT_EQ(absent, (std::set<std::string>{"05.3"}));
  EXPECT_EQ(recorded, (std::vector<std::string>{"05.3"}));

  program.probe("05.4", "a loop", [](ddplab::ProbeContext&) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  });
  program.probe("05.5", "after the loop", [](ddplab::ProbeContext&) {});
  const auto crashed = ddplab::crashing_probes(program.probes, ctx, 1.5);
  ASSERT_EQ(crashed.size(), 2u);
  EXPECT_NE(crashed.at(1).find("killed the process (Segmentation fault)"), std::string::npos) << crashed.at(1);
  EXPECT_EQ(crashed.at(3), "did not return within 1.5 s");
}

}  // namespace

// The lab platform's pieces that need no data set (lab.h): probes run once each in declaration
// order; a stub marks its exercise missing and is recorded; another error is only a warning, the
// exercise counts as present, and the probes after it still run.
#include "ddplab/lab.h"

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

}  // namespace

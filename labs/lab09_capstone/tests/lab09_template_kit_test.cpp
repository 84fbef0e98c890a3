// The training template's apparatus (lab09_template.h) on synthetic input: checkpoint names sort
// by step and the folder scan ignores the writer's temporary files, --resume finds the newest,
// warm-up ramps linearly to the target, the job's clock bills world x wall time on top of what was
// billed before, the stop is SIGTERM's over the budget's, and the input dropout draws from the CPU
// generator (so that its state in a checkpoint resumes the same masks). No student code runs here.
#include "lab09_template.h"

#include <fstream>

#include <gtest/gtest.h>

#include "ddplab/dist/loopback.h"
#include "scratch_dir.h"

namespace {

namespace fs = std::filesystem;

TEST(Lab09Template, CheckpointsAreFoundByNameNewestLastAndTemporaryFilesIgnored) {
  const ddplab::testing::ScratchDir scratch;
  const fs::path d = scratch.dir();
  EXPECT_EQ(lab09::checkpoint_name(12), "step-00000012.pt");
  EXPECT_TRUE(lab09::checkpoints_in(d / "missing").empty());
  for (const char* f : {"step-00000010.pt", "step-00000002.pt", ".step-00000011.pt.tmp", "notes.txt"}) {
    std::ofstream(d / f) << "x";
  }
  const auto all = lab09::checkpoints_in(d);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].filename(), "step-00000002.pt");
  EXPECT_EQ(*lab09::latest_checkpoint(d), d / "step-00000010.pt");
  EXPECT_EQ(*lab09::latest_checkpoint(d / "step-00000002.pt"), d / "step-00000002.pt");  // a file: itself
  const ddplab::testing::ScratchDir empty;
  EXPECT_FALSE(lab09::latest_checkpoint(empty.dir()).has_value());
}

TEST(Lab09Template, WarmUpRampsLinearlyToTheTarget) {
  EXPECT_DOUBLE_EQ(lab09::warmup_lr(0.004, 0, 0), 0.004);
  EXPECT_DOUBLE_EQ(lab09::warmup_lr(0.004, 4, 0), 0.001);
  EXPECT_DOUBLE_EQ(lab09::warmup_lr(0.004, 4, 1), 0.002);
  EXPECT_DOUBLE_EQ(lab09::warmup_lr(0.004, 4, 3), 0.004);
  EXPECT_DOUBLE_EQ(lab09::warmup_lr(0.004, 4, 9), 0.004);
}

TEST(Lab09Template, TheClockBillsWorldTimesWallOnTopOfTheBilledBefore) {
  lab09::JobClock clock(4, 100.0);
  EXPECT_GE(clock.device_seconds(), 100.0);
  EXPECT_EQ(clock.slowest_recent_step(), 0.0);
  for (int i = 0; i < 12; ++i) {
    clock.begin_step();
    clock.end_step();
  }
  EXPECT_GE(clock.slowest_recent_step(), 0.0);
  EXPECT_LT(clock.device_seconds(), 100.0 + 4 * 60.0);  // well under a minute of this test's wall time
}

TEST(Lab09Template, EveryRankStopsForSigtermBeforeTheBudget) {
  ddplab::dist::Loopback comm;
  EXPECT_EQ(lab09::agree_to_stop(comm, false, false), "");
  EXPECT_EQ(lab09::agree_to_stop(comm, false, true), "budget");
  EXPECT_EQ(lab09::agree_to_stop(comm, true, true), "SIGTERM");
}

TEST(Lab09Template, InputDropoutDrawsItsMasksFromTheCpuGenerator) {
  const torch::Tensor dense = torch::arange(1, 1 + 64 * 13, torch::kFloat32).reshape({64, 13});
  torch::manual_seed(3);
  const torch::Tensor before = lab09::rng_state().clone();
  EXPECT_TRUE(lab09::input_dropout(dense, 0.0).is_same(dense)) << "p = 0: the batch itself";
  EXPECT_TRUE(torch::equal(lab09::rng_state(), before)) << "p = 0 draws nothing";
  const torch::Tensor once = lab09::input_dropout(dense, 0.25);
  EXPECT_FALSE(torch::equal(lab09::rng_state(), before)) << "the mask comes from the default CPU generator";
  const torch::Tensor kept = once.ne(0);
  EXPECT_GT(kept.sum().item<int64_t>(), 0);
  EXPECT_LT(kept.sum().item<int64_t>(), dense.numel());
  EXPECT_TRUE(torch::allclose(once.masked_select(kept), dense.masked_select(kept) / 0.75))
      << "kept: scaled by 1 / (1 - p)";
  lab09::set_rng_state(before);  // what a resume does: the same generator state, the same mask
  EXPECT_TRUE(torch::equal(lab09::input_dropout(dense, 0.25), once));
}

TEST(Lab09Template, Fp16IsRefusedOffCuda) {
  lab09::Settings s;
  EXPECT_NO_THROW(lab09::check_precision(s, torch::kCPU));
  s.precision = "fp16";
  EXPECT_TRUE(s.fp16());
  EXPECT_EQ(s.low(), torch::kHalf);
  EXPECT_THROW(lab09::check_precision(s, torch::kCPU), ddplab::ConfigError);
}

}  // namespace

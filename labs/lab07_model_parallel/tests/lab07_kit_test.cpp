// Lab 07's kit (lab07_kit.h) on synthetic input: micro-batch ranges cover a batch, the flags'
// combinations are refused with the reason, each mode places the parameters where the handout
// says, the split's stages record GPipe's order and time their phases, idle time comes from the
// timer's phases, and the memory budget names the rank, the step and what the memory holds. No
// student code runs here.
#include "lab07_kit.h"

#include <gtest/gtest.h>

#include "ddplab/data/generator.h"
#include "ddplab/error.h"

namespace {

using ddplab::Phase;

ddplab::data::Batch some_batch(int64_t n) {
  const ddplab::data::Generator gen(1);
  std::vector<ddplab::data::Sample> samples(static_cast<size_t>(n));
  gen.fill(0, static_cast<uint64_t>(n), samples.data());
  return ddplab::data::make_batch(samples.data(), samples.size(), 0);
}

TEST(Lab07Kit, MicroBatchRangesCoverTheBatchTheFirstOnesOneLonger) {
  const int64_t b = 10, m = 4;
  int64_t next = 0;
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < m; ++i) {
    const auto r = lab07::Stages::range(b, m, i);
    EXPECT_EQ(r.first, next);
    next = r.second;
    sizes.push_back(r.second - r.first);
  }
  EXPECT_EQ(next, b);
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 2, 2}));
}

TEST(Lab07Kit, FlagCombinationsTheModesDoNotAllowAreRefusedWithTheReason) {
  lab07::Flags f;
  f.mode = "split";
  EXPECT_THROW(lab07::check_flags(f, 3, 512), ddplab::ConfigError);
  EXPECT_NO_THROW(lab07::check_flags(f, 2, 512));
  f.recompute = true;
  EXPECT_THROW(lab07::check_flags(f, 2, 512), ddplab::ConfigError);
  f = lab07::Flags{};
  f.mode = "pipeline";
  f.micro_batches = 8;
  EXPECT_THROW(lab07::check_flags(f, 2, 4), ddplab::ConfigError);  // more micro-batches than samples
  EXPECT_EQ(f.micro(), 8);
  f.mode = "dp";
  EXPECT_EQ(f.micro(), 1);
  EXPECT_NO_THROW(lab07::check_flags(f, 3, 4));
}

TEST(Lab07Kit, TheSplitGivesRankZeroTheTablesAndRankOneTheMlp) {
  lab07::Flags f;
  ddplab::DeepFM model;
  f.mode = "split";
  const auto first = lab07::place(model, f, 0, 2, 8), last = lab07::place(model, f, 1, 2, 8);
  EXPECT_EQ(first.params.size() + last.params.size(), model->parameters().size());
  EXPECT_TRUE(first.params[0].is_same(model->embedding->weight));
  EXPECT_EQ(last.params.size(), model->mlp->parameters().size());
  EXPECT_TRUE(first.dense.empty());
  f.mode = "dp";
  const auto dp = lab07::place(model, f, 0, 2, 8);
  EXPECT_EQ(dp.params.size(), model->parameters().size());
  EXPECT_EQ(dp.dense.size(), model->parameters().size());
}

TEST(Lab07Kit, StagesRecordGpipeOrderAndTimeTheirPhases) {
  ddplab::DeepFM model;
  ddplab::StepTimer timer;
  ddplab::memory::Tracker tracker;
  lab07::StepMemory mem(tracker, 0);
  lab07::Stages stages(model, timer, mem, 2);
  const auto batch = some_batch(6);
  // The last stage's functions, as rank 1 runs them (the boundary tensors arrive from rank 0).
  const int64_t width = lab07::boundary_width(model->options());
  auto run = [&](bool gpipe) {
    timer.begin_step();
    stages.begin(batch);
    const auto& f = stages.fns();
    std::vector<torch::Tensor> losses;
    for (int64_t i = 0; i < 2; ++i) {
      const torch::Tensor x = torch::zeros({f.samples(i), width}, torch::requires_grad());
      losses.push_back(f.last_forward(i, x));
      if (!gpipe) f.last_backward(i, losses.back());
    }
    if (gpipe) {
      for (int64_t i = 0; i < 2; ++i) f.last_backward(i, losses[static_cast<size_t>(i)]);
    }
    stages.end_order();
    timer.end_step();
  };
  run(true);
  EXPECT_TRUE(stages.gpipe_order());
  EXPECT_TRUE(timer.last_step().entered(Phase::kForward));
  EXPECT_TRUE(timer.last_step().entered(Phase::kBackward));
  EXPECT_EQ(stages.fns().samples(0) + stages.fns().samples(1), 6);
  EXPECT_EQ(stages.fns().boundary_shape(1), (std::vector<int64_t>{3, lab07::boundary_width(model->options())}));
  run(false);  // a backward before the last forward: one micro-batch at a time
  EXPECT_FALSE(stages.gpipe_order());
  EXPECT_GE(lab07::idle_fraction(timer), 0.0);
  EXPECT_LE(lab07::idle_fraction(timer), 1.0);
}

TEST(Lab07Kit, IdleIsTheStepOutsideForwardAndBackwardAfterTheFirstStep) {
  ddplab::StepTimer t;
  for (double fwd : {9.0, 1.0, 2.0, 3.0}) {  // the first step (warm-up) is left out
    t.begin_step();
    t.add(Phase::kDataWait, 0.0);
    t.add(Phase::kForward, fwd);
    t.end_step();
  }
  // Injected phases have no wall time behind them: compute exceeds the step, idle clamps below 0.
  EXPECT_LE(lab07::idle_fraction(t), 0.0);
  EXPECT_GE(lab07::step_seconds(t), 0.0);
}

TEST(Lab07Kit, OverTheBudgetTheErrorNamesRankStepAndWhatTheMemoryHolds) {
  ddplab::memory::Tracker tracker;
  lab07::StepMemory mem(tracker, 1);  // 1 MiB
  torch::Tensor w = torch::zeros({1000}, torch::requires_grad());
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.1));
  mem.begin_step();
  { const torch::Tensor big = torch::zeros({1 << 19}); }  // 2 MiB, freed: the peak remains
  try {
    mem.end_step(3, 1, {w}, opt);
    FAIL() << "no error";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory on rank 1 in step 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parameters 3.9 KiB"), std::string::npos) << e.what();
  }
  EXPECT_GE(mem.peak(), int64_t{1} << 21);
}

}  // namespace

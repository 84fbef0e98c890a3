// Lab 06's kit (lab06_kit.h), driven as an accumulator would drive it, in a world of one: the
// watch sees the groups of micro-steps, a loss not divided by its group's size, a schedule given
// micro-steps instead of optimizer steps, and the learning rates applied. No student code runs.
#include "lab06_kit.h"

#include <gtest/gtest.h>

#include "ddplab/data/generator.h"
#include "ddplab/dist/loopback.h"

namespace {

ddplab::data::Batch some_batch(int64_t n) {
  const ddplab::data::Generator gen(1);
  std::vector<ddplab::data::Sample> samples(static_cast<size_t>(n));
  gen.fill(0, static_cast<uint64_t>(n), samples.data());
  return ddplab::data::make_batch(samples.data(), samples.size(), 0);
}

struct Rig {
  ddplab::DeepFM model;
  ddplab::dist::Loopback comm;
  lab06::Flags flags;
  std::unique_ptr<torch::optim::Optimizer> opt = lab06::make_optimizer(flags, model, 0.5);
  std::unique_ptr<ddplab::dist::GradSync> sync =
      ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kBucketed, comm, model->parameters());
  ddplab::StepTimer timer;
  lab06::Plan plan;
  ddplab::data::Batch batch = some_batch(8);
  /// One group of `k` micro-steps, each loss divided by `divisor`, the step told `t`.
  void group(lab06::AccumulationWatch& w, int k, double divisor, int64_t t) {
    w.fns().zero_grad();
    for (int i = 0; i < k; ++i) {
      w.next(batch);
      const torch::Tensor loss = w.fns().forward();
      w.fns().backward(loss / divisor);
      w.fns().finish();
    }
    w.fns().step(t);
  }
};

TEST(Lab06Kit, GroupsDivisorsAndStepIndicesAreSeenFromOutside) {
  Rig r;
  lab06::AccumulationWatch w(r.model, *r.opt, *r.sync, r.timer, r.plan, false);
  r.group(w, 3, 3.0, 0);
  r.group(w, 3, 3.0, 1);
  r.group(w, 1, 1.0, 2);
  EXPECT_EQ(w.group_sizes(), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(lab06::describe_groups(w.group_sizes()), "2 x 3, 1");
  EXPECT_EQ(w.micro_steps(), 7);
  EXPECT_EQ(w.optimizer_steps(), 3);
  EXPECT_TRUE(w.losses_divided());
  EXPECT_TRUE(w.schedule_counts_steps());
  ASSERT_EQ(w.learning_rates().size(), 3u);
  EXPECT_DOUBLE_EQ(w.learning_rates()[0][1], 0.5);  // no schedules applied: the optimizer's rate
}

TEST(Lab06Kit, ALossDividedByKInATailGroupAndMicroStepIndicesAreCaught) {
  Rig r;
  lab06::AccumulationWatch w(r.model, *r.opt, *r.sync, r.timer, r.plan, false);
  r.group(w, 3, 3.0, 0);
  r.group(w, 1, 3.0, 3);  // the tail divided by k, and told the micro-step count
  EXPECT_FALSE(w.losses_divided());
  EXPECT_FALSE(w.schedule_counts_steps());
}

TEST(Lab06Kit, TheOptimizerHasTheEmbeddingsThenTheDenseLayers) {
  Rig r;
  ASSERT_EQ(r.opt->param_groups().size(), 2u);
  EXPECT_TRUE(r.opt->param_groups()[0].params()[0].is_same(r.model->embedding->weight));
  EXPECT_EQ(r.opt->param_groups()[1].params().size(), r.model->dense_parameters().size());
  EXPECT_EQ(lab06::describe_groups({}), "");
  EXPECT_EQ(lab06::describe_groups({4}), "4");
}

}  // namespace

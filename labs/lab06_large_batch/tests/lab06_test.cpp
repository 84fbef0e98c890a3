// Lab 06 unit tests: the schedules' exact values (06.1), accumulation against one process at the
// large batch on thread ranks over real Gloo (06.2), and the global batch of a job (06.3).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "thread_ranks.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/error.h"
#include "lab06.h"

namespace {

using ddplab::dist::ProcessGroup;
using ddplab::testing::run_ranks;
using lab06::Rule;
using lab06::Schedule;

Schedule schedule(Rule rule, int64_t global, int64_t warmup = 0) {
  Schedule s;
  s.base_lr = 1e-3;
  s.base_batch = 512;
  s.global_batch = global;
  s.rule = rule;
  s.warmup_steps = warmup;
  return s;
}

// ---- 06.1 ----

TEST(Lab06Schedule, TargetIsBaseTimesOneKOrSqrtK) {
  EXPECT_DOUBLE_EQ(lab06::target_lr(schedule(Rule::kNone, 4096)), 1e-3);
  EXPECT_DOUBLE_EQ(lab06::target_lr(schedule(Rule::kLinear, 4096)), 8e-3);
  EXPECT_DOUBLE_EQ(lab06::target_lr(schedule(Rule::kSqrt, 4096)), 1e-3 * std::sqrt(8.0));
  // k below 1, and k not a whole number: the ratio is taken in double.
  EXPECT_DOUBLE_EQ(lab06::target_lr(schedule(Rule::kLinear, 256)), 5e-4)
      << "k = 256 / 512 = 0.5: the ratio is taken in double";
  EXPECT_DOUBLE_EQ(lab06::target_lr(schedule(Rule::kLinear, 768)), 1.5e-3)
      << "k = 768 / 512 = 1.5: the ratio is taken in double";
  EXPECT_DOUBLE_EQ(lab06::target_lr(schedule(Rule::kSqrt, 128)), 5e-4);
}

TEST(Lab06Schedule, WarmupRampsLinearlyFromBaseToTargetInOptimizerSteps) {
  const Schedule s = schedule(Rule::kLinear, 4096, 4);  // target 8e-3
  EXPECT_DOUBLE_EQ(lab06::lr_at(s, 0), 1e-3);
  EXPECT_DOUBLE_EQ(lab06::lr_at(s, 1), 1e-3 + 7e-3 * 1 / 4);
  EXPECT_DOUBLE_EQ(lab06::lr_at(s, 2), 1e-3 + 7e-3 * 2 / 4);
  EXPECT_DOUBLE_EQ(lab06::lr_at(s, 3), 1e-3 + 7e-3 * 3 / 4);
  EXPECT_DOUBLE_EQ(lab06::lr_at(s, 4), 8e-3);
  EXPECT_DOUBLE_EQ(lab06::lr_at(s, 1000), 8e-3);
  // sqrt with warm-up, and a schedule whose target is below its base (k < 1): the ramp goes down.
  const Schedule q = schedule(Rule::kSqrt, 2048, 2);  // target 2e-3
  EXPECT_DOUBLE_EQ(lab06::lr_at(q, 1), 1.5e-3);
  const Schedule down = schedule(Rule::kLinear, 256, 2);  // target 5e-4
  EXPECT_DOUBLE_EQ(lab06::lr_at(down, 1), 7.5e-4);
}

TEST(Lab06Schedule, WithoutWarmupEveryStepGetsTheTarget) {
  for (int64_t t : {0, 1, 7}) {
    EXPECT_DOUBLE_EQ(lab06::lr_at(schedule(Rule::kLinear, 1024), t), 2e-3) << "step " << t;
    EXPECT_DOUBLE_EQ(lab06::lr_at(schedule(Rule::kNone, 1024), t), 1e-3) << "step " << t;
  }
}

TEST(Lab06Schedule, RejectsWhatIsNotASchedule) {
  Schedule s = schedule(Rule::kLinear, 1024);
  EXPECT_THROW(lab06::lr_at(s, -1), ddplab::ConfigError);
  s.base_lr = 0;
  EXPECT_THROW(lab06::target_lr(s), ddplab::ConfigError);
  s = schedule(Rule::kLinear, 1024);
  s.base_batch = 0;
  EXPECT_THROW(lab06::target_lr(s), ddplab::ConfigError);
  s = schedule(Rule::kLinear, 0);
  EXPECT_THROW(lab06::target_lr(s), ddplab::ConfigError);
  s = schedule(Rule::kLinear, 1024, -1);
  EXPECT_THROW(lab06::lr_at(s, 0), ddplab::ConfigError);
}

/// An Adam optimizer over two tiny layers, one parameter group each, both at rate 1.
struct TwoGroups {
  torch::nn::Linear a{2, 1}, b{3, 1};
  std::unique_ptr<torch::optim::Adam> adam;
  TwoGroups() {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(a->parameters(), std::make_unique<torch::optim::AdamOptions>(1.0));
    groups.emplace_back(b->parameters(), std::make_unique<torch::optim::AdamOptions>(1.0));
    adam = std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(1.0));
  }
  double lr(size_t g) const { return adam->param_groups()[g].options().get_lr(); }
};

TEST(Lab06Schedule, EachParameterGroupGetsItsOwnRate) {
  TwoGroups o;
  const std::vector<Schedule> s = {schedule(Rule::kNone, 4096, 4), schedule(Rule::kLinear, 4096, 4)};
  lab06::apply_schedules(*o.adam, s, 2);
  EXPECT_DOUBLE_EQ(o.lr(0), 1e-3);
  EXPECT_DOUBLE_EQ(o.lr(1), 4.5e-3);
  lab06::apply_schedules(*o.adam, s, 9);
  EXPECT_DOUBLE_EQ(o.lr(1), 8e-3);
}

TEST(Lab06Schedule, EveryStepOfARunSetsThatStepsRates) {
  // A run's steps, one after another on one optimizer, through the warm-up and after it, with
  // optimizer steps in between (Adam's state changes; the rates must follow the schedules alone).
  TwoGroups o;
  const std::vector<Schedule> s = {schedule(Rule::kSqrt, 2048, 3), schedule(Rule::kLinear, 1024, 3)};
  for (int64_t t = 0; t < 7; ++t) {
    lab06::apply_schedules(*o.adam, s, t);
    EXPECT_DOUBLE_EQ(o.lr(0), lab06::lr_at(s[0], t)) << "group 0 at step " << t;
    EXPECT_DOUBLE_EQ(o.lr(1), lab06::lr_at(s[1], t)) << "group 1 at step " << t;
    o.adam->zero_grad();
    (o.a->forward(torch::ones({1, 2})).sum() + o.b->forward(torch::ones({1, 3})).sum()).backward();
    o.adam->step();
  }
}

TEST(Lab06Schedule, AScheduleCountThatIsNotTheGroupCountIsAConfigError) {
  TwoGroups o;
  const Schedule s = schedule(Rule::kLinear, 4096);
  EXPECT_THROW(lab06::apply_schedules(*o.adam, {s}, 0), ddplab::ConfigError) << "2 groups, 1 schedule";
  EXPECT_THROW(lab06::apply_schedules(*o.adam, {s, s, s}, 0), ddplab::ConfigError) << "2 groups, 3 schedules";
  EXPECT_DOUBLE_EQ(o.lr(0), 1.0) << "a refused call changes no rate";
  EXPECT_DOUBLE_EQ(o.lr(1), 1.0) << "a refused call changes no rate";
}

// ---- 06.3 ----

TEST(Lab06GlobalBatch, IsWorldSizeTimesBatchTimesAccumulationFromTheEnvironment) {
  for (int world : {1, 2, 4}) {
    ddplab::dist::Environment env;
    env.world_size = world;
    const auto b = lab06::derive_global_batch(env, 256, 3);
    EXPECT_EQ(b.global_batch, world * 256 * 3) << "world " << world;
    EXPECT_EQ(b.world_size, world);
    EXPECT_EQ(b.per_rank_batch, 256);
    EXPECT_EQ(b.accumulation, 3);
  }
  ddplab::dist::Environment env;
  env.world_size = 2;
  EXPECT_THROW(lab06::derive_global_batch(env, 0, 1), ddplab::ConfigError);
  EXPECT_THROW(lab06::derive_global_batch(env, 8, 0), ddplab::ConfigError);
  env.world_size = 0;
  EXPECT_THROW(lab06::derive_global_batch(env, 8, 1), ddplab::ConfigError);
}

TEST(Lab06GlobalBatch, SchedulesScaleOnceWithTheGlobalBatchPerGroup) {
  lab06::LrFlags flags;
  flags.base_lr = 1e-3;
  flags.base_batch = 512;
  flags.rule = Rule::kLinear;
  flags.embedding_rule = Rule::kNone;
  flags.warmup_steps = 5;
  // Per-rank batch x accumulation both equal to the base batch (256 x 2) and not (96 x 2, 128 x 3):
  // the base batch is the flag's, the batch the rate was tuned at, whatever one rank's step is.
  for (const auto& [per_rank, k] : std::vector<std::pair<int64_t, int64_t>>{{256, 2}, {96, 2}, {128, 3}}) {
    for (int world : {1, 2, 4}) {
      ddplab::dist::Environment env;
      env.world_size = world;
      const auto b = lab06::derive_global_batch(env, per_rank, k);
      const auto s = lab06::make_schedules(b, flags);
      const std::string at = "world " + std::to_string(world) + " x " + std::to_string(per_rank) + " x " +
                             std::to_string(k) + " micro-batches";
      ASSERT_EQ(s.size(), 2u);
      for (const auto& g : s) {
        EXPECT_DOUBLE_EQ(g.base_lr, 1e-3) << at << ": the rule scales, base_lr stays the flag's";
        EXPECT_EQ(g.base_batch, 512) << at << ": base_batch is the flag's (--base-batch), not one rank's step";
        EXPECT_EQ(g.global_batch, world * per_rank * k) << at;
        EXPECT_EQ(g.warmup_steps, 5) << at;
      }
      EXPECT_EQ(s[0].rule, Rule::kNone) << "the embeddings come first";
      EXPECT_EQ(s[1].rule, Rule::kLinear);
      EXPECT_DOUBLE_EQ(lab06::target_lr(s[1]), 1e-3 * static_cast<double>(world * per_rank * k) / 512.0) << at;
      EXPECT_DOUBLE_EQ(lab06::target_lr(s[0]), 1e-3) << at;
    }
  }
}

// ---- 06.2 ----

// A fixed logistic model and data: sample i has features f(i) and label (i % 3 == 0).
torch::Tensor features(int64_t first, int64_t n) {
  auto i = torch::arange(first, first + n, torch::kFloat64).unsqueeze(1);
  auto j = torch::arange(1, 5, torch::kFloat64).unsqueeze(0);
  return torch::sin(i * j * 0.37).to(torch::kFloat32);
}
torch::Tensor labels(int64_t first, int64_t n) {
  return (torch::remainder(torch::arange(first, first + n), 3) == 0).to(torch::kFloat32).unsqueeze(1);
}
torch::nn::Linear fixed_model() {
  torch::nn::Linear m(4, 1);
  torch::NoGradGuard g;
  m->weight.copy_(torch::tensor({{0.3f, -0.2f, 0.5f, 0.1f}}));
  m->bias.fill_(-0.1f);
  return m;
}
/// The gradient of the mean loss of samples [first, first + n) in one process.
std::vector<torch::Tensor> oracle_grad(int64_t first, int64_t n) {
  auto m = fixed_model();
  torch::binary_cross_entropy_with_logits(m->forward(features(first, n)), labels(first, n)).backward();
  return {m->weight.grad().clone(), m->bias.grad().clone()};
}

/// What one rank saw: per optimizer step, the step index it was given, the gradients at the step
/// and the allreduce calls so far; and the zero_grad calls, the returned losses, and the order of
/// the calls ("z" zero_grad, "f" forward, "b" backward, "n" finish, "s" step).
struct Seen {
  std::vector<int64_t> step_index;
  std::vector<std::vector<torch::Tensor>> grads;
  std::vector<int64_t> collectives_at_step;
  int zero_grads = 0;
  std::vector<double> losses;
  std::vector<bool> stepped;
  std::string calls;
};

/// Runs `epochs` epochs of `n` micro-steps of B samples per rank, k per optimizer step. Micro-step
/// m of the epoch covers the job's samples [m W B, (m + 1) W B); rank r takes its B-slice.
Seen accumulate(ProcessGroup& pg, int64_t n, int64_t k, int64_t B, int epochs = 1) {
  const int W = pg.size(), r = pg.rank();
  auto m = fixed_model();
  auto sync = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, m->parameters());
  lab06::Accumulator acc(*sync, k);
  Seen seen;
  int64_t micro = 0;
  lab06::MicroStepFns fns;
  fns.forward = [&] {
    seen.calls += "f";
    const int64_t first = (micro * W + r) * B;
    return torch::binary_cross_entropy_with_logits(m->forward(features(first, B)), labels(first, B));
  };
  fns.backward = [&](const torch::Tensor& loss) {
    seen.calls += "b";
    sync->before_backward(loss);
    loss.backward();
  };
  fns.finish = [&] {
    seen.calls += "n";
    sync->finish();
  };
  fns.step = [&](int64_t t) {
    seen.calls += "s";
    seen.step_index.push_back(t);
    seen.grads.push_back({m->weight.grad().clone(), m->bias.grad().clone()});
    seen.collectives_at_step.push_back(pg.stats().ops[static_cast<int>(ddplab::dist::Op::kAllreduce)].calls);
    // No optimizer: the model stays fixed, so every step's gradient has a one-process oracle.
  };
  fns.zero_grad = [&] {
    seen.calls += "z";
    ++seen.zero_grads;
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
  };
  for (int e = 0; e < epochs; ++e) {
    acc.begin_epoch(n);
    for (int64_t i = 0; i < n; ++i, ++micro) {
      bool stepped = false;
      seen.losses.push_back(acc.micro_step(fns, &stepped));
      seen.stepped.push_back(stepped);
    }
    micro = 0;  // the next epoch sees the same samples (no shuffling here)
  }
  EXPECT_EQ(acc.optimizer_steps(), static_cast<int64_t>(seen.step_index.size()));
  return seen;
}

void expect_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = (got[i] - want[i]).abs().max().item<double>();
    const double ratio = got[i].norm().item<double>() / std::max(want[i].norm().item<double>(), 1e-30);
    EXPECT_LT(err, 1e-6) << what << ", tensor " << i << ": max |accumulated - one process| = " << err
                         << ", |accumulated| / |one process| = " << ratio
                         << " (k: the loss was not divided by the group's size; 1/k or less: gradients zeroed "
                            "after the group's first micro-step; other: the wrong samples or a missing sync)";
  }
}

class Lab06Accumulate : public ::testing::TestWithParam<int> {};

TEST_P(Lab06Accumulate, KMicroBatchesOnWRanksGiveTheGradientOfOneBatchOfWkB) {
  const int W = GetParam();
  const int64_t k = 4, B = 3;
  run_ranks(W, [&](ProcessGroup& pg) {
    const Seen s = accumulate(pg, 2 * k, k, B);
    ASSERT_EQ(s.grads.size(), 2u) << "two optimizer steps of " << k << " micro-batches";
    for (size_t t = 0; t < 2; ++t) {
      expect_close(s.grads[t], oracle_grad(static_cast<int64_t>(t) * k * W * B, k * W * B),
                   "rank " + std::to_string(pg.rank()) + ", optimizer step " + std::to_string(t));
    }
  });
}

TEST_P(Lab06Accumulate, OneGradientSyncPerOptimizerStep) {
  const int W = GetParam();
  run_ranks(W, [&](ProcessGroup& pg) {
    const Seen s = accumulate(pg, 8, 4, 2);
    // The per-parameter sync of a Linear: 2 all-reduces (weight, bias) per synced step.
    ASSERT_EQ(s.collectives_at_step.size(), 2u);
    EXPECT_EQ(s.collectives_at_step[0], 2) << "all-reduces before the first optimizer step: one sync of 2 tensors, "
                                              "not one per micro-step (no_sync() on all but the group's last)";
    EXPECT_EQ(s.collectives_at_step[1], 4);
  });
}

TEST_P(Lab06Accumulate, TheGradientsAreZeroedOncePerGroupBeforeItsFirstBackward) {
  const int W = GetParam();
  run_ranks(W, [&](ProcessGroup& pg) {
    // 5 micro-steps at k = 2: groups of 2, 2 and 1, 3 optimizer steps.
    const Seen s = accumulate(pg, 5, 2, 2);
    EXPECT_EQ(s.zero_grads, 3) << "one zero_grad per optimizer step (group), at its first micro-step";
    // Each group's calls, from one step to the next: one z, before the group's first backward.
    size_t from = 0;
    for (size_t g = 0; g < s.step_index.size(); ++g) {
      const size_t end = s.calls.find('s', from);
      ASSERT_NE(end, std::string::npos);
      const std::string group = s.calls.substr(from, end - from);
      EXPECT_EQ(std::count(group.begin(), group.end(), 'z'), 1) << "group " << g << "'s calls: " << group;
      EXPECT_LT(group.find('z'), group.find('b')) << "group " << g << " zeroes after a backward: " << group;
      from = end + 1;
    }
  });
}

TEST_P(Lab06Accumulate, APartialLastGroupStepsOnTheMeanOfWhatItSaw) {
  const int W = GetParam();
  const int64_t B = 2;
  run_ranks(W, [&](ProcessGroup& pg) {
    // 5 micro-steps at k = 2: groups of 2, 2 and a tail of 1, each one optimizer step.
    const Seen s = accumulate(pg, 5, 2, B);
    ASSERT_EQ(s.grads.size(), 3u) << "the tail is an optimizer step of its own";
    EXPECT_EQ(s.stepped, (std::vector<bool>{false, true, false, true, true}));
    expect_close(s.grads[2], oracle_grad(4 * W * B, W * B), "the tail (1 micro-batch, divided by 1, not by k)");
    EXPECT_EQ(s.collectives_at_step[2], 6) << "the tail is synced once too";
  });
}

TEST_P(Lab06Accumulate, TheScheduleIsGivenTheOptimizerStepCountedFromZero) {
  const int W = GetParam();
  run_ranks(W, [&](ProcessGroup& pg) {
    // One epoch of 7 micro-steps at k = 3: groups of 3, 3 and 1.
    const Seen s = accumulate(pg, 7, 3, 2);
    EXPECT_EQ(s.step_index, (std::vector<int64_t>{0, 1, 2}))
        << "fns.step(t) gets the optimizer steps taken before this one: 0, 1, 2 (not the micro-step, not from 1)";
  });
}

TEST_P(Lab06Accumulate, TheStepCountGoesOnAcrossEpochs) {
  const int W = GetParam();
  run_ranks(W, [&](ProcessGroup& pg) {
    // Three epochs of 3 micro-steps at k = 2: each epoch is a group of 2 and a tail of 1; the step
    // given to the schedule goes on from one epoch to the next (whatever it starts at). Which
    // micro-steps end a group is TheGroupsStartAgainWithEachEpoch's: here only the count.
    const Seen s = accumulate(pg, 3, 2, 2, /*epochs=*/3);
    ASSERT_GE(s.step_index.size(), 2u);
    for (size_t t = 1; t < s.step_index.size(); ++t) {
      EXPECT_EQ(s.step_index[t], s.step_index[t - 1] + 1)
          << "optimizer step " << t << " (epoch " << t / 2 << ") was given " << s.step_index[t] << " after "
          << s.step_index[t - 1] << ": the count must go on across epochs";
    }
  });
}

TEST_P(Lab06Accumulate, TheGroupsStartAgainWithEachEpoch) {
  const int W = GetParam();
  run_ranks(W, [&](ProcessGroup& pg) {
    // Three epochs of 5 micro-steps at k = 3: in every epoch a group of 3, then the tail of 2. Which
    // micro-steps end a group, only: their gradients are the other tests'.
    const Seen s = accumulate(pg, 5, 3, 2, /*epochs=*/3);
    const std::vector<bool> epoch = {false, false, true, false, true};
    std::vector<bool> want;
    for (int e = 0; e < 3; ++e) want.insert(want.end(), epoch.begin(), epoch.end());
    EXPECT_EQ(s.stepped, want) << "each epoch's first micro-step opens a group; its last group is its tail";
    EXPECT_EQ(s.step_index.size(), 6u) << "two optimizer steps in each of the 3 epochs";
  });
}

TEST_P(Lab06Accumulate, ReturnsEachMicroBatchsLossBeforeTheDivision) {
  const int W = GetParam();
  const int64_t B = 3;
  run_ranks(W, [&](ProcessGroup& pg) {
    const Seen s = accumulate(pg, 4, 4, B);
    ASSERT_EQ(s.losses.size(), 4u);
    for (int64_t m = 0; m < 4; ++m) {
      const int64_t first = (m * pg.size() + pg.rank()) * B;
      auto model = fixed_model();
      const double want =
          torch::binary_cross_entropy_with_logits(model->forward(features(first, B)), labels(first, B)).item<double>();
      EXPECT_NEAR(s.losses[static_cast<size_t>(m)], want, 1e-6) << "micro-step " << m;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Lab06Accumulate, ::testing::Values(1, 2, 3));

TEST(Lab06AccumulateEpochs, AnEpochMustEndBeforeTheNextBegins) {
  run_ranks(1, [](ProcessGroup& pg) {
    auto m = fixed_model();
    auto sync = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, m->parameters());
    lab06::Accumulator acc(*sync, 2);
    lab06::MicroStepFns fns;
    fns.forward = [&] { return torch::binary_cross_entropy_with_logits(m->forward(features(0, 2)), labels(0, 2)); };
    fns.backward = [](const torch::Tensor& loss) { loss.backward(); };
    fns.finish = [&] { sync->finish(); };
    fns.step = [](int64_t) {};
    fns.zero_grad = [] {};
    acc.begin_epoch(3);
    acc.micro_step(fns);
    EXPECT_THROW(acc.begin_epoch(3), ddplab::Error) << "2 of 3 micro-steps left: the open group would be lost";
    acc.micro_step(fns);
    acc.micro_step(fns);
    EXPECT_THROW(acc.micro_step(fns), ddplab::Error) << "a fourth micro-step in an epoch of 3";
    acc.begin_epoch(1);
    EXPECT_THROW(lab06::Accumulator(*sync, 0), ddplab::ConfigError);
  });
}

}  // namespace

// Lab 05's public tests: the contracts of lab05.h. Run them with
// build/<tree>/bin/lab05_mixed_precision_tests.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "thread_ranks.h"
#include "ddplab/amp.h"
#include "ddplab/dist/loopback.h"
#include "ddplab/error.h"
#include "lab05.h"

namespace {

using ddplab::amp::autocast_dtype;
using ddplab::amp::autocast_enabled;
using lab05::AutocastScope;
using lab05::LossScaler;
using lab05::ScalerOptions;

constexpr float kInf = std::numeric_limits<float>::infinity();

/// After every scope has ended the nesting counter must be back at 0: one more level is level 1.
void expect_nesting_balanced() {
  EXPECT_EQ(ddplab::amp::increment_nesting(), 1) << "a scope left autocast's nesting counter unbalanced";
  EXPECT_EQ(ddplab::amp::decrement_nesting(), 0);
}

// ---------------------------------------------------------------------------------------------
// 05.1: the autocast scope

TEST(Lab05Autocast, EnablesForItsLifetimeAndRestores) {
  ASSERT_FALSE(autocast_enabled(torch::kCPU));
  {
    AutocastScope scope(torch::kCPU, torch::kBFloat16);
    EXPECT_TRUE(autocast_enabled(torch::kCPU));
    EXPECT_EQ(autocast_dtype(torch::kCPU), torch::kBFloat16);
  }
  EXPECT_FALSE(autocast_enabled(torch::kCPU));
  expect_nesting_balanced();
}

TEST(Lab05Autocast, AnInnerDisabledScopeTurnsItOffUntilItEnds) {
  {
    AutocastScope outer(torch::kCPU, torch::kBFloat16);
    {
      AutocastScope inner(torch::kCPU, torch::kBFloat16, /*enabled=*/false);
      EXPECT_FALSE(autocast_enabled(torch::kCPU));
    }
    EXPECT_TRUE(autocast_enabled(torch::kCPU)) << "the inner scope must restore the outer one's state";
  }
  EXPECT_FALSE(autocast_enabled(torch::kCPU));
  expect_nesting_balanced();
}

TEST(Lab05Autocast, NestedScopesOfAnotherDtypeRestoreTheOuterDtype) {
  // CUDA's autocast state, which a CPU build holds too (flags only: no CUDA operation runs here).
  // CPU autocast takes bfloat16 alone in LibTorch 1.13, so there a dtype never changes; on CUDA a
  // float16 scope around a bfloat16 one does, and the outer dtype must come back after the inner.
  const torch::ScalarType before = autocast_dtype(torch::kCUDA);
  try {
    ddplab::amp::set_autocast_dtype(torch::kCUDA, torch::kBFloat16);  // the kit's call, before any of yours
    ddplab::amp::set_autocast_dtype(torch::kCUDA, before);
  } catch (const ddplab::ConfigError& e) {
    GTEST_SKIP() << "this LibTorch keeps no CUDA autocast dtype: " << e.what();
  }
  {
    AutocastScope outer(torch::kCUDA, torch::kHalf);
    {
      AutocastScope inner(torch::kCUDA, torch::kBFloat16);
      EXPECT_EQ(autocast_dtype(torch::kCUDA), torch::kBFloat16);
      EXPECT_TRUE(autocast_enabled(torch::kCUDA));
    }
    EXPECT_EQ(autocast_dtype(torch::kCUDA), torch::kHalf) << "the inner scope must restore the outer one's dtype";
    EXPECT_TRUE(autocast_enabled(torch::kCUDA));
  }
  EXPECT_EQ(autocast_dtype(torch::kCUDA), before) << "the outer scope must restore the dtype it found";
  EXPECT_FALSE(autocast_enabled(torch::kCUDA));
  expect_nesting_balanced();
}

TEST(Lab05Autocast, LinearLayersRunInBfloat16OnlyInside) {
  torch::manual_seed(0);
  torch::nn::Linear lin(4, 3);
  const torch::Tensor x = torch::randn({2, 4});
  {
    AutocastScope scope(torch::kCPU, torch::kBFloat16);
    EXPECT_EQ(lin->forward(x).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(lin->forward(x).scalar_type(), torch::kFloat32);
}

TEST(Lab05Autocast, EachNewScopeSeesTheUpdatedWeights) {
  // Autocast caches the bfloat16 copy of each leaf weight it casts, keyed by the weight's storage.
  // The optimizer updates weights in place; unless the outermost scope clears the cache when it
  // ends, the next scope's forward still uses the first step's weights. (torch::linear on the
  // parameters is cached; torch::nn::Linear's forward casts weight.t(), a view, which is not —
  // measured on LibTorch 1.13, docs/walkthroughs/lab05_mixed_precision.md.)
  torch::manual_seed(0);
  torch::nn::Linear lin(8, 1);
  const torch::Tensor x = torch::randn({4, 8});
  torch::optim::SGD opt(lin->parameters(), torch::optim::SGDOptions(0.05));
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      AutocastScope scope(torch::kCPU, torch::kBFloat16);
      loss = torch::linear(x, lin->weight, lin->bias).pow(2).mean();
    }
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  EXPECT_LT(losses[1], losses[0]) << "the second forward used stale weights: clear autocast's cache";
  EXPECT_LT(losses[2], losses[1]) << "the third forward used stale weights: clear autocast's cache";
  expect_nesting_balanced();
}

// ---------------------------------------------------------------------------------------------
// 05.2: the loss scaler

/// 05.2's scalers share their inf check through a world of one: the null communicator is 05.3's
/// own test (Lab05Ranks.WithoutACommunicatorTheFlagIsLocal), not a precondition of these.
ddplab::dist::Loopback& alone() {
  static ddplab::dist::Loopback comm;
  return comm;
}

/// One parameter of 3 elements whose gradient the test sets directly.
struct OneParam {
  torch::Tensor w = torch::zeros({3}, torch::requires_grad());
  std::vector<torch::Tensor> params() const { return {w}; }
  void set_grad(float a, float b, float c) { w.mutable_grad() = torch::tensor({a, b, c}); }
};

TEST(Lab05Scaler, ScaleMultipliesTheLossByTheCurrentScale) {
  LossScaler scaler(ScalerOptions{8.0, 2.0, 0.5, 10}, &alone());
  const torch::Tensor loss = torch::tensor(1.5f);
  EXPECT_FLOAT_EQ(scaler.scale(loss).item<float>(), 12.0f);
  EXPECT_FLOAT_EQ(loss.item<float>(), 1.5f) << "scale() must not modify the loss";
  EXPECT_EQ(scaler.scale_value(), 8.0);
}

TEST(Lab05Scaler, UnscaleDividesOnceAndFindsInfAndNaN) {
  OneParam p;
  LossScaler scaler(ScalerOptions{4.0, 2.0, 0.5, 10}, &alone());
  p.set_grad(4.0f, -8.0f, 2.0f);
  scaler.unscale(p.params());
  EXPECT_TRUE(torch::equal(p.w.grad(), torch::tensor({1.0f, -2.0f, 0.5f})));
  EXPECT_FALSE(scaler.found_inf());
  EXPECT_THROW(scaler.unscale(p.params()), ddplab::Error) << "a second unscale in one step divides twice";
  scaler.update();
  p.set_grad(1.0f, std::nanf(""), 0.0f);
  scaler.unscale(p.params());
  EXPECT_TRUE(scaler.found_inf()) << "NaN counts as an overflow";
  scaler.update();
  p.set_grad(1.0f, -kInf, 0.0f);
  scaler.unscale(p.params());
  EXPECT_TRUE(scaler.found_inf()) << "-inf counts as an overflow";
}

TEST(Lab05Scaler, StepUnscalesOnceAndSkipsOnOverflow) {
  OneParam p;
  torch::optim::SGD opt(p.params(), torch::optim::SGDOptions(1.0));
  LossScaler scaler(ScalerOptions{2.0, 2.0, 0.5, 10}, &alone());
  p.set_grad(2.0f, 2.0f, 2.0f);
  EXPECT_TRUE(scaler.step(opt, p.params())) << "step() must unscale when unscale() was not called";
  EXPECT_TRUE(torch::equal(p.w, torch::tensor({-1.0f, -1.0f, -1.0f}))) << p.w;
  scaler.update();
  p.set_grad(2.0f, 2.0f, 2.0f);
  scaler.unscale(p.params());  // e.g. before clipping
  EXPECT_TRUE(scaler.step(opt, p.params()));
  EXPECT_TRUE(torch::equal(p.w, torch::tensor({-2.0f, -2.0f, -2.0f}))) << "unscaled twice? " << p.w;
  scaler.update();
  p.set_grad(2.0f, kInf, 2.0f);
  EXPECT_FALSE(scaler.step(opt, p.params())) << "a step with an inf gradient must be skipped";
  EXPECT_TRUE(torch::equal(p.w, torch::tensor({-2.0f, -2.0f, -2.0f}))) << "the weights moved on a skipped step";
}

TEST(Lab05Scaler, AScriptedRunFollowsGradScalersRules) {
  // Initial scale 8, growth interval 3: three good steps double the scale, an inf or NaN halves it
  // and restarts the count.
  OneParam p;
  torch::optim::SGD opt(p.params(), torch::optim::SGDOptions(0.0));
  LossScaler scaler(ScalerOptions{8.0, 2.0, 0.5, 3}, &alone());
  const float nan = std::nanf("");
  const std::vector<float> bad = {1, 1, 1, kInf, 1, nan, 1, 1, 1, 1, 1, 1};
  const std::vector<bool> want_step = {true, true, true, false, true, false, true, true, true, true, true, true};
  const std::vector<double> want_scale = {8, 8, 16, 8, 8, 4, 4, 4, 8, 8, 8, 16};
  const std::vector<int64_t> want_tracker = {1, 2, 0, 0, 1, 0, 1, 2, 0, 1, 2, 0};
  for (size_t k = 0; k < bad.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "step " << k);
    // The loss is scaled, and the gradients unscaled, by the scale of this step, which the backoffs
    // and growths before it have changed: never by the initial one.
    const auto s = static_cast<float>(scaler.scale_value());
    EXPECT_FLOAT_EQ(scaler.scale(torch::tensor(1.5f)).item<float>(), 1.5f * s) << "scale() with the current scale";
    p.set_grad(3.0f * s, bad[k], 3.0f * s);
    EXPECT_EQ(scaler.step(opt, p.params()), want_step[k]);
    if (want_step[k]) {
      EXPECT_FLOAT_EQ(p.w.grad()[0].item<float>(), 3.0f) << "unscale() divides by the current scale";
    }
    scaler.update();
    EXPECT_EQ(scaler.scale_value(), want_scale[k]);
    EXPECT_EQ(scaler.growth_tracker(), want_tracker[k]);
    EXPECT_FALSE(scaler.found_inf()) << "update() ends the step";
  }
}

/// Three parameters, the middle one without a gradient, for the tests of many gradients.
struct ThreeParams {
  torch::Tensor a = torch::zeros({2}, torch::requires_grad()), frozen = torch::zeros({2}, torch::requires_grad()),
                b = torch::zeros({2}, torch::requires_grad());
  std::vector<torch::Tensor> params() const { return {a, frozen, b}; }
};

TEST(Lab05Scaler, AnInfInAnyGradientIsFound) {
  // Several gradients, the inf or NaN in the first, then in the last, then nowhere: any one of
  // them makes the step an overflow, whichever comes after it.
  const float nan = std::nanf("");
  ThreeParams p;
  LossScaler scaler(ScalerOptions{4.0, 2.0, 0.5, 10}, &alone());
  for (const auto& [first, last, want] : std::vector<std::tuple<float, float, bool>>{{kInf, 1.0f, true},
                                                                                     {1.0f, nan, true},
                                                                                     {1.0f, 1.0f, false},
                                                                                     {-kInf, 1.0f, true}}) {
    p.a.mutable_grad() = torch::tensor({first, 4.0f});
    p.b.mutable_grad() = torch::tensor({8.0f, last});
    p.frozen.mutable_grad() = torch::tensor({2.0f, 2.0f});
    scaler.unscale(p.params());
    EXPECT_EQ(scaler.found_inf(), want) << "gradients [" << first << ", 4] [2, 2] [8, " << last << "]";
    scaler.update();
  }
}

TEST(Lab05Scaler, AParameterWithoutAGradientIsLeftAlone) {
  ThreeParams p;
  torch::optim::SGD opt(p.params(), torch::optim::SGDOptions(1.0));
  LossScaler scaler(ScalerOptions{4.0, 2.0, 0.5, 10}, &alone());
  p.a.mutable_grad() = torch::tensor({4.0f, 8.0f});
  p.b.mutable_grad() = torch::tensor({8.0f, kInf});
  EXPECT_FALSE(scaler.step(opt, p.params())) << "the inf in the last gradient";
  scaler.update();
  p.a.mutable_grad() = torch::tensor({4.0f, 8.0f});
  p.b.mutable_grad() = torch::tensor({8.0f, 4.0f});
  EXPECT_TRUE(scaler.step(opt, p.params()));
  EXPECT_TRUE(torch::equal(p.a.grad(), torch::tensor({2.0f, 4.0f}))) << p.a.grad();  // scale 2 after the backoff
  EXPECT_FALSE(p.frozen.grad().defined()) << "a parameter without a gradient must stay without one";
}

TEST(Lab05Scaler, AcceptsTheSmallestValidOptions) {
  // An init_scale of 1 and a growth interval of 1 are valid: only values below 1 are rejected.
  OneParam p;
  torch::optim::SGD opt(p.params(), torch::optim::SGDOptions(0.0));
  std::optional<LossScaler> scaler;
  ASSERT_NO_THROW(scaler.emplace(ScalerOptions{1.0, 1.5, 0.25, 1}, &alone()));
  EXPECT_EQ(scaler->scale_value(), 1.0);
  p.set_grad(1, 1, 1);
  scaler->step(opt, p.params());
  scaler->update();
  EXPECT_EQ(scaler->scale_value(), 1.5) << "growth_interval 1: the scale grows after every good step";
}

TEST(Lab05Scaler, BacksOffBelowOne) {
  // GradScaler has no floor: a run of overflows halves the scale below 1 (an unscale then
  // multiplies the gradients by more than 1).
  OneParam p;
  torch::optim::SGD opt(p.params(), torch::optim::SGDOptions(0.0));
  LossScaler scaler(ScalerOptions{2.0, 2.0, 0.5, 100}, &alone());
  for (double want : {1.0, 0.5, 0.25}) {
    p.set_grad(1, kInf, 1);
    EXPECT_FALSE(scaler.step(opt, p.params()));
    scaler.update();
    EXPECT_EQ(scaler.scale_value(), want);
  }
  p.set_grad(1, 1, 1);
  EXPECT_TRUE(scaler.step(opt, p.params()));
  EXPECT_FLOAT_EQ(p.w.grad()[0].item<float>(), 4.0f) << "unscaled at 0.25: multiplied by 4";
}

TEST(Lab05Scaler, RejectsOptionsGradScalerRejects) {
  EXPECT_THROW(LossScaler(ScalerOptions{65536, 1.0, 0.5, 10}), ddplab::ConfigError);
  EXPECT_THROW(LossScaler(ScalerOptions{65536, 2.0, 1.0, 10}), ddplab::ConfigError);
  EXPECT_THROW(LossScaler(ScalerOptions{65536, 2.0, 0.0, 10}), ddplab::ConfigError);
  EXPECT_THROW(LossScaler(ScalerOptions{65536, 2.0, 0.5, 0}), ddplab::ConfigError);
  EXPECT_THROW(LossScaler(ScalerOptions{0.5, 2.0, 0.5, 10}), ddplab::ConfigError);
}

TEST(Lab05Scaler, ItsStateSurvivesACheckpoint) {
  OneParam p;
  torch::optim::SGD opt(p.params(), torch::optim::SGDOptions(0.0));
  LossScaler a(ScalerOptions{8.0, 2.0, 0.5, 3}, &alone());
  for (float g : {1.0f, kInf, 1.0f}) {
    p.set_grad(g, 1, 1);
    a.step(opt, p.params());
    a.update();
  }
  LossScaler b({}, &alone());
  b.load_state(a.state());
  EXPECT_EQ(b.scale_value(), 4.0);
  EXPECT_EQ(b.growth_tracker(), 1);
  p.set_grad(1, 1, 1);
  b.step(opt, p.params());
  b.update();
  p.set_grad(1, 1, 1);
  b.step(opt, p.params());
  b.update();
  EXPECT_EQ(b.scale_value(), 8.0) << "the restored growth tracker and interval must carry on";
}

// ---------------------------------------------------------------------------------------------
// 05.3: ranks that agree

TEST(Lab05Ranks, EveryRankSkipsAStepInWhichOneRankOverflowed) {
  ddplab::testing::run_ranks(2, [](ddplab::dist::ProcessGroup& pg) {
    OneParam p;
    torch::optim::SGD opt(p.params(), torch::optim::SGDOptions(1.0));
    // Initial scale 2: this test is about the ranks agreeing, not about 05.2's boundary cases.
    LossScaler scaler(ScalerOptions{2.0, 2.0, 0.5, 100}, &pg);
    for (int step = 0; step < 3; ++step) {
      // Step 1: rank 0's local gradient overflows, rank 1's does not.
      const bool overflow = step == 1 && pg.rank() == 0;
      p.set_grad(1.0f, overflow ? kInf : 1.0f, 1.0f);
      scaler.unscale(p.params());
      EXPECT_EQ(scaler.found_inf(), step == 1) << "rank " << pg.rank() << ", step " << step;
      EXPECT_EQ(scaler.step(opt, p.params()), step != 1) << "rank " << pg.rank() << ", step " << step;
      scaler.update();
    }
    EXPECT_EQ(scaler.scale_value(), 1.0) << "rank " << pg.rank();
    // Step 0 moves w by 0.5 (the gradient 1 unscaled at 2); step 2 by 1 (at the backed-off scale 1).
    EXPECT_TRUE(torch::equal(p.w, torch::tensor({-1.5f, -1.5f, -1.5f}))) << "rank " << pg.rank() << ": " << p.w;
  });
}

TEST(Lab05Ranks, AnyRanksFlagIsEveryRanksFlag) {
  for (int world : {1, 2, 3}) {
    for (int with_inf = -1; with_inf < world; ++with_inf) {  // -1: no rank found one
      ddplab::testing::run_ranks(world, [&](ddplab::dist::ProcessGroup& pg) {
        EXPECT_EQ(lab05::share_found_inf(pg.rank() == with_inf, &pg), with_inf >= 0)
            << "world " << world << ", rank " << pg.rank() << ", inf on rank " << with_inf;
      });
    }
  }
}

/// 0 when share_found_inf(local, nullptr) returns `local` for both flags, 3 otherwise.
int local_flags_without_communicator() {
  const bool a = lab05::share_found_inf(true, nullptr);
  const bool b = lab05::share_found_inf(false, nullptr);
  return a && !b ? 0 : 3;
}

TEST(Lab05Ranks, WithoutACommunicatorTheFlagIsLocal) {
  // In a child process (gtest's death-test machinery), so that a crash on the null communicator
  // fails this test alone instead of the whole test program.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(local_flags_without_communicator()), ::testing::ExitedWithCode(0), "")
      << "share_found_inf(local, nullptr) must return `local` (exit code 3: a wrong answer; a signal: a crash)";
}

}  // namespace

// The kit's loss scaler (grad_scaler.h): GradScaler's rules on a tiny model, and one decision to
// skip for every rank.
#include "ddplab/grad_scaler.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "ddplab/error.h"
#include "ddplab/dist/process_group.h"
#include "thread_ranks.h"

namespace ddplab::amp {
namespace {

struct Tiny {
  torch::nn::Linear lin{2, 1};
  torch::optim::SGD sgd{lin->parameters(), torch::optim::SGDOptions(0.1)};
  std::vector<torch::Tensor> params() { return lin->parameters(); }
  /// Gradients of x . w (+ b) scaled as the scaler scales the loss; `poison` puts an inf in one.
  void backward(GradScaler& s, bool poison = false) {
    sgd.zero_grad();
    const auto x = torch::tensor({{1.0F, 2.0F}});
    s.scale(lin(x).sum()).backward();
    if (poison) lin->weight.mutable_grad()[0][0] = std::numeric_limits<float>::infinity();
  }
};

TEST(GradScaler, ScalesTheLossAndUnscalesTheGradientsBeforeTheStep) {
  torch::manual_seed(0);
  Tiny t;
  GradScaler s({1024.0, 2.0, 0.5, 2000});
  EXPECT_EQ(s.scale(torch::tensor(3.0F)).item<float>(), 3072.0F);
  const auto w = t.lin->weight.detach().clone();
  t.backward(s);
  ASSERT_TRUE(s.step(t.sgd, t.params()));
  // d(x.w)/dw = x = (1, 2): the step moved w by -0.1 x, not -0.1 x 1024.
  EXPECT_TRUE(torch::allclose(t.lin->weight.detach(), w - 0.1 * torch::tensor({{1.0F, 2.0F}})));
  EXPECT_EQ(s.scale_value(), 1024.0);
  EXPECT_EQ(s.growth_tracker(), 1);
}

TEST(GradScaler, AStepWithInfIsSkippedAndTheScaleBacksOff) {
  Tiny t;
  GradScaler s({1024.0, 2.0, 0.5, 2000});
  t.backward(s);
  s.step(t.sgd, t.params());
  const auto w = t.lin->weight.detach().clone();
  t.backward(s, true);
  EXPECT_FALSE(s.step(t.sgd, t.params()));
  EXPECT_TRUE(torch::equal(t.lin->weight.detach(), w)) << "a step with inf/NaN gradients must not move the model";
  EXPECT_EQ(s.scale_value(), 512.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(GradScaler, TheScaleGrowsAfterGrowthIntervalCleanSteps) {
  Tiny t;
  GradScaler s({8.0, 2.0, 0.5, 3});
  for (int i = 0; i < 2; ++i) {
    t.backward(s);
    s.step(t.sgd, t.params());
  }
  EXPECT_EQ(s.scale_value(), 8.0);
  t.backward(s);
  s.step(t.sgd, t.params());
  EXPECT_EQ(s.scale_value(), 16.0) << "the third clean step in a row doubles the scale";
  EXPECT_EQ(s.growth_tracker(), 0);
  s.load(4.0, 2);
  t.backward(s);
  s.step(t.sgd, t.params());
  EXPECT_EQ(s.scale_value(), 8.0) << "a loaded state continues where it was saved";
}

TEST(GradScaler, EveryRankSkipsWhenAnyRankSawInf) {
  ddplab::testing::run_ranks(2, [](dist::ProcessGroup& pg) {
    Tiny t;
    GradScaler s({1024.0, 2.0, 0.5, 2000}, &pg);
    t.backward(s, pg.rank() == 1);  // only rank 1's gradients overflow
    EXPECT_FALSE(s.step(t.sgd, t.params())) << "rank " << pg.rank();
    EXPECT_EQ(s.scale_value(), 512.0) << "rank " << pg.rank();
  });
}

TEST(GradScaler, OptionsOutsideTheirRangeAreNamed) {
  EXPECT_THROW(GradScaler({0.0, 2.0, 0.5, 1}), ConfigError);
  EXPECT_THROW(GradScaler({1.0, 1.0, 0.5, 1}), ConfigError);
  EXPECT_THROW(GradScaler({1.0, 2.0, 1.5, 1}), ConfigError);
  GradScaler s;
  EXPECT_EQ(s.scale_value(), 65536.0);
  EXPECT_THROW(s.load(-1, 0), ConfigError);
}

}  // namespace
}  // namespace ddplab::amp

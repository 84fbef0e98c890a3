// Lab 05's kit (lab05_kit.h) on synthetic gradients, without a scaler (no student code runs): the
// overflow goes into the documented rank's gradient at the documented steps, skipped steps are
// matched against the injected ones, and fp16 storage is emulated and its flushes counted.
#include "lab05_kit.h"

#include <cmath>

#include <gtest/gtest.h>

namespace {

std::vector<std::pair<std::string, torch::Tensor>> one_param(const torch::Tensor& grad) {
  torch::Tensor p = torch::zeros_like(grad, torch::requires_grad());
  p.mutable_grad() = grad.clone();
  return {{"w", p}};
}

TEST(Lab05Kit, OverflowsGoIntoOneRanksGradientEveryKStepsInTurn) {
  lab05::Flags f;
  f.inject_every = 3;
  auto named = one_param(torch::ones({4}));
  for (int rank = 0; rank < 2; ++rank) {
    lab05::Precision p(f, named);
    std::vector<int64_t> inf_at;
    for (int64_t s = 0; s < 9; ++s) {
      named[0].second.mutable_grad().fill_(1.0);
      p.after_backward(s, rank, 2, nullptr);
      if (std::isinf(named[0].second.grad()[0].item<float>())) inf_at.push_back(s);
    }
    EXPECT_EQ(p.injected(), (std::vector<int64_t>{2, 5, 8}));  // the job's, on every rank
    // Step 2 is overflow 0 (rank 0), step 5 overflow 1 (rank 1), step 8 overflow 2 (rank 0).
    EXPECT_EQ(inf_at, rank == 0 ? (std::vector<int64_t>{2, 8}) : (std::vector<int64_t>{5})) << "rank " << rank;
  }
}

TEST(Lab05Kit, SkippedStepsMatchTheInjectedOnesExactly) {
  lab05::Flags f;
  f.inject_every = 2;
  auto named = one_param(torch::ones({1}));
  lab05::Precision p(f, named);
  for (int64_t s = 0; s < 4; ++s) {
    p.after_backward(s, 0, 1, nullptr);
    p.after_update(s, s % 2 == 0, 1.0);  // steps 1 and 3 skipped: the injected ones
  }
  EXPECT_TRUE(p.skips_match_injected());
  p.after_update(4, false, 1.0);  // one skip too many
  EXPECT_FALSE(p.skips_match_injected());
  EXPECT_EQ(p.skipped(), (std::vector<int64_t>{1, 3, 4}));
}

TEST(Lab05Kit, Fp16StorageIsEmulatedAndItsFlushesCounted) {
  lab05::Flags f;
  f.emulate_fp16 = true;
  // 1e-9 is below fp16's smallest subnormal (5.96e-8): flushed; 0.1 is kept (rounded).
  auto named = one_param(torch::tensor({1e-9f, 0.1f, 0.0f, -1e-9f}));
  lab05::Precision p(f, named);
  p.after_backward(0, 0, 1, nullptr);
  const torch::Tensor g = named[0].second.grad();
  EXPECT_EQ(g[0].item<float>(), 0.0f);
  EXPECT_EQ(g[1].item<float>(), static_cast<float>(c10::Half(0.1f)));
  EXPECT_DOUBLE_EQ(p.fraction_unscaled(), 2.0 / 3.0);  // 2 of the 3 non-zero elements
  EXPECT_DOUBLE_EQ(p.fraction_scaled(), 2.0 / 3.0);    // no scaler: scale 1 both ways
}

TEST(Lab05Kit, TheLowPrecisionIsTheFlagsOrTheDevicesCoursePrecision) {
  lab05::Flags f;
  EXPECT_EQ(f.low(torch::kCPU), torch::kBFloat16);
  f.autocast_dtype = "float16";
  EXPECT_EQ(f.low(torch::kCPU), torch::kHalf);
  f.init_scale = 1024;
  f.growth_interval = 7;
  EXPECT_EQ(f.scaler_options().init_scale, 1024);
  EXPECT_EQ(f.scaler_options().growth_interval, 7);
}

}  // namespace

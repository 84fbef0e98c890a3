// The kit's autocast scope (amp.h, AutocastGuard): on inside, in the requested dtype, and the
// state and dtype before it restored afterwards - also when nested, and when it switches autocast
// off inside an enabled region.
#include "ddplab/amp.h"

#include <gtest/gtest.h>

namespace {

constexpr auto kCpu = torch::DeviceType::CPU;

TEST(AutocastGuard, TurnsAutocastOnInTheLowPrecisionAndRestoresStateAndDtype) {
  ASSERT_FALSE(ddplab::amp::autocast_enabled(kCpu));
  const auto dtype = ddplab::amp::autocast_dtype(kCpu);
  {
    ddplab::amp::AutocastGuard on(kCpu, true);
    EXPECT_TRUE(ddplab::amp::autocast_enabled(kCpu));
    EXPECT_EQ(ddplab::amp::autocast_dtype(kCpu), torch::kBFloat16);
    // A matmul inside runs in bfloat16.
    EXPECT_EQ(torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(), torch::kBFloat16);
    {
      ddplab::amp::AutocastGuard off(kCpu, false);  // recomputation's "as the forward ran": off
      EXPECT_FALSE(ddplab::amp::autocast_enabled(kCpu));
      EXPECT_EQ(torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(), torch::kFloat32);
    }
    EXPECT_TRUE(ddplab::amp::autocast_enabled(kCpu));
  }
  EXPECT_FALSE(ddplab::amp::autocast_enabled(kCpu));
  EXPECT_EQ(ddplab::amp::autocast_dtype(kCpu), dtype);
}

TEST(AutocastGuard, AnOffScopeLeavesAutocastOff) {
  {
    ddplab::amp::AutocastGuard off(kCpu, false);
    EXPECT_FALSE(ddplab::amp::autocast_enabled(kCpu));
  }
  EXPECT_FALSE(ddplab::amp::autocast_enabled(kCpu));
}

}  // namespace

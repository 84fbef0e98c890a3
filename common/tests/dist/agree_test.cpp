// Agreement across ranks (dist/agree.h), with ranks as threads over real Gloo: gathered values
// arrive exactly and in rank order, and a disagreement names the ranks that differ.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "thread_ranks.h"

#include "ddplab/config.h"
#include "ddplab/deepfm.h"
#include "ddplab/dist/agree.h"
#include "ddplab/dist/process_group.h"
#include "ddplab/error.h"

namespace {

using ddplab::dist::ProcessGroup;
using ddplab::testing::run_ranks;

#ifdef DDPLAB_HAVE_GLOO
class Agree : public ::testing::TestWithParam<int> {};

TEST_P(Agree, AllgatherReturnsEveryRanksValuesInRankOrder) {
  const int world = GetParam();
  run_ranks(world, [world](ProcessGroup& pg) {
    // The top bit set: uint64 values must survive the int64 tensors Gloo moves.
    const uint64_t r = static_cast<uint64_t>(pg.rank());
    const auto all = ddplab::dist::allgather_u64(pg, {r, 1000 + r, ~r});
    ASSERT_EQ(all.size(), static_cast<size_t>(world));
    for (int q = 0; q < world; ++q) {
      const uint64_t u = static_cast<uint64_t>(q);
      EXPECT_EQ(all[static_cast<size_t>(q)], (std::vector<uint64_t>{u, 1000 + u, ~u})) << "from rank " << q;
    }
  });
}

TEST_P(Agree, DoublesArriveBitForBitInRankOrder) {
  const int world = GetParam();
  run_ranks(world, [world](ProcessGroup& pg) {
    const double mine = 0.1 * pg.rank() - 1e-300;  // not representable as a fixed-point integer
    const auto all = ddplab::dist::allgather_f64(pg, mine);
    ASSERT_EQ(all.size(), static_cast<size_t>(world));
    for (int q = 0; q < world; ++q) EXPECT_EQ(all[static_cast<size_t>(q)], 0.1 * q - 1e-300) << "from rank " << q;
    const auto two = ddplab::dist::allgather_f64(pg, std::vector<double>{mine, -mine});
    EXPECT_EQ(two.back(), (std::vector<double>{0.1 * (world - 1) - 1e-300, -(0.1 * (world - 1) - 1e-300)}));
  });
}

TEST_P(Agree, EqualValuesAgreeAndADifferentOneNamesItsRank) {
  const int world = GetParam();
  run_ranks(world, [world](ProcessGroup& pg) {
    const auto same = ddplab::dist::compare_across_ranks(pg, 42);
    EXPECT_TRUE(same.same());
    EXPECT_EQ(same.describe(), fmt::format("identical on all {} rank(s)", world));
    if (world < 2) return;
    const int odd = world - 1;  // the last rank disagrees
    const auto diff = ddplab::dist::compare_across_ranks(pg, pg.rank() == odd ? 7 : 42);
    EXPECT_FALSE(diff.same());
    EXPECT_EQ(diff.differ, std::vector<int>{odd});
    EXPECT_EQ(diff.values[static_cast<size_t>(odd)], 7u);
    EXPECT_EQ(diff.describe(), fmt::format("DIFFERENT: rank(s) {} differ from rank 0", odd));
  });
}

TEST_P(Agree, RequireSameThrowsNamingTheFirstDisagreeingRank) {
  const int world = GetParam();
  run_ranks(world, [world](ProcessGroup& pg) {
    EXPECT_NO_THROW(ddplab::dist::require_same_across_ranks(pg, 5, "sample counts", "would hang"));
    if (world < 2) return;
    try {
      ddplab::dist::require_same_across_ranks(pg, 5 + static_cast<uint64_t>(pg.rank()), "sample counts", "would hang");
      ADD_FAILURE() << "no error on rank " << pg.rank();
    } catch (const ddplab::Error& e) {
      EXPECT_NE(std::string(e.what()).find("sample counts differ across ranks (5 on rank 0, 6 on rank 1): would hang"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST_P(Agree, ParametersAgreeUntilOneRankChangesOne) {
  const int world = GetParam();
  run_ranks(world, [world](ProcessGroup& pg) {
    ddplab::DeepFM model;
    ddplab::dist::broadcast_module(pg, *model, 0);  // construction drew different random weights
    std::string digest;
    const auto a = ddplab::dist::compare_parameters(pg, *model, &digest);
    EXPECT_TRUE(a.same());
    EXPECT_EQ(digest.size(), 16u);
    if (world < 2) return;
    if (pg.rank() == 1) {
      torch::NoGradGuard no_grad;
      model->parameters().back().add_(1.0f);
    }
    const auto b = ddplab::dist::compare_parameters(pg, *model);
    EXPECT_EQ(b.differ, std::vector<int>{1});
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Agree, ::testing::Values(1, 2, 3, 4));
#endif

TEST(PerRank, NamesEachRanksFormattedValue) {
  EXPECT_EQ(ddplab::dist::per_rank({0.12, 30.0}, "{:.0f} %"), "rank 0 0 %, rank 1 30 %");
  EXPECT_EQ(ddplab::dist::per_rank({}, "{}"), "");
}

}  // namespace

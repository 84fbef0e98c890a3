// Lab 10's public tests: the contracts of lab10.h. Ranks run as threads with real Gloo groups, and
// DDP + Adam over the whole model (the kit's ddp_adam_step) is the oracle. Run them with
// build/<tree>/bin/lab10_sharding_tests.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lab10.h"
#include "lab10_kit.h"
#include "scratch_dir.h"
#include "thread_ranks.h"
#include "ddplab/dist/loopback.h"
#include "ddplab/optim.h"

namespace {

using ddplab::dist::ProcessGroup;
using ddplab::testing::run_ranks;

// Five tensors of 7, 12, 0, 3 and 41 elements: 63 in all, a boundary inside most of them.
std::vector<int64_t> kNumels{7, 12, 0, 3, 41};

/// kNumels' partitions in units of 4 at 1, 2 and 3 ranks, written out, so that the tests of 10.2,
/// 10.3 and 10.4 do not need 10.1 (and test 10.1's answers below).
lab10::Partition written_out(int world) {
  lab10::Partition p;
  p.total = 63;
  p.align = 4;
  if (world == 1) p.shards = {{0, 63, {{0, 0, 0, 7}, {1, 0, 7, 12}, {3, 0, 19, 3}, {4, 0, 22, 41}}}};
  if (world == 2)
    p.shards = {{0, 32, {{0, 0, 0, 7}, {1, 0, 7, 12}, {3, 0, 19, 3}, {4, 0, 22, 10}}}, {32, 63, {{4, 10, 32, 31}}}};
  if (world == 3) {
    p.shards = {{0, 20, {{0, 0, 0, 7}, {1, 0, 7, 12}, {3, 0, 19, 1}}},
                {20, 40, {{3, 1, 20, 2}, {4, 0, 22, 18}}},
                {40, 63, {{4, 18, 40, 23}}}};
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// 10.1

TEST(Lab10Partition, DeepFmLikeTensorsSplitAsTheContractSays) {
  for (int world : {1, 2, 3}) {
    const lab10::Partition got = lab10::partition(kNumels, world, 4), want = written_out(world);
    ASSERT_EQ(got.world(), world);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(got.shards[r].begin, want.shards[r].begin) << world << " ranks, rank " << r;
      EXPECT_EQ(got.shards[r].end, want.shards[r].end) << world << " ranks, rank " << r;
      EXPECT_EQ(got.shards[r].pieces, want.shards[r].pieces) << world << " ranks, rank " << r;
    }
  }
}

TEST(Lab10Partition, BoundariesAreWholeUnitsAndEveryElementIsOwnedOnce) {
  for (int world : {1, 2, 3, 4, 7}) {
    for (int64_t align : {1, 4, 16}) {
      const lab10::Partition p = lab10::partition(kNumels, world, align);
      EXPECT_EQ(lab10::partition_problem(p, kNumels, world, align), "") << world << " ranks, align " << align;
      EXPECT_EQ(p.total, 63);
      EXPECT_EQ(p.align, align);
    }
  }
}

TEST(Lab10Partition, ATensorThatCrossesABoundaryGivesAPieceToEachRank) {
  // 63 elements in units of 4: 16 units, 8 a rank. Rank 0: [0, 32), rank 1: [32, 63).
  const lab10::Partition p = lab10::partition(kNumels, 2, 4);
  ASSERT_EQ(p.world(), 2);
  EXPECT_EQ(p.shards[0].begin, 0);
  EXPECT_EQ(p.shards[0].end, 32);
  EXPECT_EQ(p.shards[1].begin, 32);
  EXPECT_EQ(p.shards[1].end, 63);
  // Tensor 4 (41 elements at flat 22) spans both: 10 elements on rank 0, 31 on rank 1.
  EXPECT_EQ(p.shards[0].pieces.back(), (lab10::Piece{4, 0, 22, 10}));
  EXPECT_EQ(p.shards[1].pieces.front(), (lab10::Piece{4, 10, 32, 31}));
  EXPECT_EQ(p.shards[1].pieces.size(), 1u);
  EXPECT_EQ(p.chunk(), 32);
}

TEST(Lab10Partition, ShardsDifferByAtMostOneUnitAndEmptyTensorsHaveNoPiece) {
  const lab10::Partition p = lab10::partition(kNumels, 3, 4);  // 16 units: 5, 5, 6
  EXPECT_EQ(p.shards[0].numel(), 20);
  EXPECT_EQ(p.shards[1].numel(), 20);
  EXPECT_EQ(p.shards[2].numel(), 23);  // 6 units, the last one partial
  for (const auto& s : p.shards)
    for (const auto& piece : s.pieces) EXPECT_NE(piece.param, 2) << "tensor 2 has no elements";
}

TEST(Lab10Partition, MoreRanksThanUnitsLeavesSomeShardsEmpty) {
  const lab10::Partition p = lab10::partition({5}, 4, 4);  // 2 units over 4 ranks
  EXPECT_EQ(lab10::partition_problem(p, {5}, 4, 4), "");
  int empty = 0;
  for (const auto& s : p.shards) empty += s.numel() == 0 ? 1 : 0;
  EXPECT_EQ(empty, 2);
}

TEST(Lab10Partition, NoRanksOrNoUnitIsAConfigError) {
  EXPECT_THROW(lab10::partition(kNumels, 0, 4), ddplab::ConfigError);
  EXPECT_THROW(lab10::partition(kNumels, 2, 0), ddplab::ConfigError);
}

// ---------------------------------------------------------------------------------------------
// 10.2 and 10.3: a few steps of each rank's own gradients, against DDP + Adam.

// Values from formulas, not the global random generator: the ranks are threads, and one generator
// seeded from several threads at once gives each whatever the others left.
std::vector<torch::Tensor> make_params(uint64_t seed) {
  std::vector<torch::Tensor> p;
  for (size_t i = 0; i < kNumels.size(); ++i) {
    const double phase = 0.37 * static_cast<double>(seed) + static_cast<double>(i);
    p.push_back(torch::cos(torch::arange(kNumels[i], torch::kFloat32) * 0.3 + phase).set_requires_grad(true));
  }
  return p;
}

/// Rank r's gradients at step s: different on every rank and step.
void set_grads(std::vector<torch::Tensor>& params, int rank, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    const double phase = 1.3 * rank + 0.7 * step + static_cast<double>(i);
    params[i].mutable_grad() =
        torch::sin(torch::arange(params[i].numel(), torch::kFloat32) * (0.5 + 0.1 * step) + phase);
  }
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].numel() > 0) d = std::max(d, (a[i].detach() - b[i].detach()).abs().max().item<double>());
  }
  return d;
}

using StepFn = void (*)(ddplab::dist::Communicator&, const lab10::Partition&, const std::vector<torch::Tensor>&,
                        lab10::ShardState&);

/// Four steps of `step` and of DDP + Adam from the same start, at `world` thread ranks.
void expect_parity(int world, StepFn step, bool grads_released) {
  run_ranks(world, [&](ProcessGroup& pg) {
    auto params = make_params(7), oracle = make_params(7);
    torch::optim::Adam adam(oracle, torch::optim::AdamOptions(0.01));
    const lab10::Partition p = written_out(world);
    lab10::ShardState state = lab10::make_shard_state(p, pg.rank(), params, 0.01);
    for (int s = 0; s < 4; ++s) {
      set_grads(params, pg.rank(), s);
      set_grads(oracle, pg.rank(), s);
      step(pg, p, params, state);
      lab10::ddp_adam_step(pg, oracle, adam);
      ASSERT_LE(max_diff(params, oracle), 1e-6) << "rank " << pg.rank() << " of " << world << ", step " << s;
      if (grads_released) {
        for (const auto& t : params) EXPECT_FALSE(t.grad().defined()) << "the model's gradients are released";
      }
    }
    // Adam's state covers this rank's shard only.
    const int64_t shard = p.shards[static_cast<size_t>(pg.rank())].numel();
    ASSERT_NE(state.adam, nullptr);
    EXPECT_EQ(ddplab::optim::state_bytes(*state.adam), 2 * 4 * shard) << "rank " << pg.rank();
    EXPECT_EQ(state.param.numel(), shard);
  });
}

TEST(Lab10Zero1, ParametersEqualDdpAdamAtOneTwoAndThreeRanks) {
  for (int world : {1, 2, 3}) expect_parity(world, &lab10::zero1_step, false);
}

TEST(Lab10Zero1, TheFirstStepMakesAnAdamOverTheShardAloneAndStepsIt) {
  ddplab::dist::Loopback comm;
  auto params = make_params(3);
  const lab10::Partition p = written_out(1);
  lab10::ShardState s = lab10::make_shard_state(p, 0, params, 0.5);
  lab10::shard_step(comm, p, params, s, torch::ones({p.total}));
  ASSERT_NE(s.adam, nullptr);
  ASSERT_EQ(s.adam->param_groups().size(), 1u);
  ASSERT_EQ(s.adam->param_groups()[0].params().size(), 1u);
  EXPECT_TRUE(s.adam->param_groups()[0].params()[0].is_same(s.param)) << "Adam over the shard's own tensor";
  EXPECT_DOUBLE_EQ(static_cast<const torch::optim::AdamOptions&>(s.adam->param_groups()[0].options()).lr(), 0.5);
  EXPECT_EQ(lab10::moments_of(s).step, 1);
  // Adam's first step moves every element by lr against the gradient's sign: -0.5 each.
  EXPECT_TRUE(torch::allclose(lab10::flatten(params, lab10::numels_of(params), p.total),
                              lab10::flatten(make_params(3), lab10::numels_of(params), p.total) - 0.5));
}

TEST(Lab10Zero2, ParametersEqualDdpAdamAndOnlyTheShardsGradientIsKept) {
  for (int world : {1, 2, 3}) expect_parity(world, &lab10::zero2_step, true);
}

TEST(Lab10Zero2, TheGradientIsReduceScatteredAveragedAndReleased) {
  run_ranks(3, [](ProcessGroup& pg) {
    auto params = make_params(5);
    const lab10::Partition p = written_out(3);
    set_grads(params, pg.rank(), 0);
    pg.reset_stats();
    const torch::Tensor mine = lab10::reduce_scatter_grads(pg, p, params);
    const auto& ops = pg.stats().ops;
    EXPECT_EQ(ops[static_cast<size_t>(ddplab::dist::Op::kReduceScatter)].calls, 1);
    EXPECT_EQ(pg.stats().total_calls(), 1) << "one reduce-scatter, nothing else";
    for (const auto& t : params) EXPECT_FALSE(t.grad().defined()) << "the model's gradients are released";
    // The mean of the three ranks' gradients over this rank's shard.
    torch::Tensor mean = torch::zeros({p.total});
    for (int r = 0; r < 3; ++r) {
      auto other = make_params(5);
      set_grads(other, r, 0);
      mean += lab10::flat_grads(other, p.total) / 3;
    }
    const auto& s = p.shards[static_cast<size_t>(pg.rank())];
    ASSERT_EQ(mine.numel(), s.numel());
    EXPECT_TRUE(torch::allclose(mine, mean.slice(0, s.begin, s.end), 1e-6, 1e-6)) << "rank " << pg.rank();
  });
}

// ---------------------------------------------------------------------------------------------
// 10.4

class Lab10Checkpoint : public ddplab::testing::ScratchTest {
 protected:
  std::string dir() const { return scratch_.dir().string(); }
};

/// A state of `p`'s shard `rank` after two steps of made-up gradients (moments not zero).
lab10::ShardState trained_state(const lab10::Partition& p, int rank, const std::vector<torch::Tensor>& params) {
  lab10::ShardState s = lab10::make_shard_state(p, rank, params, 0.01);
  s.adam = std::make_unique<torch::optim::Adam>(std::vector<torch::Tensor>{s.param}, torch::optim::AdamOptions(s.lr));
  for (int k = 0; k < 2; ++k) {
    s.param.mutable_grad() = torch::sin(torch::arange(s.param.numel(), torch::kFloat32) + k);
    s.adam->step();
  }
  return s;
}

TEST_F(Lab10Checkpoint, ShardsSavedByTwoRanksLoadBitIdenticalAtOneAndThree) {
  auto params = make_params(11);
  const lab10::Partition two = written_out(2);
  std::vector<lab10::ShardState> saved;
  for (int r = 0; r < 2; ++r) {
    saved.push_back(trained_state(two, r, params));
    lab10::save_shard(dir(), two, r, saved.back());
  }
  auto whole = [&](const std::vector<lab10::ShardState>& states, auto get) {
    std::vector<torch::Tensor> parts;
    for (const auto& s : states) parts.push_back(get(s).reshape({-1}));
    return torch::cat(parts);
  };
  auto values = [](const lab10::ShardState& s) { return s.param.detach(); };
  auto m1 = [](const lab10::ShardState& s) { return lab10::moments_of(s).exp_avg; };
  auto m2 = [](const lab10::ShardState& s) { return lab10::moments_of(s).exp_avg_sq; };
  for (int world : {1, 2, 3}) {
    const lab10::Partition p = written_out(world);
    std::vector<lab10::ShardState> loaded;
    for (int r = 0; r < world; ++r) {
      loaded.push_back(lab10::make_shard_state(p, r, make_params(99), 0.01));  // other values to overwrite
      lab10::load_shard(dir(), p, r, loaded.back());
      EXPECT_EQ(lab10::moments_of(loaded.back()).step, 2) << world << " ranks, rank " << r;
    }
    EXPECT_TRUE(torch::equal(whole(loaded, values), whole(saved, values))) << world << " ranks";
    EXPECT_TRUE(torch::equal(whole(loaded, m1), whole(saved, m1))) << world << " ranks";
    EXPECT_TRUE(torch::equal(whole(loaded, m2), whole(saved, m2))) << world << " ranks";
  }
}

TEST_F(Lab10Checkpoint, AShardNoFileCoversIsAnErrorNamingTheFolder) {
  auto params = make_params(17);
  const lab10::Partition two = written_out(2);
  lab10::ShardState s = trained_state(two, 0, params);
  lab10::save_shard(dir(), two, 0, s);
  lab10::ShardState other = lab10::make_shard_state(two, 1, params, 0.01);
  try {
    lab10::load_shard(dir(), two, 1, other);  // rank 1's file was never written
    ADD_FAILURE() << "loaded a shard no file holds";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir()), std::string::npos) << e.what();
  }
}

}  // namespace

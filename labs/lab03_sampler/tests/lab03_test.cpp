// Public tests of lab 03's exercises, run against the tree being built: on the solutions they
// pass; on the skeletons each fails with "exercise 03.x is not implemented yet".
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "ddplab/data/loader.h"
#include "sampler.h"

namespace {

using lab03::ShardMode;
using lab03::TailPolicy;

std::vector<uint64_t> iota(uint64_t n, uint64_t first = 0) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<uint64_t> sorted(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// ---------------------------------------------------------------------------------------------
// 03.1 shard

TEST(Lab03Shard, SharesAreDisjointCoveringAndEqual) {
  for (ShardMode mode : {ShardMode::kStrided, ShardMode::kContiguous}) {
    for (int world = 1; world <= 4; ++world) {
      for (uint64_t per_rank : {1u, 5u, 7u}) {
        // Distinct values in a scrambled order, so positions and values cannot be confused.
        const auto order = ddplab::data::shuffled_order(per_rank * static_cast<uint64_t>(world), 9, 0);
        std::vector<uint64_t> all;
        for (int r = 0; r < world; ++r) {
          const auto s = lab03::shard(order, r, world, mode);
          EXPECT_EQ(s.size(), per_rank) << "rank " << r << " of " << world;
          all.insert(all.end(), s.begin(), s.end());
        }
        EXPECT_EQ(sorted(all), sorted(order))
            << "world " << world << ", " << lab03::shard_mode_name(mode) << ": every sample on exactly one rank";
      }
    }
  }
}

TEST(Lab03Shard, StridedAndContiguousLayouts) {
  const std::vector<uint64_t> order = {10, 11, 12, 13, 14, 15, 16, 17, 18};
  EXPECT_EQ(lab03::shard(order, 0, 3, ShardMode::kStrided), (std::vector<uint64_t>{10, 13, 16}));
  EXPECT_EQ(lab03::shard(order, 2, 3, ShardMode::kStrided), (std::vector<uint64_t>{12, 15, 18}));
  EXPECT_EQ(lab03::shard(order, 0, 3, ShardMode::kContiguous), (std::vector<uint64_t>{10, 11, 12}));
  EXPECT_EQ(lab03::shard(order, 2, 3, ShardMode::kContiguous), (std::vector<uint64_t>{16, 17, 18}));
  EXPECT_EQ(lab03::shard(order, 0, 1, ShardMode::kStrided), order);
}

TEST(Lab03Shard, StridedStepsAreOneProcesssGlobalBatches) {
  // N ranks x batch B: step k of all ranks together takes exactly samples [k*N*B, (k+1)*N*B) of
  // the order, the k-th batch of one process at batch N*B — so the runs can match step by step.
  const int64_t B = 4;
  for (int world = 1; world <= 4; ++world) {
    const auto order = ddplab::data::shuffled_order(static_cast<uint64_t>(world * B * 3), 5, 1);
    std::vector<std::vector<uint64_t>> shards;
    for (int r = 0; r < world; ++r) shards.push_back(lab03::shard(order, r, world, ShardMode::kStrided));
    for (int64_t k = 0; k < 3; ++k) {
      std::vector<uint64_t> step;
      for (const auto& s : shards) step.insert(step.end(), s.begin() + k * B, s.begin() + (k + 1) * B);
      const std::vector<uint64_t> global(order.begin() + k * world * B, order.begin() + (k + 1) * world * B);
      EXPECT_EQ(sorted(step), sorted(global)) << "world " << world << " step " << k;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 03.2 epoch_order

TEST(Lab03Order, APermutationTheSameOnEveryCall) {
  for (uint64_t n : {1u, 2u, 17u, 1000u}) {
    const auto a = lab03::epoch_order(n, 42, 3, true);
    EXPECT_EQ(sorted(a), iota(n)) << "a permutation of 0.." << n - 1;
    EXPECT_EQ(lab03::epoch_order(n, 42, 3, true), a) << "every rank must compute the same order";
  }
}

TEST(Lab03Order, ANewOrderEveryEpochAndSeed) {
  const auto e0 = lab03::epoch_order(1000, 7, 0, true);
  const auto e1 = lab03::epoch_order(1000, 7, 1, true);
  const auto e2 = lab03::epoch_order(1000, 7, 2, true);
  EXPECT_NE(e0, e1) << "forgetting the epoch repeats the same order every epoch";
  EXPECT_NE(e1, e2);
  EXPECT_NE(e0, iota(1000)) << "shuffled";
  EXPECT_NE(lab03::epoch_order(1000, 8, 0, true), e0) << "the seed matters too";
}

TEST(Lab03Order, NoShuffleIsTheNaturalOrder) {
  EXPECT_EQ(lab03::epoch_order(10, 7, 0, false), iota(10));
  EXPECT_EQ(lab03::epoch_order(10, 7, 5, false), iota(10));
}

// ---------------------------------------------------------------------------------------------
// 03.3 fit_tail

TEST(Lab03Tail, PadRepeatsTheStartOfTheOrder) {
  const std::vector<uint64_t> order = {9, 8, 7, 6, 5, 4, 3};  // 7 samples
  EXPECT_EQ(lab03::fit_tail(order, 4, TailPolicy::kPad), (std::vector<uint64_t>{9, 8, 7, 6, 5, 4, 3, 9}));
  EXPECT_EQ(lab03::fit_tail(order, 3, TailPolicy::kPad), (std::vector<uint64_t>{9, 8, 7, 6, 5, 4, 3, 9, 8}));
  EXPECT_EQ(lab03::fit_tail(order, 7, TailPolicy::kPad), order) << "already a multiple: unchanged";
  EXPECT_EQ(lab03::fit_tail(order, 1, TailPolicy::kPad), order);
  // Shorter than what is missing: from the start again.
  EXPECT_EQ(lab03::fit_tail({4, 2}, 4, TailPolicy::kPad), (std::vector<uint64_t>{4, 2, 4, 2}));
  EXPECT_EQ(lab03::fit_tail({4}, 3, TailPolicy::kPad), (std::vector<uint64_t>{4, 4, 4}));
}

TEST(Lab03Tail, DropRemovesTheLastSamples) {
  const std::vector<uint64_t> order = {9, 8, 7, 6, 5, 4, 3};
  EXPECT_EQ(lab03::fit_tail(order, 4, TailPolicy::kDrop), (std::vector<uint64_t>{9, 8, 7, 6}));
  EXPECT_EQ(lab03::fit_tail(order, 3, TailPolicy::kDrop), (std::vector<uint64_t>{9, 8, 7, 6, 5, 4}));
  EXPECT_EQ(lab03::fit_tail(order, 7, TailPolicy::kDrop), order);
}

TEST(Lab03Tail, EveryRankTakesTheSameNumberOfSamples) {
  for (TailPolicy tail : {TailPolicy::kPad, TailPolicy::kDrop}) {
    for (int world = 1; world <= 4; ++world) {
      for (uint64_t n : {1u, 5u, 13u, 101u}) {
        const auto fitted = lab03::fit_tail(iota(n), world, tail);
        EXPECT_EQ(fitted.size() % static_cast<size_t>(world), 0u);
        const size_t w = static_cast<size_t>(world);
        const size_t want = tail == TailPolicy::kPad ? (n + w - 1) / w * w : n / w * w;
        EXPECT_EQ(fitted.size(), want) << "n " << n << " world " << world;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 03.4 stratify

/// Labels indexed by sample id: ids [0, n) with `positives` clicks at pseudo-random ids.
// 03.1's shard written out for 03.4's tests (on orders whose length the world size divides), so
// that they test stratify alone and do not stop at the student's 03.1.
std::vector<uint64_t> reference_shard(const std::vector<uint64_t>& order, int rank, int world, ShardMode mode) {
  const size_t n = order.size(), w = static_cast<size_t>(world), r = static_cast<size_t>(rank);
  std::vector<uint64_t> out;
  if (mode == ShardMode::kStrided) {
    for (size_t i = r; i < n; i += w) out.push_back(order[i]);
  } else {
    const size_t per = n / w;
    out.assign(order.begin() + static_cast<std::ptrdiff_t>(r * per),
               order.begin() + static_cast<std::ptrdiff_t>((r + 1) * per));
  }
  return out;
}

std::vector<uint8_t> make_labels(uint64_t n, uint64_t positives) {
  std::vector<uint8_t> labels(n, 0);
  const auto ids = ddplab::data::shuffled_order(n, 3, 0);
  for (uint64_t i = 0; i < positives; ++i) labels[ids[i]] = 1;
  return labels;
}

TEST(Lab03Stratify, EveryRankGetsTheGlobalClickRate) {
  for (ShardMode mode : {ShardMode::kStrided, ShardMode::kContiguous}) {
    for (int world = 1; world <= 4; ++world) {
      const uint64_t n = 60 * static_cast<uint64_t>(world);
      const auto labels = make_labels(n, n / 4 + 1);
      // Click logs grouped by outcome: negatives first, then positives (the worst case).
      std::vector<uint64_t> order = iota(n);
      std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return labels[a] < labels[b]; });
      const auto result = lab03::stratify(order, labels, world, mode);
      EXPECT_EQ(sorted(result), iota(n)) << "the same samples, reordered";
      const double global = static_cast<double>(n / 4 + 1) / static_cast<double>(n);
      for (int r = 0; r < world; ++r) {
        const auto s = reference_shard(result, r, world, mode);
        ASSERT_EQ(s.size(), 60u);
        double clicks = 0;
        for (uint64_t i : s) clicks += labels[i];
        EXPECT_LE(std::abs(clicks / 60.0 - global), 1.0 / 60.0 + 1e-12)
            << lab03::shard_mode_name(mode) << " world " << world << " rank " << r << ": click rate " << clicks / 60.0
            << " vs global " << global;
      }
    }
  }
}

TEST(Lab03Stratify, KeepsTheOrderWithinEachClassAndSpreadsClicks) {
  const int world = 3;
  const uint64_t n = 90;
  const auto labels = make_labels(n, 20);
  const auto order = ddplab::data::shuffled_order(n, 11, 2);
  for (ShardMode mode : {ShardMode::kStrided, ShardMode::kContiguous}) {
    const auto result = lab03::stratify(order, labels, world, mode);
    std::map<uint64_t, size_t> position;
    for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
    for (int r = 0; r < world; ++r) {
      const auto s = reference_shard(result, r, world, mode);
      size_t last_pos = 0, last_neg = 0;
      bool any_pos = false, any_neg = false;
      size_t p = 0;
      for (uint64_t i : s) p += labels[i];
      size_t seen = 0;
      for (size_t j = 0; j < s.size(); ++j) {
        const size_t at = position.at(s[j]);
        size_t& last = labels[s[j]] ? last_pos : last_neg;
        bool& any = labels[s[j]] ? any_pos : any_neg;
        if (any) {
          EXPECT_GT(at, last) << "rank " << r << ": sample " << s[j] << " moved ahead of its class";
        }
        last = at;
        any = true;
        seen += labels[s[j]];
        // After j+1 samples, the positives seen are floor((j+1) p / m): evenly spread.
        EXPECT_EQ(seen, (j + 1) * p / s.size()) << "rank " << r << " after " << j + 1 << " samples";
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The sampler built from the four exercises.

TEST(Lab03Sampler, EverySampleOncePerEpochPlusPaddingAndANewOrderEachEpoch) {
  const uint64_t n = 103;  // odd: the tail matters
  for (int world = 1; world <= 4; ++world) {
    std::vector<uint64_t> first_epoch;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      std::vector<uint64_t> all;
      uint64_t padding = 0;
      for (int r = 0; r < world; ++r) {
        lab03::SamplerConfig cfg;
        cfg.seed = 4;
        lab03::DistributedSampler s(n, r, world, cfg);
        s.set_epoch(epoch);
        EXPECT_EQ(s.num_samples(), (n + static_cast<uint64_t>(world) - 1) / static_cast<uint64_t>(world));
        all.insert(all.end(), s.indices().begin(), s.indices().end());
        padding = s.padding();
        EXPECT_LT(s.padding(), static_cast<uint64_t>(world));
        if (r == 0 && epoch == 0) first_epoch = s.indices();
        if (r == 0 && epoch == 1) {
          EXPECT_NE(s.indices(), first_epoch) << "set_epoch must reshuffle";
        }
      }
      EXPECT_EQ(all.size(), n + padding);
      std::set<uint64_t> unique(all.begin(), all.end());
      EXPECT_EQ(unique.size(), n) << "world " << world << " epoch " << epoch << ": every sample at least once";
    }
  }
}

}  // namespace

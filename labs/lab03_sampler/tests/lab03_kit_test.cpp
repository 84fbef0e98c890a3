// Lab 03's kit (lab03_kit.h): the coverage arithmetic on ledgers built here - disjoint shards that
// cover [0, n) are every sample once, with a padded sample counted twice and a dropped one never;
// duplicates across ranks and a cut epoch are told apart - and the flags parsed into the
// sampler's configuration. No student code runs here.
#include "lab03_kit.h"

#include <gtest/gtest.h>

#include "ddplab/report.h"

namespace {

/// (count, set digest) of a rank that saw `indices`.
std::vector<uint64_t> seen(const std::vector<uint64_t>& indices) {
  ddplab::SampleLedger l;
  l.add(indices);
  return {l.count(), l.set_digest()};
}

TEST(Lab03Kit, DisjointShardsThatCoverTheSetAreEverySampleOnce) {
  const auto c = lab03::coverage_of({seen({0, 2, 4}), seen({1, 3, 0})}, {0}, {}, 3, 5);  // 0 padded onto rank 1
  EXPECT_TRUE(c.complete);
  EXPECT_TRUE(c.covered);
  EXPECT_EQ(c.processed, 6u);
  const auto dropped = lab03::coverage_of({seen({0, 2}), seen({1, 3})}, {}, {4}, 2, 5);
  EXPECT_TRUE(dropped.covered);
}

TEST(Lab03Kit, DuplicatesAcrossRanksAndACutEpochAreNotCoverage) {
  const auto dup = lab03::coverage_of({seen({0, 1, 2}), seen({0, 1, 2})}, {}, {}, 3, 6);
  EXPECT_TRUE(dup.complete);
  EXPECT_FALSE(dup.covered);
  const auto cut = lab03::coverage_of({seen({0}), seen({1})}, {}, {}, 3, 6);
  EXPECT_FALSE(cut.complete);
  EXPECT_FALSE(cut.covered);
}

TEST(Lab03Kit, TheFlagsBecomeTheSamplersConfiguration) {
  lab03::Flags f;
  f.shard = "contiguous";
  f.tail = "drop";
  f.sampler.stratify = true;
  const auto c = f.config(42);
  EXPECT_EQ(c.seed, 42u);
  EXPECT_EQ(c.mode, lab03::ShardMode::kContiguous);
  EXPECT_EQ(c.tail, lab03::TailPolicy::kDrop);
  EXPECT_TRUE(c.stratify);
}

}  // namespace

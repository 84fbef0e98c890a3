// Lab 02's kit (lab02_kit.h): the bill of an epoch counts N copies of one sample set as one
// unique set and N x the work, and disjoint sets as no repeated work. No student code runs here.
#include "lab02_kit.h"

#include <gtest/gtest.h>

namespace {

TEST(Lab02Kit, RanksOnTheSameSamplesRepeatRankZerosWork) {
  const lab02::Bill b = lab02::bill_of({{5000, 77}, {5000, 77}}, 0, 2.0);
  EXPECT_EQ(b.processed, 10000u);
  EXPECT_EQ(b.unique, 5000u);
  EXPECT_EQ(b.distinct_sets, 1u);
  EXPECT_EQ(b.repeated, 1);
  EXPECT_NE(b.describe().find("2 rank(s) processed 10000 samples, 5000 of them unique"), std::string::npos);
  EXPECT_NE(b.describe().find("1 of 2 processes repeated rank 0's work (2.0x"), std::string::npos);
  EXPECT_DOUBLE_EQ(b.json()["unique_per_s"].get<double>(), 2500.0);
}

TEST(Lab02Kit, DisjointShardsRepeatNothing) {
  const lab02::Bill b = lab02::bill_of({{2500, 11}, {2500, 12}, {0, 13}}, 3, 1.0);
  EXPECT_EQ(b.unique, 5000u);
  EXPECT_EQ(b.repeated, 0);
  EXPECT_EQ(b.json()["epoch"], 3);
}

}  // namespace

// Check kind scaling: unique samples per second from 1 to N ranks against the reference
// efficiency, calibrated by check id or the spec's.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

std::vector<uint64_t> range(uint64_t from, uint64_t to, uint64_t step = 1) {
  std::vector<uint64_t> v;
  for (uint64_t i = from; i < to; i += step) v.push_back(i);
  return v;
}

json timed(const std::vector<uint64_t>& idx, double wall) {
  auto rep = good_report();
  rep["epochs"] = json::array({epoch_of(idx, 1)});
  rep["phases"]["wall"] = wall;
  return rep;
}

class ScalingCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "one"

[[run]]
name = "two"
ranks = 2

[[check]]
id = "scales"
kind = "scaling"
name = "scales"
runs = ["one", "two"]
reference = 0.9
min_relative = 0.8
)");
    add_run("one", {timed(range(0, 1000), 10.0)});
  }
};

TEST_F(ScalingCheck, HalfTheTimeOnTwoRanksScales) {
  add_run("two", {timed(range(0, 1000, 2), 5.0), timed(range(1, 1000, 2), 5.0)});
  const auto r = grade("scales");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_DOUBLE_EQ(*r.figure, 1.0);
}

TEST_F(ScalingCheck, RanksRepeatingEachOthersWorkDoNotScale) {
  add_run("two", {timed(range(0, 1000), 10.0), timed(range(0, 1000), 10.0)});  // no sampler: one copy unique
  const auto r = grade("scales");
  EXPECT_TRUE(has(r, Status::kFailed, "every rank trained on the same samples: 50% of the samples"));
  EXPECT_DOUBLE_EQ(*r.figure, 0.5);
  // A slow machine's reference (by check id) under which 0.5 would clear the bar: the repeats,
  // counted exactly, still fail it, and the diagnosis says that the timing alone would not.
  calibration_.values["lab09_x/scales"] = 0.6;
  const auto slow = grade("scales");
  EXPECT_TRUE(has(slow, Status::kFailed, "the efficiency alone clears the bar on this machine")) << slow.diagnosis;
  EXPECT_NE(slow.diagnosis.find("a DistributedSampler"), std::string::npos) << slow.diagnosis;
}

TEST_F(ScalingCheck, OverlappingShardsCountTheirDistinctSamplesOnly) {
  // Each rank takes 500 samples in the time a correct shard takes, but the second block starts 2
  // positions after the first (rank x world instead of rank x share): 1,000 processed, 502
  // distinct. Counted as min(processed, n) this scaled perfectly.
  add_run("two", {timed(range(0, 500), 5.0), timed(range(2, 502), 5.0)});
  const auto r = grade("scales");
  EXPECT_TRUE(has(r, Status::kFailed, "50% of the samples the ranks processed were repeats"));
  EXPECT_NEAR(*r.figure, 0.502, 1e-9);
  EXPECT_NE(r.observed.find("502 distinct of 1000 samples processed"), std::string::npos) << r.observed;
}

TEST_F(ScalingCheck, OverlappingShardsFailEvenWhenTheirTimingClearsTheBar) {
  // The overlap of the test above, measured in a quiet moment: the distinct samples alone give an
  // efficiency of 1.004 >= 0.72. Half the work is still repeats, and a grade must not depend on
  // the moment it was measured.
  add_run("two", {timed(range(0, 500), 2.5), timed(range(2, 502), 2.5)});
  const auto r = grade("scales");
  EXPECT_NEAR(*r.figure, 1.004, 1e-9);
  EXPECT_TRUE(has(r, Status::kFailed, "50% of the samples the ranks processed were repeats")) << r.observed;
  EXPECT_NE(r.diagnosis.find("the repeats are what fails the check"), std::string::npos) << r.diagnosis;
}

TEST_F(ScalingCheck, AFewRepeatsFromPaddingPass) {
  // A sampler pads the last shard with up to W - 1 repeats, or a rank's block overlaps by a few:
  // 10 repeats of 1,010 processed (1%) are under the 5% that fails.
  add_run("two", {timed(range(0, 510), 5.05), timed(range(500, 1000), 5.05)});
  const auto r = grade("scales");
  EXPECT_TRUE(has(r, Status::kPassed)) << r.observed << " " << r.diagnosis;
  EXPECT_NE(r.observed.find("1000 distinct of 1010 samples processed"), std::string::npos) << r.observed;
}

TEST_F(ScalingCheck, WithoutTheBitmapsTheCountIsAnUpperBound) {
  // Reports of an older kit (no `seen`): the digests cannot count an overlap, so the check counts
  // at most min(processed, n) and says so.
  auto a = timed(range(0, 500), 5.0), b = timed(range(2, 502), 5.0);
  a["epochs"][0].erase("seen");
  b["epochs"][0].erase("seen");
  add_run("two", {a, b});
  const auto r = grade("scales");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_NE(r.observed.find("(at most: the reports carry no sample bitmaps)"), std::string::npos) << r.observed;
}

TEST_F(ScalingCheck, AMissingWallTimeIsMalformed) {
  auto rep = timed(range(0, 1000, 2), 5.0);
  rep["phases"].erase("wall");
  add_run("two", {rep, rep});
  EXPECT_TRUE(has(grade("scales"), Status::kFailed, "outputs are missing or malformed"));
}

TEST_F(ScalingCheck, TheFirstRunHasOneRank) {
  EXPECT_NE(load_error("[[run]]\nname = \"a\"\nranks = 2\n\n[[run]]\nname = \"b\"\nranks = 2\n\n[[check]]\nid = \"t\"\n"
                       "kind = \"scaling\"\nname = \"n\"\nruns = [\"a\", \"b\"]\n")
                .find("the first run, 'a', must have 1 rank"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

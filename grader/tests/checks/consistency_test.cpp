// Check kind consistency: the ranks' parameter digests at the start and the end.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class ConsistencyCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "r"
ranks = 2

[[check]]
id = "both"
kind = "consistency"
name = "same parameters"
run = "r"

[[check]]
id = "start"
kind = "consistency"
name = "same start"
run = "r"
at = "start"
diagnosis = "lab wording: broadcast them"
)");
  }
};

TEST_F(ConsistencyCheck, PassesWhenEveryRankHoldsTheSameParameters) {
  add_run("r", {good_report(), good_report()});
  EXPECT_TRUE(has(grade("both"), Status::kPassed));
}

TEST_F(ConsistencyCheck, SaysWhenTheyDiverged) {
  auto rep = good_report();
  rep["params"]["initial_digest"] = "00000000000000ff";
  add_run("r", {good_report(), rep});
  EXPECT_TRUE(has(grade("both"), Status::kFailed, "initial weights not broadcast from rank 0"));
  EXPECT_TRUE(has(grade("start"), Status::kFailed, "lab wording: broadcast them"));  // the spec's diagnosis
  rep = good_report();
  rep["params"]["final_digest"] = "00000000000000ff";
  add_run("r", {good_report(), rep});
  EXPECT_TRUE(has(grade("both"), Status::kFailed, "gradients are not synchronised"));
  EXPECT_TRUE(has(grade("start"), Status::kPassed));
}

TEST_F(ConsistencyCheck, AMissingDigestIsMalformed) {
  auto rep = good_report();
  rep["params"].erase("final_digest");
  add_run("r", {good_report(), rep});
  const auto r = grade("both");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 1's report has no params.final_digest");
}

TEST_F(ConsistencyCheck, AtIsOneOfItsChoicesAndTheRunHasSeveralRanks) {
  EXPECT_NE(load_error(
                "[[run]]\nname = \"r\"\nranks = 2\n\n[[check]]\nid = \"t\"\nkind = \"consistency\"\nname = \"n\"\n"
                "run = \"r\"\nat = \"middle\"\n")
                .find("parameter 'at' is 'middle'; expected one of: start, end, both"),
            std::string::npos);
  EXPECT_NE(load_error(
                "[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"consistency\"\nname = \"n\"\nrun = \"r\"\n")
                .find("consistency needs 2 or more"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

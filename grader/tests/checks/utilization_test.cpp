// Check kind utilization: the slowest rank's compute / wall against min_busy.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class UtilizationCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(
        "[[run]]\nname = \"r\"\nranks = 2\n\n[[check]]\nid = \"busy\"\nkind = \"utilization\"\nname = \"busy\"\nrun = "
        "\"r\"\n"
        "min_busy = 0.8\n");
  }
};

TEST_F(UtilizationCheck, PassesWhenTheSlowestRankIsBusyEnough) {
  add_run("r", {good_report(), good_report()});  // 3.5 / 4.0
  const auto r = grade("busy");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_DOUBLE_EQ(*r.figure, 0.875);
}

TEST_F(UtilizationCheck, FailsOnTheIdleRank) {
  auto idle = good_report();
  idle["phases"]["compute"] = 2.0;
  add_run("r", {good_report(), idle});
  const auto r = grade("busy");
  EXPECT_TRUE(has(r, Status::kFailed, "the device idles"));
  EXPECT_NE(r.observed.find("50.0% on rank 1"), std::string::npos) << r.observed;
}

TEST_F(UtilizationCheck, AMistypedFigureIsMalformed) {
  auto rep = good_report();
  rep["phases"]["wall"] = "four";
  add_run("r", {good_report(), rep});
  const auto r = grade("busy");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 1's report: phases.wall has the wrong type");
}

TEST_F(UtilizationCheck, MinBusyIsAFraction) {
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"utilization\"\nname = \"n\"\nrun = "
                       "\"r\"\nmin_busy = 90\n")
                .find("min_busy must be in 0..1"),
            std::string::npos);
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"utilization\"\nname = \"n\"\nrun = "
                       "\"r\"\nmin_busy = \"high\"\n")
                .find("parameter 'min_busy' must be a number"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

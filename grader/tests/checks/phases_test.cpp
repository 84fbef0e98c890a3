// Check kind phases: positive time in each listed phase on every rank.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class PhasesCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "r"

[[check]]
id = "timed"
kind = "phases"
name = "timed"
run = "r"

[[check]]
id = "timed_data"
kind = "phases"
name = "data wait timed"
run = "r"
phases = ["data"]
)");
  }
};

TEST_F(PhasesCheck, PassesWhenEveryPhaseHasTime) {
  add_run("r", {good_report()});
  const auto r = grade("timed");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_EQ(r.observed, "rank 0: forward 1.00 s, backward 2.00 s, optimizer 0.50 s");
}

TEST_F(PhasesCheck, NamesThePhaseThatIsNotTimed) {
  auto rep = good_report();
  rep["phases"]["backward"] = 0.0;
  add_run("r", {rep});
  EXPECT_TRUE(has(grade("timed"), Status::kFailed,
                  "the backward part of the step is not timed: wrap it in timer.scope(ddplab::Phase::kBackward)"));
}

TEST_F(PhasesCheck, AReportWithoutThePhaseIsMalformed) {
  add_run("r", {good_report()});
  const auto r = grade("timed_data");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 0's report has no phases.data");
}

TEST_F(PhasesCheck, PhasesMustBeAListOfStrings) {
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"phases\"\nname = \"n\"\nrun = "
                       "\"r\"\nphases = \"forward\"\n")
                .find("grade.toml:16: check \"n\" (phases): parameter 'phases' must be a string list, not \"forward\""),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

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

TEST_F(PhasesCheck, OverlappingTimerScopesFailInsteadOfPassing) {
  // Every phase has time, but they add up to more than the run's wall time: a scope opened inside
  // another times the same work twice, so the figures are not measurements.
  auto rep = good_report();
  rep["phases"]["backward"] = 3.0;  // 1.0 + 3.0 + 0.5 = 4.5 s in a 4.0 s run
  add_run("r", {rep});
  const auto r = grade("timed");
  EXPECT_TRUE(has(r, Status::kFailed, "timer scopes overlap")) << r.diagnosis;
  EXPECT_NE(r.observed.find("the timed phases add up to 4.500 s, more than the run's wall time 4.000 s"),
            std::string::npos)
      << r.observed;
  // Within the clocks' slack (2 % and 5 ms) it still passes: 4.08 s in a 4.0 s run.
  rep["phases"]["backward"] = 2.58;
  add_run("r", {rep});
  EXPECT_TRUE(has(grade("timed"), Status::kPassed));
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

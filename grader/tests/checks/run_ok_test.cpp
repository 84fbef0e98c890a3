// Check kind run_ok: a clean run passes; a rank reporting another status, a crashed or hung run
// and a missing report fail with their cause.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class RunOkCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(
        "[[run]]\nname = \"r\"\nranks = 2\n\n[[check]]\nid = \"ok\"\nkind = \"run_ok\"\nname = \"runs\"\nrun = "
        "\"r\"\npoints = 1\n");
  }
};

TEST_F(RunOkCheck, ACleanRunPasses) {
  add_run("r", {good_report(), good_report()});
  EXPECT_TRUE(has(grade("ok"), Status::kPassed));
}

TEST_F(RunOkCheck, AnotherStatusACrashOrAHangFails) {
  auto rep = good_report();
  rep["status"] = "diverged";
  add_run("r", {good_report(), rep});
  const auto r = grade("ok");
  EXPECT_TRUE(has(r, Status::kFailed, "the run did not finish cleanly"));
  EXPECT_EQ(r.observed, "run 'r': rank 1 reports status 'diverged'");

  auto& crashed = add_run("r", {good_report(), good_report()});
  crashed.exit_code = 139;
  crashed.summary = "rank 1 killed by SIGSEGV";
  EXPECT_TRUE(has(grade("ok"), Status::kFailed, "a rank crashed"));

  auto& hung = add_run("r", {good_report(), good_report()});
  hung.timed_out = true;
  hung.exit_code = 124;
  hung.log_tail = "[rank 0] rank 0 allreduce #1 did not complete within 5 s. Backend: gloo\n";
  EXPECT_TRUE(has(grade("ok"), Status::kFailed, "a collective did not complete: rank 0 allreduce #1"));
}

TEST_F(RunOkCheck, AMissingReportIsAFailedCheck) {
  auto& run = add_run("r", {good_report(), good_report()});
  run.rank[1].report.reset();
  run.rank[1].report_error = "rank 1's report is unusable: not JSON";
  const auto r = grade("ok");
  EXPECT_TRUE(has(r, Status::kFailed, "the run report is missing or malformed"));
  EXPECT_NE(r.observed.find("rank 1's report is unusable"), std::string::npos);
}

TEST_F(RunOkCheck, TakesNoParameters) {
  EXPECT_NE(
      load_error(
          "[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"run_ok\"\nname = \"n\"\nrun = \"r\"\nfast = true\n")
          .find("unknown parameter 'fast'; known: none"),
      std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

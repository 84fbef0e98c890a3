// Check kind run_ok: a clean run passes; a rank reporting another status, a crashed or hung run
// and a missing report fail with their cause. A run with expect_failure passes by stopping with an
// error of its own, and fails by finishing.
#include "check_fixture.h"
#include "ddplab/error.h"

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

// A rank that stopped on an operation on an undefined tensor (a resume whose loaded state was never
// filled in) is told so, not "the program failed".
TEST_F(RunOkCheck, AnUndefinedTensorIsNamedAsTheCause) {
  auto& run = add_run("r", {good_report(), good_report()});
  run.exit_code = 1;
  run.summary = "rank 0 exited with status 1";
  run.log_tail = "[rank 0] error: Undefined tensor is not allowed\nException raised from set_state at ...\n";
  EXPECT_TRUE(has(grade("ok"), Status::kFailed, "a rank used an undefined torch::Tensor"));
}

// Over the mpi backend a skipped collective is found before data moves (the ranks' entries are
// compared): the diagnosis names both ranks' collectives, not a crash or "the program failed".
TEST_F(RunOkCheck, CollectivesOutOfStepAreNamedWithBothRanks) {
  auto& run = add_run("r", {good_report(), good_report()});
  run.exit_code = 1;
  run.summary = "rank 0 exited with status 1";
  run.log_tail =
      "[rank 0] error: [rank 0] rank 0: allreduce #14 (10713216 bytes): collectives out of step at #14: rank 0 "
      "allreduce float[2678304]; rank 1 allgather long[2] (the mpi backend compared what each rank entered before "
      "moving data: ...)\n";
  const auto r = grade("ok");
  EXPECT_TRUE(has(r, Status::kFailed,
                  "the ranks called different collectives (a rank skipped one or called another in its place): "
                  "collectives out of step at #14: rank 0 allreduce float[2678304]; rank 1 allgather long[2]"))
      << r.diagnosis;
  EXPECT_EQ(r.diagnosis.find("(the mpi backend"), std::string::npos) << r.diagnosis;
}

TEST_F(RunOkCheck, ARanksOwnErrorIsTheCauseOfItsPeersTimeout) {
  // Rank 1 stops on its own error; rank 0 then times out in the collective rank 1 never joined.
  // The observed cause is rank 1's error, and the stall is named as its consequence.
  auto timed_out = good_report();
  timed_out["status"] = "error";
  timed_out["message"] = "rank 0: allreduce #17 (1291768 bytes) did not complete within 20000 ms";
  auto own = good_report();
  own["status"] = "error";
  own["message"] = "rank 1, step 0: allreduce 0 of the step carries 12070848 bytes, but bucket 0 has 1291768";
  auto& run = add_run("r", {timed_out, own});
  run.exit_code = 1;
  run.log_tail = "[rank 0] error: rank 0: allreduce #17 (1291768 bytes) did not complete within 20000 ms. Backend: x\n";
  const auto r = grade("ok");
  EXPECT_TRUE(has(r, Status::kFailed, "a rank stopped with the error above, and its peers then timed out"));
  EXPECT_NE(r.observed.find("rank 1, step 0: allreduce 0 of the step carries"), std::string::npos) << r.observed;
}

TEST_F(RunOkCheck, AMissingReportIsAFailedCheck) {
  auto& run = add_run("r", {good_report(), good_report()});
  run.rank[1].report.reset();
  run.rank[1].report_error = "rank 1's report is unusable: not JSON";
  const auto r = grade("ok");
  EXPECT_TRUE(has(r, Status::kFailed, "the run report is missing or malformed"));
  EXPECT_NE(r.observed.find("rank 1's report is unusable"), std::string::npos);
}

/// A spec whose run `unused` is meant to stop with an error, read by a run_ok check.
class ExpectedFailureRunOk : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(
        "[[run]]\nname = \"unused\"\nranks = 2\nexpect_failure = true\n\n[[check]]\nid = \"stops\"\nkind = "
        "\"run_ok\"\nname = \"stops on unused parameters\"\nexercise = \"09.1\"\nrun = \"unused\"\npoints = 1\n");
  }
  /// The run, ended with `exit_code`; rank 1 reports the error, rank 0 (stopped by fail-fast) nothing.
  RunOutcome& ended(int exit_code) {
    auto failed = good_report();
    failed["status"] = "error";
    failed["message"] =
        "rank 1: bucket 1 of 2 was never launched: parameter(s) extra.weight received no gradient\nat ...";
    auto& run = add_run("unused", {good_report(), failed});
    run.exit_code = exit_code;
    run.summary = "rank 1 exited with status 1";
    run.rank[0].report.reset();
    run.rank[0].report_error = "rank 0 wrote no report";
    return run;
  }
};

TEST_F(ExpectedFailureRunOk, StoppingWithAnErrorPasses) {
  EXPECT_TRUE(spec_.run("unused").expect_failure);
  ended(1);
  const auto r = grade("stops");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_EQ(r.observed,
            "stopped with an error, as expected: 'unused' (rank 1: bucket 1 of 2 was never launched: "
            "parameter(s) extra.weight received no gradient)");
}

TEST_F(ExpectedFailureRunOk, ACrashIsNotTheExpectedError) {
  auto& run = ended(139);
  run.rank[1].report.reset();
  run.rank[1].report_error = "rank 1 wrote no report";
  run.summary = "rank 1 killed by SIGSEGV";
  const auto r = grade("stops");
  EXPECT_TRUE(has(r, Status::kFailed, "a rank crashed"));
  EXPECT_EQ(r.observed, "run 'unused' stopped, but no rank reported an error: rank 1 killed by SIGSEGV");
}

TEST_F(ExpectedFailureRunOk, FinishingFails) {
  ended(0);
  const auto r = grade("stops");
  EXPECT_TRUE(has(r, Status::kFailed, "the failure this run provokes went undetected"));
  EXPECT_EQ(r.observed, "run 'unused' was expected to stop with an error but finished");
}

TEST_F(ExpectedFailureRunOk, AHangIsStillAHang) {
  auto& run = ended(124);
  run.timed_out = true;
  run.summary = "timed out after 40 s: ranks 0, 1 killed";
  const auto r = grade("stops");
  EXPECT_TRUE(has(r, Status::kFailed, "the program hangs or loops"));
  EXPECT_EQ(r.observed, "run 'unused' (2 ranks) timed out: timed out after 40 s: ranks 0, 1 killed");
}

TEST_F(ExpectedFailureRunOk, AStubReachedIsNotAttemptedNotTheExpectedFailure) {
  auto& stub = ended(kExitNotAttempted);
  stub.not_attempted = {"09.2"};  // another exercise than the check's: still not attempted
  auto r = grade("stops");
  EXPECT_EQ(r.status, Status::kNotAttempted) << r.observed;
  EXPECT_EQ(r.observed, "run 'unused' stopped at exercise(s) not attempted: 09.2");
  // A stub on one rank, and its peer then failing in a collective: the stub is the cause.
  auto& peer = ended(1);
  peer.not_attempted = {"09.2"};
  r = grade("stops");
  EXPECT_EQ(r.status, Status::kNotAttempted) << r.observed;
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

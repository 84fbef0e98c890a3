// Check kind output: the run's printed lines match each required regular expression.
#include <fstream>

#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class OutputCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "r"

[[check]]
id = "shows"
kind = "output"
name = "shows the waste"
run = "r"
regex = ["processed [0-9]+ samples, [0-9]+ of them unique"]
)");
  }
  void printed(const std::string& text) {
    add_run("r", {good_report()});
    std::ofstream(runs_["r"].dir + "/output.txt") << text;
  }
};

TEST_F(OutputCheck, PassesWhenTheLineIsPrinted) {
  printed("[rank 0] processed 2000 samples, 1000 of them unique\n");
  EXPECT_TRUE(has(grade("shows"), Status::kPassed));
}

TEST_F(OutputCheck, FailsWhenItIsNot) {
  printed("[rank 0] done\n");
  EXPECT_TRUE(has(grade("shows"), Status::kFailed, "the program does not print the figure"));
}

TEST_F(OutputCheck, NoOutputAtAllIsMalformed) {
  add_run("r", {good_report()});
  EXPECT_TRUE(has(grade("shows"), Status::kFailed, "outputs are missing or malformed"));
}

class ExpectedFailureOutput : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "unused"
ranks = 2
expect_failure = true

[[check]]
id = "names"
kind = "output"
name = "names the unused parameters"
run = "unused"
regex = ["never launched: parameter\\(s\\) extra\\.weight received no gradient"]
)");
  }
  void ended(int exit_code, const std::string& text) {
    auto& run = add_run("unused", {good_report()});
    run.exit_code = exit_code;
    run.summary = exit_code == 0 ? "all ranks exited 0" : "rank 1 exited with status 1";
    run.log_tail = text;
    run.rank[0].report.reset();  // stopped by fail-fast before writing it
    run.rank[0].report_error = "rank 0 wrote no report";
    std::ofstream(run.dir + "/output.txt") << text;
  }
};

TEST_F(ExpectedFailureOutput, TheNamedErrorOfAFailedRunMatches) {
  ended(1, "[rank 1] error: bucket 1 of 2 was never launched: parameter(s) extra.weight received no gradient\n");
  EXPECT_TRUE(has(grade("names"), Status::kPassed));
}

TEST_F(ExpectedFailureOutput, AnotherErrorFailsShowingHowTheRunStopped) {
  ended(1, "[rank 1] error: rank 1 allreduce #3 did not complete within 10 s\n");
  const auto r = grade("names");
  EXPECT_TRUE(has(r, Status::kFailed, "the program does not print the figure"));
  EXPECT_EQ(r.details.rfind("the run stopped with: rank 1 exited with status 1\n[rank 1] error: rank 1 allreduce", 0),
            0u)
      << r.details;
}

TEST_F(ExpectedFailureOutput, ACrashWhoseMessageMatchesIsNotTheExpectedError) {
  // An exception escaping a worker thread: std::terminate prints its what(), which matches the
  // pattern, and the process dies of SIGABRT without any rank reporting the error.
  ended(134,
        "[rank 1] terminate called after throwing an instance of 'ddplab::Error'\n"
        "[rank 1]   what():  bucket 1 of 2 was never launched: parameter(s) extra.weight received no gradient\n");
  auto& run = runs_["unused"];
  run.rank[0].signal = 6;
  run.summary = "rank 1 (pid 9) was killed by signal 6 (SIGABRT)";
  const auto r = grade("names");
  EXPECT_TRUE(has(r, Status::kFailed, "the program does not print the figure"));
  EXPECT_EQ(
      r.observed,
      "run 'unused' crashed instead of stopping with an error (rank 1 (pid 9) was killed by signal 6 (SIGABRT)); no "
      "rank reported the error, so its output is not the program's message");
  // The same signal beside a rank that did report the error (a peer killed while it stopped) passes.
  RankOutcome stopped;
  stopped.exit_code = 1;
  stopped.report = good_report();
  (*stopped.report)["status"] = "error";
  (*stopped.report)["message"] = "bucket 1 of 2 was never launched";
  run.rank.push_back(stopped);
  EXPECT_TRUE(has(grade("names"), Status::kPassed));
}

TEST_F(ExpectedFailureOutput, FinishingFailsWhateverItPrinted) {
  ended(0, "[rank 1] error: bucket 1 of 2 was never launched: parameter(s) extra.weight received no gradient\n");
  const auto r = grade("names");
  EXPECT_TRUE(has(r, Status::kFailed, "the failure this run provokes went undetected"));
  EXPECT_EQ(r.observed, "run 'unused' was expected to stop with an error but finished");
  // The spec's own diagnosis, where it gives one, says what should have stopped the run.
  load(R"([[run]]
name = "unused"
expect_failure = true

[[check]]
id = "names"
kind = "output"
name = "names the unused parameters"
run = "unused"
regex = ["never launched"]
diagnosis = "exercise 04.3: a parameter without a gradient must stop the step"
)");
  ended(0, "");
  EXPECT_TRUE(has(grade("names"), Status::kFailed, "exercise 04.3: a parameter without a gradient"));
}

TEST_F(OutputCheck, ABadRegexIsASpecErrorAtLoad) {
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"output\"\nname = \"n\"\nrun = \"r\"\n"
                       "regex = [\"([0-9]+\"]\n")
                .find("bad regex '([0-9]+'"),
            std::string::npos);
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"output\"\nname = \"n\"\nrun = \"r\"\n")
                .find("missing required parameter 'regex'"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

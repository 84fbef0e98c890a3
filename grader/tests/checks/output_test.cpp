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

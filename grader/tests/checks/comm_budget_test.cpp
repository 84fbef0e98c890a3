// Check kind comm_budget: one collective's calls and bytes per step against the budget.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class CommBudgetCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "r"
ranks = 2

[[check]]
id = "every_gradient"
kind = "comm_budget"
name = "every gradient"
run = "r"
min_bytes_per_step = 1000000

[[check]]
id = "one_call"
kind = "comm_budget"
name = "one call per step"
run = "r"
max_calls_per_step = 1
diagnosis_over = "one bucket, please"
)");
  }
};

TEST_F(CommBudgetCheck, PassesWithinTheBudget) {
  add_run("r", {good_report(), good_report()});  // 4 calls, 4 MB over 4 steps
  const auto r = grade("every_gradient");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_EQ(r.observed, "rank 0: 1.0 allreduce call(s) and 1.00 MB per step");
  EXPECT_TRUE(has(grade("one_call"), Status::kPassed));
}

TEST_F(CommBudgetCheck, TooLittleOrTooMuchCommunicationFails) {
  auto none = good_report();
  none["comm"]["ops"] = json::object();  // never all-reduced
  add_run("r", {none, none});
  EXPECT_TRUE(has(grade("every_gradient"), Status::kFailed, "not every gradient is synchronised"));
  auto chatty = good_report();
  chatty["comm"]["ops"]["allreduce"]["calls"] = 40;
  add_run("r", {good_report(), chatty});
  const auto r = grade("one_call");
  EXPECT_TRUE(has(r, Status::kFailed, "one bucket, please"));
  EXPECT_NE(r.observed.find("rank 1: 10.0 allreduce call(s)"), std::string::npos) << r.observed;
}

TEST_F(CommBudgetCheck, AReportWithoutCountersIsMalformed) {
  auto rep = good_report();
  rep.erase("comm");
  add_run("r", {rep, rep});
  const auto r = grade("every_gradient");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 0's report has no comm.ops");
}

TEST_F(CommBudgetCheck, ABudgetMustLimitSomething) {
  EXPECT_NE(load_error(
                "[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"comm_budget\"\nname = \"n\"\nrun = \"r\"\n")
                .find("this budget limits nothing"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

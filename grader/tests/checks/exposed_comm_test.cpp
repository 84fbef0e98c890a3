// Check kind exposed_comm: the candidate's exposed communication per step against a baseline's,
// and buckets launched during backward.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

json rank(double exposed_ms, double launched_in_backward = 1) {
  json rep = good_report();
  rep["sync"] = {
      {"steps", {{"exposed_comm_ms_median", exposed_ms}, {"launched_in_backward_median", launched_in_backward}}}};
  return rep;
}

const char* kExposedCommSpec = R"([[run]]
name = "bucketed"
ranks = 2

[[run]]
name = "overlap"
ranks = 2

[[check]]
id = "hides"
kind = "exposed_comm"
name = "overlap hides communication"
runs = ["bucketed", "overlap"]
points = 10
)";

class ExposedCommCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(kExposedCommSpec);
  }
};

TEST_F(ExposedCommCheck, LessExposedCommunicationThanTheBaselinePasses) {
  add_run("bucketed", {rank(15.0), rank(17.2)});  // the slowest rank counts
  add_run("overlap", {rank(5.1), rank(3.0)});
  const auto r = grade("hides");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_EQ(r.observed,
            "exposed communication per step (median, slowest rank): 5.1 ms in run 'overlap', 17.2 ms in the baseline "
            "'bucketed': ratio 0.30, at most 1.00 allowed");
}

TEST_F(ExposedCommCheck, MoreThanTheRatioAllowsFails) {
  add_run("bucketed", {rank(17.2), rank(17.2)});
  add_run("overlap", {rank(20.0), rank(3.0)});
  auto r = grade("hides");
  EXPECT_TRUE(has(r, Status::kFailed, "overlapping exposes more communication than waiting until the end"));
  EXPECT_NE(r.observed.find("ratio 1.16, at most 1.00 allowed"), std::string::npos) << r.observed;

  load(std::string(kExposedCommSpec) + "max_ratio = 0.5\n");
  add_run("overlap", {rank(10.0), rank(3.0)});
  r = grade("hides");
  EXPECT_TRUE(has(r, Status::kFailed, "buckets launched late"));
  EXPECT_NE(r.observed.find("ratio 0.58, at most 0.50 allowed"), std::string::npos) << r.observed;
}

TEST_F(ExposedCommCheck, ABaselineThatExposesNothingComparesNothingAndFails) {
  // 0 ms against 0 ms used to pass any candidate (issue 37): a baseline that waits for its
  // collectives after backward exposes some on 2 ranks, so none means the comm phase is not timed.
  add_run("bucketed", {rank(0.0), rank(0.0)});
  add_run("overlap", {rank(0.0), rank(0.0)});
  auto r = grade("hides");
  EXPECT_TRUE(has(r, Status::kFailed, "the baseline run exposes no communication at all"));
  EXPECT_NE(r.observed.find("ratio 0/0"), std::string::npos) << r.observed;
  EXPECT_NE(r.observed.find("the baseline exposes none, so nothing is compared"), std::string::npos) << r.observed;
  add_run("overlap", {rank(0.5), rank(0.0)});
  r = grade("hides");
  EXPECT_TRUE(has(r, Status::kFailed, "the baseline run exposes no communication at all"));
  EXPECT_NE(r.observed.find("ratio inf"), std::string::npos) << r.observed;
  // A candidate that hides everything against a baseline that exposes some passes.
  add_run("bucketed", {rank(4.0), rank(0.0)});
  add_run("overlap", {rank(0.0), rank(0.0)});
  EXPECT_TRUE(has(grade("hides"), Status::kPassed));
}

TEST_F(ExposedCommCheck, BucketsLaunchedOnlyAtFinishFailTheBackwardMinimum) {
  load(std::string(kExposedCommSpec) + "min_launched_in_backward = 1\n");
  add_run("bucketed", {rank(17.2, 0), rank(17.2, 0)});  // the baseline is not asked
  add_run("overlap", {rank(5.0, 1), rank(5.0, 0)});
  auto r = grade("hides");
  EXPECT_TRUE(
      has(r, Status::kFailed, "no bucket starts during backward: the collectives are launched only in finish()"));
  EXPECT_EQ(r.observed,
            "run 'overlap', rank 1: 0 bucket(s) launched during backward (median over steps); at least 1 "
            "required");

  add_run("overlap", {rank(5.0, 1.5), rank(5.0, 2)});
  r = grade("hides");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_NE(r.observed.find("; at least 1.5 bucket(s) launched during backward on every rank"), std::string::npos)
      << r.observed;
}

TEST_F(ExposedCommCheck, MissingOrNegativeFiguresAreMalformed) {
  add_run("bucketed", {rank(17.2), good_report()});
  add_run("overlap", {rank(5.0), rank(5.0)});
  auto r = grade("hides");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 1's report has no sync.steps.exposed_comm_ms_median");

  add_run("bucketed", {rank(17.2), rank(-1)});
  r = grade("hides");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "run 'bucketed', rank 1's report: sync.steps.exposed_comm_ms_median is -1");

  load(std::string(kExposedCommSpec) + "min_launched_in_backward = 2\n");
  json no_count = rank(5.0);
  no_count["sync"]["steps"].erase("launched_in_backward_median");
  add_run("bucketed", {rank(17.2), rank(17.2)});
  add_run("overlap", {no_count, no_count});
  r = grade("hides");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 0's report has no sync.steps.launched_in_backward_median");
}

TEST_F(ExposedCommCheck, ParametersAreValidated) {
  EXPECT_NE(load_error(std::string(kExposedCommSpec) + "max_ratio = 0\n").find("max_ratio must be > 0"),
            std::string::npos);
  EXPECT_NE(load_error(std::string(kExposedCommSpec) + "min_launched_in_backward = -1\n").find("must be >= 0"),
            std::string::npos);
  EXPECT_NE(load_error(std::string(kExposedCommSpec) + "min_launched_in_backward = 1.5\n")
                .find("parameter 'min_launched_in_backward' must be a integer"),
            std::string::npos);
  std::string one_run = kExposedCommSpec;
  const std::string two = "runs = [\"bucketed\", \"overlap\"]";
  one_run.replace(one_run.find(two), two.size(), "run = \"overlap\"");
  EXPECT_NE(load_error(one_run).find("needs runs = [baseline, candidate]"), std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

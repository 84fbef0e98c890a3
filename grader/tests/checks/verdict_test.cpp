// Check kind verdict: the report's verdicts.<id> decides, on rank 0 or on every rank; a missing
// verdict, a false one and a bad id are each named; the printed sentence plays no part.
#include <fstream>

#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class VerdictCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "r"
ranks = 2

[[check]]
id = "traffic"
kind = "verdict"
name = "the boundary traffic matches the formula"
run = "r"
verdict = "boundary_traffic"

[[check]]
id = "traffic0"
kind = "verdict"
name = "rank 0 says so"
run = "r"
verdict = "boundary_traffic"
rank = "0"
)");
  }
  json with(bool ok, const std::string& said = "boundary traffic per step: matches the formula") {
    json rep = good_report();
    rep["verdicts"]["boundary_traffic"] = {{"ok", ok}, {"said", said}, {"figures", {{"sent", 880640}}}};
    return rep;
  }
};

TEST_F(VerdictCheck, PassesWhenEveryRankRecordsItOk) {
  add_run("r", {with(true), with(true)});
  const auto r = grade("traffic");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_EQ(r.observed, "on all 2 ranks: boundary traffic per step: matches the formula");
}

TEST_F(VerdictCheck, AFalseVerdictOnOneRankFailsNamingItAndWhatItSaid) {
  add_run("r", {with(true), with(false, "boundary traffic: does NOT match the formula")});
  const auto r = grade("traffic");
  EXPECT_TRUE(has(r, Status::kFailed, "the program established the opposite"));
  EXPECT_EQ(r.observed, "run 'r', rank 1: boundary traffic: does NOT match the formula");
  // rank = "0" reads rank 0's only.
  EXPECT_TRUE(has(grade("traffic0"), Status::kPassed));
}

TEST_F(VerdictCheck, AMissingVerdictFailsSayingTheProgramNeverEstablishedIt) {
  add_run("r", {with(true), good_report()});
  const auto r = grade("traffic");
  EXPECT_TRUE(has(r, Status::kFailed));
  EXPECT_EQ(r.observed,
            "run 'r', rank 1: the report has no verdict 'boundary_traffic' (the program never established it)");
}

TEST_F(VerdictCheck, TheWordingOfTheSentenceDoesNotMatter) {
  add_run("r", {with(true, "anything at all"), with(true, "")});
  EXPECT_TRUE(has(grade("traffic"), Status::kPassed));
}

TEST_F(VerdictCheck, AVerdictWithoutABooleanOkIsMalformed) {
  json bad = good_report();
  bad["verdicts"]["boundary_traffic"] = {{"ok", "yes"}};
  add_run("r", {bad, with(true)});
  EXPECT_TRUE(has(grade("traffic"), Status::kFailed, "outputs are missing or malformed"));
}

TEST_F(VerdictCheck, InARunMeantToFailRankZerosVerdictIsEnoughWhenTheCheckReadsRankZero) {
  // Fail-fast stopped rank 1 before it wrote a report; rank 0 recorded what the job found.
  load(R"([[run]]
name = "hang"
ranks = 2
expect_failure = true

[[check]]
id = "named0"
kind = "verdict"
name = "rank 0 names the hang"
run = "hang"
verdict = "boundary_traffic"
rank = "0"

[[check]]
id = "named_all"
kind = "verdict"
name = "every rank names the hang"
run = "hang"
verdict = "boundary_traffic"
)");
  json rep0 = with(true);
  rep0["status"] = "error";
  rep0["message"] = "collective #21 failed";
  auto& run = add_run("hang", {rep0, with(true)});
  run.exit_code = 1;
  run.rank[1].report.reset();
  run.rank[1].report_error = "rank 1 wrote no report";
  EXPECT_TRUE(has(grade("named0"), Status::kPassed));
  const auto all = grade("named_all");
  EXPECT_TRUE(has(all, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(all.observed, "run 'hang': rank 1 wrote no report");
  // Rank 0 without a report (the job aborted first) fails with the check's own diagnosis and
  // what stopped the run, whatever rank 1 wrote.
  run.rank[0].report.reset();
  run.rank[0].report_error = "rank 0 wrote no report";
  run.rank[1].report = with(true);
  run.summary = "rank 0 (pid 7) was killed by signal 6 (SIGABRT)";
  const auto aborted = grade("named0");
  EXPECT_TRUE(has(aborted, Status::kFailed, "the program established the opposite"));
  EXPECT_EQ(aborted.observed,
            "run 'hang': rank 0 wrote no report; the run: rank 0 (pid 7) was killed by signal 6 (SIGABRT)");
}

class VerdictFigures : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "r"

[[check]]
id = "batch"
kind = "verdict"
name = "the global batch is derived"
run = "r"
verdict = "global_batch"
figures = ["global_batch=1024", "dense.base_lr=0.001", "dense.rule=\"linear\"", "groups=[3, 3, 1]", "derived=true"]
)");
  }
  json with(double lr, json groups) {
    json rep = good_report();
    rep["verdicts"]["global_batch"] = {{"ok", true},
                                       {"said", "global batch 1024"},
                                       {"figures",
                                        {{"global_batch", 1024},
                                         {"dense", {{"base_lr", lr}, {"rule", "linear"}}},
                                         {"groups", groups},
                                         {"derived", true}}}};
    return rep;
  }
};

TEST_F(VerdictFigures, PassWhenEveryFigureIsTheExpectedOneNumbersWithinAPrintedPrecision) {
  add_run("r", {with(0.001 * (1 + 1e-9), {3, 3, 1})});
  EXPECT_TRUE(has(grade("batch"), Status::kPassed));
}

TEST_F(VerdictFigures, AFigureThatDiffersFailsNamingItsPathAndBothValues) {
  add_run("r", {with(0.002, {3, 3, 1})});
  auto r = grade("batch");
  EXPECT_TRUE(has(r, Status::kFailed));
  EXPECT_EQ(r.observed, "run 'r', rank 0: dense.base_lr is 0.002, not 0.001 (global batch 1024)");
  runs_.clear();
  add_run("r", {with(0.001, {3, 3, 3, 1})});
  r = grade("batch");
  EXPECT_EQ(r.observed, "run 'r', rank 0: groups is [3,3,3,1], not [3,3,1] (global batch 1024)");
}

TEST_F(VerdictFigures, AMissingFigureFails) {
  json rep = with(0.001, {3, 3, 1});
  rep["verdicts"]["global_batch"]["figures"].erase("derived");
  add_run("r", {rep});
  EXPECT_EQ(grade("batch").observed, "run 'r', rank 0: derived is missing, not true (global batch 1024)");
}

TEST_F(VerdictCheck, TheSpecNamesABadIdAndABadRank) {
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n[[check]]\nid = \"v\"\nkind = \"verdict\"\nname = \"n\"\nrun = \"r\"\n"
                       "verdict = \"Boundary-Traffic\"\n")
                .find("an id is lower-case letters, digits and '_'"),
            std::string::npos);
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n[[check]]\nid = \"v\"\nkind = \"verdict\"\nname = \"n\"\nrun = \"r\"\n"
                       "verdict = \"x\"\nrank = \"1\"\n"),
            "");
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n[[check]]\nid = \"v\"\nkind = \"verdict\"\nname = \"n\"\nrun = \"r\"\n"
                       "verdict = \"x\"\nfigures = [\"batch=twelve\"]\n")
                .find("figures entry 'batch=twelve': write path=value"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

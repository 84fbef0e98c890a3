// Check kind grad_sync: the report's buckets against the layout the grader computes with DDP's
// rule, one collective per bucket per synced step, and the same launch order on every rank.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

/// The course's DeepFM as the report lists it (registration order).
json deepfm_params() {
  const std::vector<std::pair<std::string, uint64_t>> p =
      {{"embedding.weight", 10713216}, {"first_order.weight", 669576}, {"dense_linear.weight", 52},
       {"dense_linear.bias", 4},       {"mlp.0.weight", 686400},       {"mlp.0.bias", 1600},
       {"mlp.2.weight", 640000},       {"mlp.2.bias", 1600},           {"mlp.4.weight", 640000},
       {"mlp.4.bias", 1600},           {"mlp.6.weight", 1600},         {"mlp.6.bias", 4}};
  json out = json::array();
  for (const auto& [name, bytes] : p)
    out.push_back({{"name", name}, {"bytes", bytes}, {"dtype", "float32"}, {"device", "cpu"}});
  return out;
}

/// DDP's layout of it at the default caps (ddp_buckets_test.cpp works it out).
json ddp_buckets() {
  return json::array(
      {{{"params", {"mlp.6.bias", "mlp.6.weight", "mlp.4.bias", "mlp.4.weight", "mlp.2.bias", "mlp.2.weight"}},
        {"bytes", 1284804}},
       {{"params",
         {"mlp.0.bias", "mlp.0.weight", "dense_linear.bias", "dense_linear.weight", "first_order.weight",
          "embedding.weight"}},
        {"bytes", 12070848}}});
}

/// A rank's report of a correct overlapped run.
json sync_report(const std::string& rung = "student-overlap") {
  json rep = good_report();
  rep["sync"] = {{"rung", rung},
                 {"first_bucket_bytes", 1048576},
                 {"bucket_cap_bytes", 26214400},
                 {"params", deepfm_params()},
                 {"buckets", ddp_buckets()},
                 {"steps",
                  {{"synced", 39},
                   {"collectives", {{"min", 2}, {"max", 2}}},
                   {"bytes", {{"min", 13355652}, {"max", 13355652}}},
                   {"order_in_layout", true},
                   {"first_bad_step", nullptr},
                   {"exposed_comm_ms_median", 17.2},
                   {"step_ms_median", 66.0}}},
                 {"order_digest", "9f0c1d2e3f405162"},
                 {"params_identical", true}};
  return rep;
}

const char* kGradSyncSpec = R"([[run]]
name = "overlap"
ranks = 2

[[check]]
id = "sync"
kind = "grad_sync"
name = "buckets as DDP"
run = "overlap"
points = 10
)";

class GradSyncCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(kGradSyncSpec);
  }
};

TEST_F(GradSyncCheck, DDPsLayoutOneCollectivePerBucketAndOneOrderPass) {
  add_run("overlap", {sync_report(), sync_report()});
  const auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_EQ(r.observed,
            "2 bucket(s) (1,284,804 and 12,070,848 bytes) as DDP lays them out, 1 collective per bucket on every "
            "synced step, same launch order on 2 rank(s)");
}

TEST_F(GradSyncCheck, TheOrderOfParametersInsideABucketDoesNotMatter) {
  auto rep = sync_report();
  rep["sync"]["buckets"][1]["params"] = {"embedding.weight",  "first_order.weight", "dense_linear.weight",
                                         "dense_linear.bias", "mlp.0.weight",       "mlp.0.bias"};
  add_run("overlap", {rep, rep});
  EXPECT_TRUE(has(grade("sync"), Status::kPassed));
}

TEST_F(GradSyncCheck, ADifferentLayoutFailsShowingBothLayouts) {
  // The "never over the cap" rule: mlp.2.weight would take bucket 0 over 1 MiB, so it opens bucket 1.
  auto rep = sync_report();
  rep["sync"]["buckets"] = json::array(
      {{{"params", {"mlp.6.bias", "mlp.6.weight", "mlp.4.bias", "mlp.4.weight", "mlp.2.bias"}}, {"bytes", 644804}},
       {{"params",
         {"mlp.2.weight", "mlp.0.bias", "mlp.0.weight", "dense_linear.bias", "dense_linear.weight",
          "first_order.weight", "embedding.weight"}},
        {"bytes", 12710848}}});
  rep["sync"]["steps"]["collectives"] = {{"min", 2}, {"max", 2}};
  add_run("overlap", {sync_report(), rep});
  const auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "the buckets are not DDP's layout"));
  EXPECT_EQ(r.observed,
            "rank 1: bucket 0 holds 644,804 bytes: mlp.6.bias, mlp.6.weight, mlp.4.bias, mlp.4.weight, mlp.2.bias; "
            "DDP's layout (first bucket 1,048,576 bytes, then 26,214,400 bytes) puts 1,284,804 bytes: mlp.6.bias, "
            "mlp.6.weight, mlp.4.bias, mlp.4.weight, mlp.2.bias, mlp.2.weight there");
  EXPECT_NE(r.details.find("expected, DDP's layout (first bucket 1,048,576 bytes, then 26,214,400 bytes):\n"
                           "  bucket 0 (1,284,804 bytes: mlp.6.bias, mlp.6.weight, mlp.4.bias, mlp.4.weight, "
                           "mlp.2.bias, mlp.2.weight)\n  bucket 1 (12,070,848 bytes: mlp.0.bias, mlp.0.weight, "
                           "dense_linear.bias, dense_linear.weight, first_order.weight, embedding.weight)\n"
                           "reported by rank 1:\n  bucket 0 (644,804 bytes: "),
            std::string::npos)
      << r.details;
}

TEST_F(GradSyncCheck, AMissingOrExtraBucketOrWrongBytesFail) {
  auto one = sync_report();
  one["sync"]["buckets"] = json::array({ddp_buckets()[0]});
  add_run("overlap", {one, one});
  auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "the buckets are not DDP's layout"));
  EXPECT_EQ(r.observed.rfind("rank 0 reports 1 bucket(s), DDP's layout (first bucket 1,048,576 bytes, then "
                             "26,214,400 bytes) has 2: bucket 1 (12,070,848 bytes: mlp.0.bias, ",
                             0),
            0u)
      << r.observed;

  auto three = sync_report();
  three["sync"]["buckets"].push_back({{"params", json::array()}, {"bytes", 0}});
  add_run("overlap", {three, three});
  r = grade("sync");
  EXPECT_NE(r.observed.find("has 2: bucket 2 (0 bytes: (none)) is extra"), std::string::npos) << r.observed;

  auto bytes = sync_report();
  bytes["sync"]["buckets"][1]["bytes"] = 12000000;
  add_run("overlap", {bytes, bytes});
  r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "the buckets are not DDP's layout"));
  EXPECT_EQ(r.observed,
            "rank 0: bucket 1 holds the expected parameters but reports 12,000,000 bytes; they hold 12,070,848");
}

TEST_F(GradSyncCheck, ThePerParamRungIsJudgedAgainstOneBucketPerParameter) {
  auto rep = sync_report("per-param");
  json buckets = json::array();
  for (const auto& p : deepfm_params()) buckets.push_back({{"params", {p["name"]}}, {"bytes", p["bytes"]}});
  rep["sync"]["buckets"] = buckets;
  rep["sync"]["steps"]["collectives"] = {{"min", 12}, {"max", 12}};
  add_run("overlap", {rep, rep});
  auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_EQ(r.observed.rfind("12 bucket(s), one per parameter, ", 0), 0u) << r.observed;

  auto bucketed = sync_report("per-param");  // DDP's buckets reported by the per-param rung
  add_run("overlap", {bucketed, bucketed});
  r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "the buckets are not DDP's layout"));
  EXPECT_NE(r.observed.find("the per-parameter layout (one bucket per parameter, in registration order) puts "
                            "10,713,216 bytes: embedding.weight there"),
            std::string::npos)
      << r.observed;
}

TEST_F(GradSyncCheck, MoreOrFewerCollectivesThanBucketsFail) {
  auto rep = sync_report();
  rep["sync"]["steps"]["collectives"] = {{"min", 2}, {"max", 14}};
  add_run("overlap", {sync_report(), rep});
  auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "not one collective per bucket on every synced step"));
  EXPECT_EQ(r.observed, "rank 1: 2 to 14 collective(s) per synced step over 39 synced steps, for 2 bucket(s)");

  auto none = sync_report();
  none["sync"]["steps"]["synced"] = 0;
  add_run("overlap", {none, none});
  r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "not one collective per bucket"));
  EXPECT_EQ(r.observed, "rank 0 reports no synced step: no collective to count");
}

TEST_F(GradSyncCheck, LaunchingOutOfBucketOrderFailsWithTheFirstBadStep) {
  auto rep = sync_report();
  rep["sync"]["steps"]["order_in_layout"] = false;
  rep["sync"]["steps"]["first_bad_step"] = {{"step", 3},
                                            {"launched", {12070848, 1284804}},
                                            {"expected", {1284804, 12070848}}};
  add_run("overlap", {sync_report(), rep});
  auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "buckets must be launched in bucket order, 0, 1, 2, ..., on every rank"));
  EXPECT_EQ(r.observed, "rank 1, step 3: launched 12,070,848 / 1,284,804 bytes; layout order 1,284,804 / 12,070,848");

  rep["sync"]["steps"]["first_bad_step"] = nullptr;
  add_run("overlap", {sync_report(), rep});
  EXPECT_EQ(grade("sync").observed, "rank 1 launched its buckets out of layout order");
}

TEST_F(GradSyncCheck, DifferentLaunchSequencesOnTwoRanksFail) {
  auto rep = sync_report();
  rep["sync"]["order_digest"] = "0000000000000001";
  add_run("overlap", {sync_report(), rep});
  const auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "launching in hook-firing order"));
  EXPECT_EQ(r.observed,
            "rank 0 and rank 1 launched different sequences of collectives (order digests 9f0c1d2e3f405162 and "
            "0000000000000001)");
}

TEST_F(GradSyncCheck, EachPartCanBeTurnedOff) {
  load(std::string(kGradSyncSpec) + "layout = false\nsame_order = false\n");
  auto rep = sync_report();
  rep["sync"]["buckets"] = json::array({{{"params", {"mlp.6.bias"}}, {"bytes", 4}}, ddp_buckets()[1]});
  rep["sync"]["steps"]["order_in_layout"] = false;
  add_run("overlap", {rep, rep});
  const auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_EQ(r.observed, "2 bucket(s) (4 and 12,070,848 bytes), 1 collective per bucket on every synced step");
  EXPECT_NE(load_error(std::string(kGradSyncSpec) + "layout = false\nsame_order = false\none_per_bucket = false\n")
                .find("this check checks nothing"),
            std::string::npos);
  EXPECT_NE(load_error(std::string(kGradSyncSpec) + "layout = \"yes\"\n").find("parameter 'layout' must be a bool"),
            std::string::npos);
}

TEST_F(GradSyncCheck, ASpecDiagnosisWordsEveryFailure) {
  load(std::string(kGradSyncSpec) + "diagnosis = \"revisit exercise 04.2\"\n");
  auto rep = sync_report();
  rep["sync"]["order_digest"] = "0000000000000001";
  add_run("overlap", {sync_report(), rep});
  EXPECT_TRUE(has(grade("sync"), Status::kFailed, "revisit exercise 04.2"));
}

TEST_F(GradSyncCheck, AMissingOrMistypedSyncSectionIsMalformed) {
  add_run("overlap", {good_report(), good_report()});
  auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 0's report has no sync");

  auto rep = sync_report();
  rep["sync"]["params"][3]["bytes"] = "four";
  add_run("overlap", {rep, rep});
  r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 0's report: sync.params.3.bytes has the wrong type");
}

TEST_F(GradSyncCheck, AnExpectedFailureWithoutReportsIsMalformedNotACrash) {
  load(R"([[run]]
name = "unused"
ranks = 2
expect_failure = true

[[check]]
id = "sync"
kind = "grad_sync"
name = "buckets as DDP"
run = "unused"
)");
  auto& run = add_run("unused", {sync_report(), sync_report()});
  run.exit_code = 1;
  run.rank[1].report.reset();
  run.rank[1].report_error = "rank 1 wrote no report";
  const auto r = grade("sync");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "run 'unused': rank 1 wrote no report");
}

}  // namespace
}  // namespace ddplab::grader::testing

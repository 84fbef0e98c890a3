// Check kind coverage: the ranks' per-epoch set digests against [0, n), the documented padding,
// equal step counts and a new order each epoch, each failure with its own declared wording.
#include <numeric>

#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

std::vector<uint64_t> range(uint64_t from, uint64_t to, uint64_t step = 1) {
  std::vector<uint64_t> v;
  for (uint64_t i = from; i < to; i += step) v.push_back(i);
  return v;
}

/// A rank's report of two epochs over `idx`, with order digests `o0`, `o1`.
json rank_report(const std::vector<uint64_t>& idx, uint64_t o0, uint64_t o1) {
  auto rep = good_report();
  rep["epochs"] = {epoch_of(idx, o0), epoch_of(idx, o1)};
  return rep;
}

class CoverageCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"toml([[run]]
name = "r"
ranks = 2

[[check]]
id = "once"
kind = "coverage"
name = "every sample once"
run = "r"
min_epochs = 2
diagnosis_duplicates = "the shards overlap (exercise 09.1)"

[[check]]
id = "order"
kind = "coverage"
name = "a new order"
run = "r"
order_only = true
min_epochs = 2

[[check]]
id = "replicated"
kind = "coverage"
name = "replicated"
run = "r"
expect = "replicated"
check_order = false
)toml");
  }
};

TEST_F(CoverageCheck, DisjointShardsInANewOrderPass) {
  add_run("r", {rank_report(range(0, 1000, 2), 1, 2), rank_report(range(1, 1000, 2), 3, 4)});
  EXPECT_TRUE(has(grade("once"), Status::kPassed));
  EXPECT_TRUE(has(grade("order"), Status::kPassed));
  EXPECT_TRUE(has(grade("replicated"), Status::kFailed, "every rank must iterate the whole data set"));
}

TEST_F(CoverageCheck, EachWayOfFailingHasItsOwnDiagnosis) {
  // No sampler: both ranks see everything in the same order.
  add_run("r", {rank_report(range(0, 1000), 1, 1), rank_report(range(0, 1000), 1, 1)});
  EXPECT_TRUE(has(grade("once"), Status::kFailed, "no sampler"));
  EXPECT_TRUE(has(grade("order"), Status::kFailed, "set_epoch not called"));
  EXPECT_TRUE(has(grade("replicated"), Status::kPassed));
  // Overlapping shards: the spec's wording for this failure.
  add_run("r", {rank_report(range(0, 600), 1, 2), rank_report(range(400, 1000), 3, 4)});
  EXPECT_TRUE(has(grade("once"), Status::kFailed, "the shards overlap (exercise 09.1)"));
  // A shard missing: the kind's default wording.
  add_run("r", {rank_report(range(0, 400), 1, 2), rank_report(range(500, 900), 3, 4)});
  EXPECT_TRUE(has(grade("once"), Status::kFailed, "the shards do not cover the data set"));
  // Uneven step counts.
  auto a = rank_report(range(0, 1000, 2), 1, 2), b = rank_report(range(1, 1000, 2), 3, 4);
  b["epochs"][0]["steps"] = 9;
  add_run("r", {a, b});
  EXPECT_TRUE(has(grade("once"), Status::kFailed, "uneven shards"));
  // Too few epochs.
  a["epochs"].erase(1);
  add_run("r", {a, a});
  EXPECT_TRUE(has(grade("once"), Status::kFailed, "the run ended before its epochs were done"));
}

TEST_F(CoverageCheck, ReportedPaddingIsCountedAndChecked) {
  // 999 samples on 2 ranks: index 0 repeated to even the shards, and said so.
  auto a = rank_report(range(0, 999, 2), 1, 2), b = rank_report(range(1, 999, 2), 3, 4);
  auto padded = range(1, 999, 2);
  padded.push_back(0);
  b = rank_report(padded, 3, 4);
  a["sampler"] = {{"padded_indices", {0u}}};
  add_run("r", {a, b}, {"--train-samples", "999"});
  EXPECT_TRUE(has(grade("once"), Status::kPassed));
  a["sampler"] = {{"padded_indices", {5000u}}};  // not an index of the data set
  add_run("r", {a, b}, {"--train-samples", "999"});
  EXPECT_TRUE(has(grade("once"), Status::kFailed, "outputs are missing or malformed"));
}

TEST_F(CoverageCheck, RanksThatShuffledDifferentlyBlameTheOrder) {
  // Overlapping shards because each rank cut them from its own order (the order digests differ):
  // the order is to blame (03.2), not the sharding.
  auto a = rank_report(range(0, 600), 1, 2), b = rank_report(range(400, 1000), 3, 4);
  a["sampler"] = {{"epochs", {{{"order_digest", "00000000000000aa"}}, {{"order_digest", "00000000000000ab"}}}}};
  b["sampler"] = {{"epochs", {{{"order_digest", "00000000000000cc"}}, {{"order_digest", "00000000000000cd"}}}}};
  add_run("r", {a, b});
  const auto r = grade("once");
  EXPECT_TRUE(has(r, Status::kFailed, "the ranks shuffled each epoch into different orders"));
  EXPECT_NE(r.observed.find("epoch 0: rank 1 shuffled the epoch into another order than rank 0"), std::string::npos)
      << r.observed;
  // One shared order and the same overlap: the shards are to blame.
  b["sampler"] = a["sampler"];
  add_run("r", {a, b});
  EXPECT_TRUE(has(grade("once"), Status::kFailed, "the shards overlap (exercise 09.1)"));
}

TEST_F(CoverageCheck, APaddingSamplerDropsNothing) {
  // 999 samples on 2 ranks, index 998 dropped: right for --tail drop, wrong for --tail pad.
  auto a = rank_report(range(0, 998, 2), 1, 2), b = rank_report(range(1, 998, 2), 3, 4);
  a["sampler"] = {{"tail", "drop"}, {"dropped_indices", {998u}}};
  add_run("r", {a, b}, {"--train-samples", "999"});
  EXPECT_TRUE(has(grade("once"), Status::kPassed));
  a["sampler"]["tail"] = "pad";
  add_run("r", {a, b}, {"--train-samples", "999"});
  const auto r = grade("once");
  EXPECT_TRUE(has(r, Status::kFailed, "samples were dropped although the tail policy is pad"));
  EXPECT_NE(r.observed.find("epoch 0: the sampler dropped 1 sample(s) with --tail pad"), std::string::npos)
      << r.observed;
}

TEST_F(CoverageCheck, ABrokenDigestIsMalformed) {
  auto a = rank_report(range(0, 1000, 2), 1, 2);
  a["epochs"][1]["set_digest"] = "xyz";
  add_run("r", {a, rank_report(range(1, 1000, 2), 3, 4)});
  const auto r = grade("once");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_NE(r.observed.find("'xyz' is not a hex digest"), std::string::npos) << r.observed;
}

TEST_F(CoverageCheck, MisspelledAndInconsistentParametersAreRejected) {
  const std::string head =
      "[[run]]\nname = \"r\"\nranks = 2\n\n[[check]]\nid = \"t\"\nkind = \"coverage\"\nname = \"n\"\nrun = \"r\"\n";
  const auto typo = load_error(head + "chek_order = false\n");
  EXPECT_NE(typo.find(
                "grade.toml:17: check \"n\" (coverage): unknown parameter 'chek_order'; known: expect, check_order"),
            std::string::npos)
      << typo;
  EXPECT_NE(load_error(head + "order_only = true\n").find("order_only needs a run of 2 or more epochs"),
            std::string::npos);
  EXPECT_NE(load_error(head + "check_order = \"no\"\n").find("parameter 'check_order' must be a bool"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

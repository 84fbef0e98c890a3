// Check kind same_order: the candidate's per-rank, per-epoch sample counts and order digests equal
// the oracle's.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class SameOrderCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(
        "[[run]]\nname = \"sync\"\nranks = 2\n\n[[run]]\nname = \"w4\"\nranks = 2\n\n[[check]]\nid = \"order\"\nkind "
        "= \"same_order\"\nname = \"order\"\nruns = [\"sync\", \"w4\"]\n");
  }
  static json with_epochs(std::vector<json> epochs) {
    json rep = good_report();
    rep["epochs"] = epochs;
    return rep;
  }
};

TEST_F(SameOrderCheck, PassesOnTheSameOrderOnEveryRank) {
  add_run("sync", {with_epochs({epoch_of({0, 2, 4}, 11)}), with_epochs({epoch_of({1, 3, 5}, 12)})});
  add_run("w4", {with_epochs({epoch_of({0, 2, 4}, 11)}), with_epochs({epoch_of({1, 3, 5}, 12)})});
  const auto r = grade("order");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_NE(r.observed.find("1 epoch(s) x 2 rank(s)"), std::string::npos) << r.observed;
}

TEST_F(SameOrderCheck, TheSameSamplesInAnotherOrderFail) {
  add_run("sync", {with_epochs({epoch_of({0, 2, 4}, 11)}), with_epochs({epoch_of({1, 3, 5}, 12)})});
  add_run("w4", {with_epochs({epoch_of({0, 2, 4}, 11)}), with_epochs({epoch_of({5, 3, 1}, 99)})});
  const auto r = grade("order");
  EXPECT_TRUE(has(r, Status::kFailed, "not in the order the workers finish them"));
  EXPECT_NE(r.observed.find("epoch 0, rank 1: the order digest is 0000000000000063 in 'w4'"), std::string::npos)
      << r.observed;
}

TEST_F(SameOrderCheck, MissingBatchesOrEpochsFail) {
  add_run("sync", {with_epochs({epoch_of({0, 2, 4}, 11)}), with_epochs({epoch_of({1, 3, 5}, 12)})});
  add_run("w4", {with_epochs({epoch_of({0, 2}, 11)}), with_epochs({epoch_of({1, 3, 5}, 12)})});
  EXPECT_TRUE(has(grade("order"), Status::kFailed, "every batch exactly once"));
  runs_.clear();
  add_run("sync",
          {with_epochs({epoch_of({0}, 1), epoch_of({0}, 2)}), with_epochs({epoch_of({1}, 1), epoch_of({1}, 2)})});
  add_run("w4", {with_epochs({epoch_of({0}, 1)}), with_epochs({epoch_of({1}, 1)})});
  EXPECT_TRUE(has(grade("order"), Status::kFailed, "ended an epoch early or late"));
}

}  // namespace
}  // namespace ddplab::grader::testing

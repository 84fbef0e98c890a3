// Check kind parity: N ranks' mean loss per step against one process's, and the grader's AUCs of
// both saved models.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class ParityCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    options_.data_dir = tiny_data_set();
    load(R"([[run]]
name = "one"
save_model = true

[[run]]
name = "two"
ranks = 2
save_model = true

[[check]]
id = "parity"
kind = "parity"
name = "2 ranks match one process"
runs = ["one", "two"]
loss_tolerance = 0.01
eval_samples = 500
)");
    add_run("one", {good_report()}).model = (dir_ / "one.pt").string();
    save_model(runs_["one"].model, 1);
  }
  /// The 2-rank run, its ranks' losses per step given.
  void two(const std::vector<double>& l0, const std::vector<double>& l1, uint64_t model_seed = 1) {
    auto a = good_report(), b = good_report();
    a["steps"]["loss"] = l0;
    b["steps"]["loss"] = l1;
    add_run("two", {a, b}).model = (dir_ / "two.pt").string();
    save_model(runs_["two"].model, model_seed);
  }
};

TEST_F(ParityCheck, TheSameTrainingPasses) {
  two({0.71, 0.61, 0.49, 0.45}, {0.69, 0.59, 0.51, 0.45});  // means equal the single process's
  const auto r = grade("parity");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_DOUBLE_EQ(*r.figure, 0.0);  // the same model: the same AUC
}

TEST_F(ParityCheck, ADifferentTrainingFails) {
  two({0.8, 0.7, 0.6, 0.55}, {0.8, 0.7, 0.6, 0.55});
  EXPECT_TRUE(has(grade("parity"), Status::kFailed, "gradients summed instead of averaged"));
  two({0.7, 0.6}, {0.7, 0.6});
  const auto r = grade("parity");
  EXPECT_TRUE(has(r, Status::kFailed, "the ranks do not split each global batch"));
  EXPECT_EQ(r.observed, "2 ranks took 2 steps, one process took 4");
}

TEST_F(ParityCheck, LossesThatAreNotNumbersAreMalformed) {
  auto a = good_report();
  a["steps"]["loss"] = "low";
  add_run("two", {a, a});
  const auto r = grade("parity");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 0's report: steps.loss has the wrong type");
}

TEST_F(ParityCheck, ReadsExactlyTwoRuns) {
  EXPECT_NE(load_error(
                "[[run]]\nname = \"r\"\nsave_model = true\n\n[[check]]\nid = \"t\"\nkind = \"parity\"\nname = \"n\"\n"
                "run = \"r\"\n")
                .find("needs runs = [one_rank, n_ranks]"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

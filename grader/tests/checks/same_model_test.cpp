// Check kind same_model: two saved models compared tensor by tensor, whatever model wrote them
// (the course's DeepFM, or any archive of nested tensors).
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class SameModelCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "oracle"
ranks = 2
save_model = true

[[run]]
name = "mine"
ranks = 2
save_model = true

[[check]]
id = "same"
kind = "same_model"
name = "trains the oracle's model"
runs = ["oracle", "mine"]
points = 10
)");
  }
  /// Both runs, their saved models written by `save` (oracle, candidate).
  template <typename Save>
  void runs(Save save) {
    add_run("oracle", {good_report(), good_report()}).model = (dir_ / "oracle.pt").string();
    add_run("mine", {good_report(), good_report()}).model = (dir_ / "mine.pt").string();
    save(runs_["oracle"].model, runs_["mine"].model);
  }
  void tensors(const std::vector<SavedTensor>& oracle, const std::vector<SavedTensor>& mine) {
    runs([&](const std::string& a, const std::string& b) {
      save_tensors(a, oracle);
      save_tensors(b, mine);
    });
  }
};

TEST_F(SameModelCheck, TheSameDeepFMPasses) {
  runs([](const std::string& a, const std::string& b) {
    save_model(a, 7);
    save_model(b, 7);
  });
  const auto r = grade("same");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_EQ(r.observed.rfind("max |candidate - oracle| = 0 in embedding.weight (tolerance 1e-06) over 12 tensors, "
                             "3,338,913 elements (oracle: run 'oracle', candidate: run 'mine')",
                             0),
            0u)
      << r.observed;
}

TEST_F(SameModelCheck, ADifferenceWithinTheToleranceStillPasses) {
  runs([](const std::string& a, const std::string& b) {
    save_model(a, 7);
    save_model(b, 7, "mlp.4.weight", 5e-7);
  });
  const auto r = grade("same");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_NE(r.observed.find("in mlp.4.weight"), std::string::npos) << r.observed;
}

TEST_F(SameModelCheck, AParameterThatDiffersFailsNamingItAndItsNormRatio) {
  runs([](const std::string& a, const std::string& b) {
    save_model(a, 7);
    save_model(b, 7, "mlp.2.bias", 0.5);
  });
  const auto r = grade("same");
  EXPECT_TRUE(has(r, Status::kFailed, "its gradients are not the average of the ranks' gradients"));
  EXPECT_EQ(r.observed.rfind("max |candidate - oracle| = 0.5 in mlp.2.bias (tolerance 1e-06)", 0), 0u) << r.observed;
  EXPECT_NE(r.observed.find("; ||candidate|| / ||oracle|| of mlp.2.bias = "), std::string::npos) << r.observed;
  EXPECT_EQ(r.details.rfind("the tensors that differ most (max |candidate - oracle|, ||candidate|| / ||oracle||):\n"
                            "  mlp.2.bias [400]: 0.5, ",
                            0),
            0u)
      << r.details;
}

TEST_F(SameModelCheck, EveryTensorOfAnyModelIsCompared) {
  // DeepFM plus an extra parameter: generic archives, nested like a module's save().
  const std::vector<SavedTensor> oracle = {{"embedding.weight", {2, 2}, {1, 2, 3, 4}},
                                           {"extra.scale", {1}, {2}},
                                           {"extra.inner.bias", {2}, {0, 0}}};
  auto mine = oracle;
  tensors(oracle, mine);
  auto r = grade("same");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_NE(r.observed.find("over 3 tensors, 7 elements"), std::string::npos) << r.observed;

  mine[2].values = {0, 4};  // the deepest one: summed instead of averaged, say
  tensors(oracle, mine);
  r = grade("same");
  EXPECT_TRUE(has(r, Status::kFailed, "the candidate's parameters differ from the oracle's"));
  EXPECT_EQ(r.observed.rfind("max |candidate - oracle| = 4 in extra.inner.bias", 0), 0u) << r.observed;
  EXPECT_NE(r.observed.find("||candidate|| / ||oracle|| of extra.inner.bias = inf (the oracle's is 0)"),
            std::string::npos)
      << r.observed;

  mine = oracle;
  mine[1].values = {4};
  tensors(oracle, mine);
  r = grade("same");
  EXPECT_NE(r.observed.find("||candidate|| / ||oracle|| of extra.scale = 2"), std::string::npos) << r.observed;
}

TEST_F(SameModelCheck, NaNIsTheWorstDifference) {
  const std::vector<SavedTensor> oracle = {{"a", {2}, {1, 2}}, {"b", {1}, {1}}};
  auto mine = oracle;
  mine[0].values = {1, 100};
  mine[1].values = {std::nanf("")};
  tensors(oracle, mine);
  const auto r = grade("same");
  EXPECT_TRUE(has(r, Status::kFailed, "the candidate's parameters differ"));
  EXPECT_EQ(r.observed.rfind("max |candidate - oracle| = nan in b", 0), 0u) << r.observed;
}

TEST_F(SameModelCheck, AMissingOrExtraKeyOrAnotherShapeNamesTheKey) {
  const std::vector<SavedTensor> oracle = {{"w", {2}, {1, 2}}, {"extra.scale", {1}, {1}}};
  tensors(oracle, {oracle[0]});
  auto r = grade("same");
  EXPECT_TRUE(has(r, Status::kFailed, "the two runs saved different models"));
  EXPECT_EQ(r.observed,
            "the candidate's model lacks parameter 'extra.scale' of the oracle's (oracle: run 'oracle', candidate: run "
            "'mine')");

  tensors({oracle[0]}, oracle);
  r = grade("same");
  EXPECT_TRUE(has(r, Status::kFailed, "the two runs saved different models"));
  EXPECT_EQ(r.observed,
            "the candidate's model has parameter 'extra.scale', which the oracle's lacks (oracle: run 'oracle', "
            "candidate: run 'mine')");

  tensors(oracle, {{"w", {1, 2}, {1, 2}}, oracle[1]});
  r = grade("same");
  EXPECT_TRUE(has(r, Status::kFailed, "the two runs saved different models"));
  EXPECT_EQ(r.observed,
            "parameter 'w' has shape [1, 2] in the candidate's model, [2] in the oracle's (oracle: run 'oracle', "
            "candidate: run 'mine')");
}

TEST_F(SameModelCheck, AMissingOrUnreadableModelIsMalformed) {
  runs([](const std::string& a, const std::string&) { save_model(a, 7); });
  auto r = grade("same");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "run 'mine' saved no model (rank 0 must write --save-model)");

  runs([&](const std::string& a, const std::string& b) {
    save_model(a, 7);
    write("mine.pt", "not an archive");
  });
  r = grade("same");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_NE(r.observed.find("mine.pt cannot be read"), std::string::npos) << r.observed;
}

TEST_F(SameModelCheck, ReadsTwoRunsThatSaveTheirModels) {
  const std::string runs_toml = "[[run]]\nname = \"a\"\nsave_model = true\n\n[[run]]\nname = \"b\"\n\n";
  const std::string check = "[[check]]\nid = \"t\"\nkind = \"same_model\"\nname = \"n\"\n";
  EXPECT_NE(load_error(runs_toml + check + "run = \"a\"\n").find("needs runs = [oracle, candidate]"),
            std::string::npos);
  EXPECT_NE(load_error(runs_toml + check + "runs = [\"a\", \"b\"]\n").find("run 'b' must save its model"),
            std::string::npos);
  EXPECT_NE(load_error(runs_toml + check + "runs = [\"a\", \"a\"]\ntolerance = -1.0\n").find("tolerance must be >= 0"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

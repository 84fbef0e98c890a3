// Check kind auc: the grader evaluates the saved model itself and compares it with the reference
// (calibrated by check id, else the spec's). A freshly initialised DeepFM scores about 0.5.
#include <fstream>

#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class AucCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    options_.data_dir = tiny_data_set();
    load(R"([[run]]
name = "train"
save_model = true

[[check]]
id = "low_bar"
kind = "auc"
name = "any model"
run = "train"
reference = 0.3
tolerance = 0.01

[[check]]
id = "high_bar"
kind = "auc"
name = "a perfect model"
run = "train"
reference = 1.0
eval_samples = 500
)");
    auto& run = add_run("train", {good_report()});
    run.model = (dir_ / "model.pt").string();
  }
};

TEST_F(AucCheck, ComparesTheGradersOwnAucWithTheReference) {
  save_model(runs_["train"].model, 1);
  const auto ok = grade("low_bar");
  EXPECT_TRUE(has(ok, Status::kPassed));
  ASSERT_TRUE(ok.figure.has_value());
  EXPECT_GT(*ok.figure, 0.3);
  EXPECT_NE(ok.observed.find("on 1000 samples"), std::string::npos) << ok.observed;
  EXPECT_NE(ok.observed.find("the spec's reference value (uncalibrated machine)"), std::string::npos);
  const auto bad = grade("high_bar");
  EXPECT_TRUE(has(bad, Status::kFailed, "the model learns less than the reference"));
  EXPECT_NE(bad.observed.find("on 500 samples"), std::string::npos) << bad.observed;
}

TEST_F(AucCheck, TheCalibrationIsKeyedByTheChecksId) {
  save_model(runs_["train"].model, 1);
  calibration_.values["lab09_x/high_bar"] = 0.2;
  const auto r = grade("high_bar");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_NE(r.observed.find("reference 0.2000 from the reference solution on this machine"), std::string::npos)
      << r.observed;
}

TEST_F(AucCheck, AnUnloadableModelIsMalformed) {
  std::ofstream(runs_["train"].model) << "not a model";
  EXPECT_TRUE(has(grade("low_bar"), Status::kFailed, "outputs are missing or malformed"));
  runs_["train"].model.clear();
  const auto none = grade("low_bar");
  EXPECT_TRUE(has(none, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(none.observed, "the run saved no model (rank 0 must write --save-model)");
}

TEST_F(AucCheck, TheRunMustSaveItsModel) {
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"auc\"\nname = \"n\"\nrun = \"r\"\n")
                .find("run 'r' must save its model"),
            std::string::npos);
  EXPECT_NE(load_error(
                "[[run]]\nname = \"r\"\nsave_model = true\n\n[[check]]\nid = \"t\"\nkind = \"auc\"\nname = \"n\"\n"
                "run = \"r\"\neval_samples = 1.5\n")
                .find("parameter 'eval_samples' must be a integer"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

// Check kind cost: the run's cost figures recomputed from its device-hours, samples and the price
// table; with `budget`, the stop by the budget with a checkpoint.
#include <fstream>

#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class CostCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(
        "[[run]]\nname = \"job\"\n\n[[check]]\nid = \"meter\"\nkind = \"cost\"\nname = \"meter\"\nrun = \"job\"\n\n"
        "[[check]]\nid = \"alarm\"\nkind = \"cost\"\nname = \"alarm\"\nrun = \"job\"\nbudget = true\n");
  }
  /// One hour of 8 devices of p3.16xlarge (the kit's table: $24.48 an instance-hour, 8 GPUs),
  /// 1,000,000 samples of 2 epochs of 2,000,000: $24.48 spent, $48.96 an epoch, $97.92 in all.
  static json metered() {
    json rep = good_report();
    rep["cost"] = {{"metered", true},
                   {"instance", "p3.16xlarge"},
                   {"device_hours", 8.0},
                   {"samples", 1000000},
                   {"samples_per_epoch", 2000000},
                   {"epochs", 2},
                   {"usd", 24.48},
                   {"usd_per_million_samples", 24.48},
                   {"usd_per_epoch", 48.96},
                   {"usd_to_finish", 97.92},
                   {"budget_usd", 0.0},
                   {"stopped", ""}};
    rep["checkpoint"] = {{"last", ""}, {"at_end", {{"step", 100}}}};
    return rep;
  }
};

TEST_F(CostCheck, PassesWhenTheFiguresAreTheGradersOwn) {
  add_run("job", {metered()});
  const auto r = grade("meter");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_NE(r.observed.find("$24.480000 spent"), std::string::npos) << r.observed;
}

TEST_F(CostCheck, NamesTheFigureThatIsWrong) {
  json rep = metered();
  rep["cost"]["usd"] = 24.48 * 8;  // priced per instance-hour instead of per device-hour
  add_run("job", {rep});
  const auto r = grade("meter");
  EXPECT_TRUE(has(r, Status::kFailed, "price / its devices"));
  EXPECT_NE(r.observed.find("reports $195.84 spent (usd); the grader computes $24.48"), std::string::npos)
      << r.observed;
  rep = metered();
  rep["cost"]["usd_to_finish"] = 24.48 + 97.92;  // the whole run again on top of what was spent
  add_run("job", {rep});
  EXPECT_NE(grade("meter").observed.find("projected to the end"), std::string::npos);
}

TEST_F(CostCheck, DeviceHoursComeFromTheJobsMeasuredDeviceSeconds) {
  // Consistent figures from a wrong device-hours (seconds / 60 / 60 taken as minutes / 60) used to
  // pass: the kit's measured device-seconds now decide the hours.
  json rep = metered();
  rep["cost"]["device_seconds"] = 8.0 * 3600;
  add_run("job", {rep});
  EXPECT_TRUE(has(grade("meter"), Status::kPassed));
  rep["cost"]["device_seconds"] = 8.0 * 60;  // the meter took minutes for hours: every figure 60x too high
  add_run("job", {rep});
  const auto r = grade("meter");
  EXPECT_TRUE(has(r, Status::kFailed, "price / its devices"));
  EXPECT_NE(r.observed.find(
                "reports 8 device-hours; the job's measured 480 device-seconds are 0.133333333 device-hours"),
            std::string::npos)
      << r.observed;
}

TEST_F(CostCheck, AnUnknownInstanceOrNoMeterFails) {
  json rep = metered();
  rep["cost"]["metered"] = false;
  add_run("job", {rep});
  EXPECT_TRUE(has(grade("meter"), Status::kFailed));
  rep = metered();
  rep["cost"]["instance"] = "x9.huge";
  add_run("job", {rep});
  const auto r = grade("meter");
  EXPECT_TRUE(has(r, Status::kFailed, "an instance of the price table"));
  EXPECT_NE(r.observed.find("no instance 'x9.huge'"), std::string::npos) << r.observed;
}

TEST_F(CostCheck, APriceTableOfTheRunsOwnIsUsed) {
  const std::string table = write("prices.toml",
                                  "[[instance]]\nname = \"p3.16xlarge\"\ndevices = 8\ndevices_are = \"8x V100\"\n"
                                  "usd_per_hour = 48.96\nsource = \"test\"\nas_of = \"2026-12-02\"\n");
  add_run("job", {metered()}, {"--prices", table});
  EXPECT_TRUE(has(grade("meter"), Status::kFailed)) << "at twice the price the figures are half the grader's";
}

TEST_F(CostCheck, ABudgetStopNeedsTheStopWithinTheBudgetAndItsCheckpoint) {
  json rep = metered();
  rep["cost"]["budget_usd"] = 25.0;
  add_run("job", {rep});
  EXPECT_TRUE(has(grade("alarm"), Status::kFailed, "never fired"));
  rep["cost"]["stopped"] = "budget";
  add_run("job", {rep});
  EXPECT_TRUE(has(grade("alarm"), Status::kFailed, "leave a checkpoint"));
  const std::string ckpt = write("step-00000100.pt", "checkpoint");
  rep["checkpoint"]["last"] = ckpt;
  add_run("job", {rep});
  EXPECT_TRUE(has(grade("alarm"), Status::kPassed));
  rep["cost"]["budget_usd"] = 24.0;  // $24.48 spent
  add_run("job", {rep});
  EXPECT_TRUE(has(grade("alarm"), Status::kFailed, "too late"));
}

}  // namespace
}  // namespace ddplab::grader::testing

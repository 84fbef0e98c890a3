// Synthetic graded labs on disk for the report tests (report_fixture.h).
#include "report_fixture.h"

#include <cmath>
#include <fstream>

#include <fmt/format.h>

namespace fs = std::filesystem;
using nlohmann::json;

namespace ddplab::grader::testing {

json chart_report(int rank, int world, const std::vector<double>& loss, double data_wait, double forward,
                  double backward, double comm, double optimizer) {
  json losses = json::array();
  for (double v : loss) losses.push_back(std::isfinite(v) ? json(v) : json());
  const double compute = forward + backward + optimizer;
  return {{"schema", "ddplab.run-report"},
          {"version", 1},
          {"lab", "lab09"},
          {"rank", rank},
          {"world_size", world},
          {"status", "ok"},
          {"steps", {{"loss", losses}, {"epoch", json::array()}}},
          {"phases",
           {{"data_wait", data_wait},
            {"forward", forward},
            {"backward", backward},
            {"comm", comm},
            {"optimizer", optimizer},
            {"compute", compute},
            {"wall", compute + data_wait + comm},
            {"steps", loss.size()},
            {"step_median", loss.empty() ? 0.0 : (compute + data_wait + comm) / static_cast<double>(loss.size())}}}};
}

void write_run_report(const fs::path& lab_dir, const std::string& run, const json& report) {
  const fs::path dir = lab_dir / "runs" / run;
  fs::create_directories(dir);
  std::ofstream(dir / fmt::format("rank{}.json", report.at("rank").get<int>())) << report.dump(2);
}

std::string scaling_observed(double r1, double rn, int n, double reference, double share) {
  return fmt::format(
      "unique samples/s: {:.0f} on 1 rank, {:.0f} on {} ranks -> efficiency {:.3f}; "
      "reference {:.3f} from the spec's reference value (uncalibrated machine); required >= {:.0f}% of it",
      r1, rn, n, rn / (r1 * n), reference, 100 * share);
}

LabResult lab_with_runs(const fs::path& dir) {
  LabResult lab;
  lab.lab = "lab09";
  lab.title = "Lab 09";
  lab.out_dir = (dir / "lab09").string();
  std::vector<double> one, two;
  for (int i = 0; i < 60; ++i) one.push_back(0.69 - 0.2 * (1 - std::exp(-i / 20.0)));
  for (int i = 0; i < 30; ++i) two.push_back(0.69 - 0.2 * (1 - std::exp(-i / 10.0)) + 0.003);
  write_run_report(lab.out_dir, "one", chart_report(0, 1, one, 0.06, 1.2, 2.4, 0, 0.9));
  write_run_report(lab.out_dir, "two", chart_report(0, 2, two, 0.03, 0.6, 1.3, 0.9, 0.45));
  write_run_report(lab.out_dir, "two", chart_report(1, 2, two, 0.03, 0.6, 1.2, 1.0, 0.45));
  CheckResult ok;
  ok.id = ok.name = "passes";
  ok.kind = "run_ok";
  ok.max_score = ok.score = 10;
  ok.status = Status::kPassed;
  ok.observed = "fine";
  CheckResult scaling;
  scaling.id = "scales";
  scaling.name = "unique samples/s scale from 1 to 2 ranks";
  scaling.kind = "scaling";
  scaling.max_score = 10;
  scaling.status = Status::kFailed;
  scaling.observed = scaling_observed(15952, 10558, 2, 0.46, 0.8);
  lab.checks = {ok, scaling};
  lab.max_score = 20;
  lab.score = 10;
  return lab;
}

}  // namespace ddplab::grader::testing

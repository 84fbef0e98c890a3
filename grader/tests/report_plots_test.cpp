// The charts of report.html, drawn from the run reports a grading leaves in <lab>/runs/: loss per
// step of every run, the phases of every rank, the scaling check's throughput; stale and broken
// runs; and the scaling check's wording, which the report reads its figures from, pinned against
// the check itself.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "checks/check_fixture.h"
#include "report_fixture.h"
#include "xml_check.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;

namespace ddplab::grader::testing {
namespace {

class ReportPlots : public ::testing::Test {
 protected:
  ddplab::testing::ScratchDir scratch_;
  const fs::path dir_ = scratch_.dir();
};

/// The report's <svg> elements, each checked for well-formed XML.
std::vector<std::string> charts_of(const std::string& html) {
  const auto svgs = svg_elements(html);
  for (const auto& s : svgs) {
    const auto r = check_xml(s);
    EXPECT_TRUE(r.error.empty()) << r.error << "\n" << s;
  }
  return svgs;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST_F(ReportPlots, LossPhasesAndScalingOfAGradedLab) {
  const std::string h = html_report({lab_with_runs(dir_)});
  const auto svgs = charts_of(h);
  ASSERT_EQ(svgs.size(), 3u);
  // Loss: one line per run, 1 rank before 2.
  EXPECT_NE(svgs[0].find("<title>Training loss per step (rank 0 of each run)</title>"), std::string::npos);
  EXPECT_EQ(count(svgs[0], "stroke-width=\"2\" stroke-linejoin"), 2u);
  EXPECT_LT(svgs[0].find(">one (1 rank)</text>"), svgs[0].find(">two (2 ranks)</text>"));
  // Phases: a bar per rank, five segments each.
  EXPECT_NE(svgs[1].find("<title>Time per step by phase"), std::string::npos);
  // 4 segments of "one" (no comm at 1 rank: not drawn), 5 of each rank of "two", 5 legend swatches.
  EXPECT_EQ(count(svgs[1], "<rect x="), 4u + 5u + 5u + 5u);
  EXPECT_NE(svgs[1].find("<title>two · rank 1: exposed comm 33.3 ms</title>"), std::string::npos);  // 1.0 s / 30
  EXPECT_NE(svgs[1].find(">one · rank 0</text>"), std::string::npos);
  // Scaling: measured, capacity, required.
  EXPECT_NE(svgs[2].find("<title>Scaling: unique samples/s scale from 1 to 2 ranks</title>"), std::string::npos);
  EXPECT_NE(svgs[2].find("2 ranks: 10558 unique samples/s, capacity 31904, efficiency 0.331"), std::string::npos);
  EXPECT_NE(svgs[2].find("needed to pass: 80% of the reference&apos;s efficiency 0.460"), std::string::npos);
  // The numbers, as tables.
  EXPECT_NE(h.find("<td>two</td><td>1</td><td>30</td><td>1.00</td><td>20.00</td><td>40.00</td><td>33.33</td>"
                   "<td>15.00</td><td>109.33</td>"),
            std::string::npos);
  EXPECT_NE(h.find("<td>2</td><td>10558</td><td>31904</td><td>0.331</td><td>11741</td>"), std::string::npos);
  EXPECT_NE(h.find("<td>one</td><td>1</td><td>60</td><td>0.6900</td>"), std::string::npos);
  EXPECT_LT(h.size(), 40u * 1024);  // self-contained and small
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("http://"), h.find("http://www.w3.org/2000/svg"));  // nothing fetched
}

TEST_F(ReportPlots, NoRunsNoCharts) {
  LabResult lab = lab_with_runs(dir_);
  lab.checks.pop_back();  // no scaling check
  fs::remove_all(fs::path(lab.out_dir) / "runs");
  EXPECT_EQ(html_report({lab}).find("<svg"), std::string::npos);
  lab.out_dir = "";  // results never written (a unit test's LabResult): nothing read from the working folder
  EXPECT_EQ(html_report({lab}).find("<svg"), std::string::npos);
}

TEST_F(ReportPlots, RunsOfAnEarlierGradingAreLeftOut) {
  LabResult lab = lab_with_runs(dir_);
  const fs::path old = fs::path(lab.out_dir) / "runs" / "one";
  fs::last_write_time(old, fs::file_time_type::clock::now() - std::chrono::hours(1));
  lab.seconds = 60;
  const auto svgs = charts_of(html_report({lab}));
  ASSERT_EQ(svgs.size(), 3u);
  EXPECT_EQ(svgs[0].find(">one (1 rank)"), std::string::npos);
  EXPECT_NE(svgs[0].find(">two (2 ranks)"), std::string::npos);
  lab.seconds = 2 * 3600;  // a grading that long made it
  EXPECT_NE(html_report({lab}).find(">one (1 rank)"), std::string::npos);
}

TEST_F(ReportPlots, NanLossMissingReportsAndRunsWithoutSteps) {
  LabResult lab = lab_with_runs(dir_);
  lab.checks.pop_back();
  const fs::path lab_dir = lab.out_dir;
  write_run_report(lab_dir, "nan", chart_report(0, 2, {0.7, NAN, 0.6, INFINITY}, 0, 0.1, 0.2, 0.1, 0.1));
  // its rank 1 wrote no report; "broken" wrote garbage; "stopped" stopped before a step
  fs::create_directories(lab_dir / "runs" / "broken");
  std::ofstream(lab_dir / "runs" / "broken" / "rank0.json") << "{not json";
  write_run_report(lab_dir, "stopped", chart_report(0, 2, {}, 0, 0, 0, 0, 0));
  const std::string h = html_report({lab});
  const auto svgs = charts_of(h);
  ASSERT_EQ(svgs.size(), 2u);
  EXPECT_NE(svgs[0].find(">nan (2 ranks) — 2 non-finite values (gaps)</text>"), std::string::npos);
  EXPECT_NE(svgs[0].find(">stopped (2 ranks) — no data</text>"), std::string::npos);
  EXPECT_NE(h.find("<td>nan</td><td>2</td><td>4</td><td>0.7000</td><td>n/a</td><td>0.6000</td>"
                   "<td>2 (first at step 1)</td>"),
            std::string::npos);
  EXPECT_NE(h.find("<td>nan</td><td>1</td><td>0</td><td>no report</td>"), std::string::npos);
  EXPECT_NE(h.find("<td>stopped</td><td>0</td><td>0</td><td>no steps</td>"), std::string::npos);
  EXPECT_NE(h.find("<td>broken</td><td>0</td><td>0</td><td>no report</td>"), std::string::npos);
  EXPECT_EQ(count(svgs[1], ">nan · rank 0</text>"), 1u);  // the ranks with steps have bars, the others none
  EXPECT_EQ(svgs[1].find("nan · rank 1"), std::string::npos);
  EXPECT_EQ(svgs[1].find("stopped ·"), std::string::npos);
  EXPECT_EQ(svgs[1].find("broken ·"), std::string::npos);
}

// The report reads the scaling chart's figures from the check's observation: the real check's
// wording, on real (synthetic) runs, must give the chart.
class ReportScalingWording : public CheckTest {};

TEST_F(ReportScalingWording, TheScalingCheckObservationGivesTheChart) {
  load(R"([[run]]
name = "one"

[[run]]
name = "two"
ranks = 2

[[check]]
id = "scales"
kind = "scaling"
name = "scales"
runs = ["one", "two"]
reference = 0.9
min_relative = 0.8
)");
  auto timed = [](uint64_t from, uint64_t step, double wall) {
    std::vector<uint64_t> idx;
    for (uint64_t i = from; i < 1000; i += step) idx.push_back(i);
    auto rep = good_report();
    rep["epochs"] = json::array({epoch_of(idx, 1)});
    rep["phases"]["wall"] = wall;
    return rep;
  };
  add_run("one", {timed(0, 1, 10.0)});
  add_run("two", {timed(0, 2, 8.0), timed(1, 2, 8.0)});
  LabResult lab;
  lab.lab = "lab09_x";
  lab.title = "t";
  lab.checks = {grade("scales")};
  ASSERT_EQ(lab.checks[0].status, Status::kFailed) << lab.checks[0].observed;  // efficiency 0.625 < 0.72
  const auto svgs = charts_of(html_report({lab}));
  ASSERT_EQ(svgs.size(), 1u) << "the scaling check's wording changed: update scaling_figure() in outputs.cpp\n"
                             << lab.checks[0].observed;
  EXPECT_NE(
      svgs[0].find(
          "1 rank: 100 unique samples/s, capacity 100, efficiency 1.000; 2 ranks: 125 unique samples/s, capacity 200, "
          "efficiency 0.625"),
      std::string::npos)
      << svgs[0];
  EXPECT_NE(svgs[0].find("needed to pass: 80% of the reference&apos;s efficiency 0.900"), std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

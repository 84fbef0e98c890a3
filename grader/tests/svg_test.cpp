// The report's SVG charts (grader/src/svg.cpp): tick ranges, the chart on empty, single-point and
// NaN data, escaping of names, stacked-bar proportions; every chart must be well-formed XML.
#include "ddplab/grader/svg.h"

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "xml_check.h"

namespace ddplab::grader::testing {
namespace {

namespace svg = ddplab::grader::svg;

::testing::AssertionResult well_formed(const std::string& s) {
  const auto r = check_xml(s);
  if (!r.error.empty()) return ::testing::AssertionFailure() << r.error << "\n" << s;
  if (r.root != "svg") return ::testing::AssertionFailure() << "root is <" << r.root << ">, not <svg>";
  if (s.find("xmlns=\"http://www.w3.org/2000/svg\"") == std::string::npos) {
    return ::testing::AssertionFailure() << "no SVG namespace";
  }
  if (r.elements.count("title") == 0) return ::testing::AssertionFailure() << "no <title> (accessible name)";
  return ::testing::AssertionSuccess();
}

std::vector<std::string> texts(const std::string& s) {
  std::vector<std::string> out;
  static const std::regex kText(R"(<text[^>]*>([^<]*)</text>)");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), kText); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

bool has_text(const std::string& s, const std::string& t) {
  for (const auto& x : texts(s)) {
    if (x == t) return true;
  }
  return false;
}

/// The d attributes of the data lines (stroke-width 2; the frame's path has none).
std::vector<std::string> data_paths(const std::string& s) {
  std::vector<std::string> out;
  static const std::regex kPath(R"re(<path d="([^"]*)" fill="none" stroke="#[0-9A-F]{6}" stroke-width="2")re");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), kPath); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

bool mentions_non_finite(const std::string& s) {
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("nan") != std::string::npos || lower.find("inf") != std::string::npos;
}

svg::LineChart loss_chart(std::vector<double> y) {
  svg::LineChart c;
  c.title = "loss";
  c.x = {"step", "", 0.0, std::nullopt, true};
  c.y = {"loss", "nats", std::nullopt, std::nullopt, false};
  svg::Series s{"run", {}, std::move(y), false, -1};
  for (size_t i = 0; i < s.y.size(); ++i) s.x.push_back(static_cast<double>(i));
  c.series.push_back(std::move(s));
  return c;
}

TEST(SvgTicks, RoundStepsCoverTheRange) {
  const auto t = svg::nice_ticks(0.452, 0.691);
  EXPECT_DOUBLE_EQ(t.step, 0.05);
  EXPECT_LE(t.lo, 0.452);
  EXPECT_GE(t.hi, 0.691);
  EXPECT_NEAR(t.lo, 0.45, 1e-12);
  EXPECT_NEAR(t.hi, 0.70, 1e-12);
  ASSERT_EQ(t.values.size(), 6u);
  EXPECT_EQ(t.label(t.values[1]), "0.50");
  const auto big = svg::nice_ticks(0, 31904);
  EXPECT_DOUBLE_EQ(big.step, 10000);
  EXPECT_EQ(big.label(big.values.back()), "40k");
  const auto neg = svg::nice_ticks(-3, 7);
  EXPECT_LE(neg.lo, -3);
  EXPECT_GE(neg.hi, 7);
  EXPECT_EQ(neg.label(0), "0");
}

TEST(SvgTicks, IntegersAndDegenerateRanges) {
  const auto steps = svg::nice_ticks(0, 3, 8, true);
  EXPECT_DOUBLE_EQ(steps.step, 1);  // not 0.5: no half steps
  EXPECT_EQ(steps.values.size(), 4u);
  for (double lo : {5.0, 0.0, -2.0, 1e9}) {
    const auto t = svg::nice_ticks(lo, lo);
    EXPECT_LT(t.lo, t.hi) << lo;
    EXPECT_LE(t.lo, lo);
    EXPECT_GE(t.hi, lo);
    EXPECT_GE(t.values.size(), 2u);
  }
  EXPECT_GE(svg::nice_ticks(0, 0).lo, 0);  // a non-negative value keeps a non-negative axis
  const auto one = svg::nice_ticks(1, 1, 5, true);
  EXPECT_GE(one.step, 1);
  EXPECT_LE(one.lo, 1);
  EXPECT_GE(one.hi, 2);
  const auto nan = svg::nice_ticks(NAN, INFINITY);
  EXPECT_EQ(nan.lo, 0);
  EXPECT_EQ(nan.hi, 1);
  EXPECT_EQ(svg::number(-0.0001, 2), "0.00");  // not "-0.00"
  EXPECT_EQ(svg::number(NAN, 2), "n/a");
}

TEST(SvgLineChart, AxesCoverTheDataWithTicksAndUnits) {
  std::vector<double> y;
  for (int i = 0; i < 100; ++i) y.push_back(0.69 - 0.0024 * i);  // 0.69 .. 0.4524
  const std::string s = svg::line_chart(loss_chart(y));
  EXPECT_TRUE(well_formed(s));
  EXPECT_TRUE(has_text(s, "0.45"));
  EXPECT_TRUE(has_text(s, "0.70"));
  EXPECT_FALSE(has_text(s, "0.40"));  // the range is the data's, not from 0
  EXPECT_TRUE(has_text(s, "0"));
  EXPECT_TRUE(has_text(s, "100"));
  EXPECT_TRUE(has_text(s, "loss (nats)"));
  EXPECT_TRUE(has_text(s, "step"));
  EXPECT_TRUE(has_text(s, "run"));  // the legend
  const auto paths = data_paths(s);
  ASSERT_EQ(paths.size(), 1u);
  // Every vertex inside the drawing.
  static const std::regex kNum(R"([ML](-?[0-9.]+) (-?[0-9.]+))");
  int vertices = 0;
  for (auto it = std::sregex_iterator(paths[0].begin(), paths[0].end(), kNum); it != std::sregex_iterator(); ++it) {
    ++vertices;
    EXPECT_GE(std::stod((*it)[1]), 0);
    EXPECT_LE(std::stod((*it)[1]), 720);
    EXPECT_GE(std::stod((*it)[2]), 0);
    EXPECT_LE(std::stod((*it)[2]), 300);
  }
  EXPECT_EQ(vertices, 100);
}

TEST(SvgLineChart, EmptyDataSaysSo) {
  svg::LineChart none = loss_chart({});
  for (const auto& c : {none, svg::LineChart{}}) {
    const std::string s = svg::line_chart(c);
    EXPECT_TRUE(well_formed(s));
    EXPECT_TRUE(has_text(s, "no data"));
    EXPECT_TRUE(data_paths(s).empty());
    EXPECT_FALSE(mentions_non_finite(s));
  }
  EXPECT_TRUE(has_text(svg::line_chart(none), "run — no data"));
}

TEST(SvgLineChart, NanLossLeavesAGapAndIsCounted) {
  const std::string s = svg::line_chart(loss_chart({0.7, 0.6, NAN, 0.5, INFINITY, 0.4, 0.3}));
  EXPECT_TRUE(well_formed(s));
  const auto paths = data_paths(s);
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_EQ(std::count(paths[0].begin(), paths[0].end(), 'M'), 3);  // three pieces: 0-1, 3, 5-6
  EXPECT_EQ(std::count(paths[0].begin(), paths[0].end(), 'L'), 2);
  EXPECT_NE(s.find("<circle"), std::string::npos);  // step 3 alone between gaps gets a marker
  EXPECT_TRUE(has_text(s, "run — 2 non-finite values (gaps)"));
  EXPECT_FALSE(mentions_non_finite(s));  // no "nan" coordinate leaked
  const std::string all_nan = svg::line_chart(loss_chart({NAN, NAN}));
  EXPECT_TRUE(well_formed(all_nan));
  EXPECT_TRUE(has_text(all_nan, "no data"));
}

TEST(SvgLineChart, ASinglePointIsDrawnOnAProperRange) {
  const std::string s = svg::line_chart(loss_chart({0.69}));
  EXPECT_TRUE(well_formed(s));
  EXPECT_NE(s.find("<circle"), std::string::npos);
  EXPECT_FALSE(mentions_non_finite(s));
  EXPECT_FALSE(has_text(s, "no data"));
  // Ticks around 0.69, distinct labels.
  const auto t = texts(s);
  EXPECT_NE(std::find(t.begin(), t.end(), "0.70"), t.end());
}

TEST(SvgLineChart, NamesAreEscaped) {
  svg::LineChart c = loss_chart({1, 2});
  c.title = "<script>alert(1)</script> & co";
  c.desc = "it's \"quoted\"";
  c.series[0].name = "run <b>'x'</b> & \"y\"\x01";
  c.x.unit = "<u>";
  const std::string s = svg::line_chart(c);
  EXPECT_TRUE(well_formed(s));
  EXPECT_EQ(s.find("<script"), std::string::npos);
  EXPECT_EQ(s.find("<b>"), std::string::npos);
  EXPECT_EQ(s.find('\x01'), std::string::npos);
  EXPECT_NE(s.find("<title>&lt;script&gt;alert(1)&lt;/script&gt; &amp; co</title>"), std::string::npos);
  EXPECT_TRUE(has_text(s, "run &lt;b&gt;&apos;x&apos;&lt;/b&gt; &amp; &quot;y&quot;?"));
  EXPECT_TRUE(has_text(s, "step (&lt;u&gt;)"));
}

TEST(SvgLineChart, StylesDifferAndTheLegendWraps) {
  svg::LineChart c = loss_chart({1, 2});
  for (int i = 1; i < 9; ++i) c.series.push_back({"a long run name number " + std::to_string(i), {0, 1}, {1, 2.0 + i}});
  const std::string s = svg::line_chart(c);
  EXPECT_TRUE(well_formed(s));
  EXPECT_EQ(data_paths(s).size(), 9u);
  EXPECT_NE(s.find("stroke-dasharray"), std::string::npos);  // dashes tell lines apart in greyscale
  std::smatch m;
  ASSERT_TRUE(std::regex_search(s, m, std::regex(R"re(height="([0-9.]+)")re")));
  EXPECT_GT(std::stod(m[1]), 300 + 2 * 18);  // several legend rows below the frame
}

TEST(SvgStackedBars, SegmentsAreProportionalAndBadValuesCountAsZero) {
  svg::BarChart c;
  c.title = "phases";
  c.value = {"time per step", "ms", std::nullopt, std::nullopt, false};
  c.segments = {"data wait", "forward", "backward", "exposed comm", "optimizer"};
  c.bars = {{"one · rank 0", {1, 2, 3, 4, 0}}, {"two <&> · rank 1", {5, NAN, -1, 0, 0}}};
  const std::string s = svg::stacked_bars(c);
  EXPECT_TRUE(well_formed(s));
  static const std::regex kRect(
      R"re(<rect x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)" height="14" [^>]*><title>([^<]*)</title>)re");
  std::vector<std::pair<double, std::string>> rects;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), kRect); it != std::sregex_iterator(); ++it) {
    rects.emplace_back(std::stod((*it)[2]), (*it)[3]);
  }
  ASSERT_EQ(rects.size(), 5u);  // 4 non-zero segments + 1; NaN, negative and zero are not drawn
  EXPECT_NEAR(rects[1].first / rects[0].first, 2, 0.02);
  EXPECT_NEAR(rects[3].first / rects[0].first, 4, 0.02);
  EXPECT_NEAR(rects[4].first / rects[0].first, 5, 0.02);
  EXPECT_EQ(rects[2].second, "one · rank 0: backward 3.0 ms");
  EXPECT_EQ(rects[4].second, "two &lt;&amp;&gt; · rank 1: data wait 5.0 ms");
  EXPECT_TRUE(has_text(s, "time per step (ms)"));
  EXPECT_TRUE(has_text(s, "exposed comm"));  // legend
  EXPECT_TRUE(has_text(s, "10.0"));          // the first bar's total
  EXPECT_FALSE(mentions_non_finite(s));
}

TEST(SvgStackedBars, NoBarsSaysNoData) {
  svg::BarChart c;
  c.title = "phases";
  c.segments = {"a"};
  const std::string s = svg::stacked_bars(c);
  EXPECT_TRUE(well_formed(s));
  EXPECT_TRUE(has_text(s, "no data"));
  c.bars = {{"zero", {0}}};
  EXPECT_TRUE(has_text(svg::stacked_bars(c), "no data"));
}

TEST(SvgScaling, MeasuredNextToCapacityAndRequired) {
  svg::ScalingData d;
  d.title = "scaling";
  d.ranks = {1, 2, 4};
  d.unique = {1000, 1800, 3000};
  d.capacity = {1000, 2000, 3600};
  d.capacity_name = "capacity";
  d.required = {900, 1800, 3240};
  d.required_name = "target";
  const auto c = svg::scaling_chart(d);
  ASSERT_EQ(c.series.size(), 3u);
  EXPECT_TRUE(c.x.integers);
  EXPECT_EQ(*c.y.min, 0);
  EXPECT_NE(c.desc.find("2 ranks: 1800 unique samples/s, capacity 2000, efficiency 0.900"), std::string::npos);
  const std::string s = svg::line_chart(c);
  EXPECT_TRUE(well_formed(s));
  EXPECT_TRUE(has_text(s, "world size (ranks)"));
  EXPECT_TRUE(has_text(s, "throughput (unique samples/s)"));
  EXPECT_TRUE(has_text(s, "0"));  // throughput from 0
  EXPECT_TRUE(has_text(s, "capacity"));
  const std::string t = svg::scaling_table(d);
  EXPECT_TRUE(check_xml(t).error.empty()) << check_xml(t).error;
  EXPECT_NE(t.find("<td>4</td><td>3000</td><td>3600</td><td>0.833</td><td>3240</td>"), std::string::npos);
}

TEST(SvgTable, CellsAreEscapedAndFiguresHoldTheirNumbers) {
  const std::string t = svg::data_table("c<1>", {"a&b"}, {{"<x>"}, {"y"}});
  EXPECT_TRUE(check_xml(t).error.empty());
  EXPECT_NE(t.find("<caption>c&lt;1&gt;</caption><tr><th>a&amp;b</th></tr>"), std::string::npos);
  EXPECT_NE(t.find("<td>&lt;x&gt;</td>"), std::string::npos);
  const std::string f = svg::figure("<svg/>", t);
  EXPECT_TRUE(check_xml(f).error.empty());
  EXPECT_NE(f.find("<details><summary>the numbers</summary><table"), std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

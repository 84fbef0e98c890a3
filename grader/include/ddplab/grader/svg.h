// Charts as inline SVG, for the grader's report.html and `ddplab bench scaling --html`: line
// charts (loss per step, throughput against ranks) and horizontal stacked bars (phase times per
// rank). The markup is the whole chart: no JavaScript, no font, style sheet or file to fetch, so a
// page holding it opens anywhere, offline, and prints. Every chart has a title, axes with ticks and
// units and a legend; its <svg> carries <title> and <desc> for screen readers, and data_table()
// gives the same numbers as an HTML table. Colours are the Okabe–Ito palette (safe for colour-blind
// readers), lines also differ by dash and markers by shape, so a greyscale print stays readable.
// No LibTorch here (see ddplab_no_pch in cmake/Flags.cmake).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddplab::grader::svg {

/// Text for XML/HTML content and attribute values: & < > " ' as entities, control characters
/// other than tab, newline and carriage return (which XML 1.0 forbids) as '?'.
std::string escape(const std::string& text);

/// `v` with `decimals` decimals; "-0" is written "0", a non-finite value "n/a".
std::string number(double v, int decimals);

/// Round tick values (1, 2 or 5 x 10^k apart) that cover [lo, hi]; lo == hi or non-finite ends
/// give a range around the value (or [0, 1]) instead of a division by zero.
struct Ticks {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> values;         ///< lo, lo + step, ..., hi
  int decimals = 0;                   ///< decimals a label needs to tell neighbouring ticks apart
  std::string label(double v) const;  ///< "0.45", "12k" (thousands, where every tick is a whole k)
};
Ticks nice_ticks(double lo, double hi, int target = 5, bool integers = false);

struct Axis {
  std::string label;               ///< "step", "ranks"
  std::string unit;                ///< shown as "label (unit)"; "" for none
  std::optional<double> min, max;  ///< forced ends (throughput from 0); otherwise the data's range
  bool integers = false;           ///< ticks on whole numbers only (steps, ranks)
  std::string text() const;        ///< "label (unit)"
};

/// One line of a line chart. A non-finite y (a NaN loss) is a gap in the line, and the legend says
/// how many there were; a point with no finite neighbour gets a marker so it does not vanish.
struct Series {
  std::string name;
  std::vector<double> x, y;  ///< the same length
  bool markers = false;      ///< a marker at every point (few points: ranks)
  int style = -1;            ///< colour, dash and marker shape; -1: the series' index
};

struct LineChart {
  std::string title;
  std::string desc;  ///< one or two sentences for <desc> (what the chart shows, the key numbers)
  Axis x, y;
  std::vector<Series> series;
  int width = 720, height = 300;  ///< of the plot's frame; the legend adds rows below
};
/// An <svg> element (with its xmlns, so it is also a valid stand-alone SVG file).
std::string line_chart(const LineChart& chart);

/// Horizontal bars, each split into stacked segments (phases of a step).
struct BarChart {
  std::string title, desc;
  Axis value;                         ///< the horizontal axis; it starts at 0
  std::vector<std::string> segments;  ///< in stacking order, left to right (the legend's order)
  struct Bar {
    std::string label;
    std::vector<double> values;  ///< one per segment; a negative or non-finite value counts as 0
  };
  std::vector<Bar> bars;
  int width = 720;  ///< the height follows the number of bars
};
std::string stacked_bars(const BarChart& chart);

/// The numbers behind a chart as an HTML <table> with a caption; every cell escaped.
std::string data_table(const std::string& caption, const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows);

/// A chart and its numbers: <figure> holding the SVG, then the table in a collapsed <details>.
std::string figure(const std::string& svg, const std::string& table);

/// CSS for figure() (the report's and bench scaling's pages include it in their <style>).
const char* figure_css();

/// Throughput against world size, as the grader's scaling check and `ddplab bench scaling` both
/// measure it: unique samples/s next to what the machine gives (capacity) and, optionally, the
/// throughput a pass requires. All vectors have ranks.size() entries (required may be empty).
struct ScalingData {
  std::string title;
  std::vector<int> ranks;
  std::vector<double> unique;    ///< measured unique samples/s of the data-parallel job
  std::vector<double> capacity;  ///< the machine's n-process capacity, samples/s
  std::string capacity_name;     ///< how capacity was obtained (legend)
  std::vector<double> required;  ///< throughput a pass needs; empty: none
  std::string required_name;
};
LineChart scaling_chart(const ScalingData& data);
/// scaling_chart's numbers: ranks, unique, capacity, efficiency (unique / capacity), required.
std::string scaling_table(const ScalingData& data);

}  // namespace ddplab::grader::svg

// Inline SVG charts (svg.h). Geometry in pixels with one decimal; text widths are estimated from
// the character count (no font metrics without a browser), generously, so labels do not collide.
#include "ddplab/grader/svg.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace ddplab::grader::svg {
namespace {

// Okabe & Ito's palette: lines on white (yellow left out: too faint for a line), and fills for
// stacked segments ordered so that neighbours differ in lightness too (greyscale prints).
constexpr const char* kLineColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};
constexpr const char* kDashes[] = {"", "7 3", "2 2", "9 3 2 3"};
constexpr const char* kFillColors[] = {"#F0E442", "#56B4E9", "#0072B2", "#D55E00", "#CC79A7", "#009E73", "#999999"};
constexpr int kNumLineColors = sizeof(kLineColors) / sizeof(kLineColors[0]);
constexpr int kNumDashes = sizeof(kDashes) / sizeof(kDashes[0]);
constexpr int kNumFills = sizeof(kFillColors) / sizeof(kFillColors[0]);

constexpr double kTitleFont = 14, kFont = 11, kLegendFont = 12;

/// A generous width estimate of `s` at `font` px (sans-serif averages ~0.55 em a character).
double text_width(const std::string& s, double font) {
  size_t chars = 0;
  for (unsigned char c : s) chars += (c & 0xC0) != 0x80;  // UTF-8: count code points
  return static_cast<double>(chars) * font * 0.6;
}

std::string px(double v) {
  std::string s = number(v, 1);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

const char* line_color(int style) { return kLineColors[static_cast<size_t>(style % kNumLineColors)]; }
const char* dash(int style) { return kDashes[static_cast<size_t>(style % kNumDashes)]; }

std::string svg_open(double width, double height, const std::string& title, const std::string& desc) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" "
      "font-family=\"system-ui,sans-serif\" font-size=\"{2}\">\n<title>{3}</title>\n",
      px(width), px(height), kFont, escape(title));
  if (!desc.empty()) s += fmt::format("<desc>{}</desc>\n", escape(desc));
  s += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#fff\"/>\n", px(width), px(height));
  s += fmt::format("<text x=\"{}\" y=\"19\" text-anchor=\"middle\" font-size=\"{}\" font-weight=\"bold\">{}</text>\n",
                   px(width / 2), kTitleFont, escape(title));
  return s;
}

/// A marker of shape style % 4 (circle, square, triangle, diamond) centred on (x, y).
std::string marker(int style, double x, double y, double r, const char* color) {
  switch (style % 4) {
    case 0: return fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>", px(x), px(y), px(r), color);
    case 1:
      return fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", px(x - r), px(y - r),
                         px(2 * r), px(2 * r), color);
    case 2:
      return fmt::format("<path d=\"M{} {}L{} {}L{} {}Z\" fill=\"{}\"/>", px(x), px(y - 1.2 * r), px(x + 1.1 * r),
                         px(y + 0.8 * r), px(x - 1.1 * r), px(y + 0.8 * r), color);
    default:
      return fmt::format("<path d=\"M{} {}L{} {}L{} {}L{} {}Z\" fill=\"{}\"/>", px(x), px(y - 1.3 * r), px(x + 1.3 * r),
                         px(y), px(x), px(y + 1.3 * r), px(x - 1.3 * r), px(y), color);
  }
}

/// Legend items laid out in rows from (left, top) within `width`; returns the markup and adds the
/// height used to `height`. `swatch(i, x, y)` draws item i's sample 24 px wide centred on y.
template <typename Swatch>
std::string legend(const std::vector<std::string>& names, double left, double top, double width, double& height,
                   Swatch swatch) {
  std::string s;
  double x = left, y = top + 9;
  const double row = 18;
  for (size_t i = 0; i < names.size(); ++i) {
    const double w = 24 + 6 + text_width(names[i], kLegendFont) + 18;
    if (x > left && x + w > left + width) x = left, y += row;
    s += swatch(i, x, y);
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\">{}</text>\n", px(x + 30), px(y + 4), kLegendFont,
                     escape(names[i]));
    x += w;
  }
  height += names.empty() ? 0 : y - top + row - 9 + 4;
  return s;
}

}  // namespace

std::string escape(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  for (unsigned char ch : in) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (ch < 0x20 && ch != '\n' && ch != '\t' && ch != '\r') {
          out += '?';
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out;
}

std::string number(double v, int decimals) {
  if (!std::isfinite(v)) return "n/a";
  std::string s = fmt::format("{:.{}f}", v, std::max(0, decimals));
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string Ticks::label(double v) const {
  if (step >= 1000 && std::fmod(step, 1000) == 0 && std::max(std::fabs(lo), std::fabs(hi)) >= 10000) {
    return v == 0 ? "0" : number(v / 1000, 0) + "k";
  }
  return number(v, decimals);
}

Ticks nice_ticks(double lo, double hi, int target, bool integers) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  const double scale = std::max({1.0, std::fabs(lo), std::fabs(hi)});
  if (hi - lo <= 1e-12 * scale) {  // one value: a range around it, not below 0 if it is not
    const double pad = std::max(integers ? 1.0 : 0.0, lo == 0 ? 1.0 : 0.1 * std::fabs(lo));
    const bool nonnegative = lo >= 0;
    lo -= pad, hi += pad;
    if (nonnegative && lo < 0) lo = 0;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  if (integers) step = std::max(1.0, std::round(step));
  Ticks t;
  t.step = step;
  t.lo = std::floor(lo / step + 1e-9) * step;
  t.hi = std::ceil(hi / step - 1e-9) * step;
  if (t.hi <= t.lo) t.hi = t.lo + step;
  t.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  const int n = static_cast<int>(std::llround((t.hi - t.lo) / step));
  for (int i = 0; i <= n; ++i) t.values.push_back(t.lo + i * step);
  return t;
}

std::string Axis::text() const { return unit.empty() ? label : fmt::format("{} ({})", label, unit); }

std::string line_chart(const LineChart& c) {
  // The data's range over finite points; the axes' forced ends win.
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  bool markers = false;
  for (const auto& s : c.series) {
    markers = markers || s.markers;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      xmin = std::min(xmin, s.x[i]), xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, s.y[i]), ymax = std::max(ymax, s.y[i]);
    }
  }
  const bool empty = !std::isfinite(xmin);
  if (empty) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  if (c.x.min) xmin = *c.x.min;
  if (c.x.max) xmax = *c.x.max;
  if (c.y.min) ymin = std::min(*c.y.min, ymin);
  if (c.y.max) ymax = std::max(*c.y.max, ymax);
  const Ticks tx = nice_ticks(xmin, xmax, 8, c.x.integers);
  const Ticks ty = nice_ticks(ymin, ymax, 5, c.y.integers);

  size_t ylabel = 0;
  for (double v : ty.values) ylabel = std::max(ylabel, ty.label(v).size());
  const double W = c.width, H = c.height;
  const double x0 = 24 + static_cast<double>(ylabel) * kFont * 0.6 + 8, x1 = W - 18, y0 = 32, y1 = H - 42;
  const double inset = markers ? 12 : 0;  // markers at the ends stay inside the frame
  auto X = [&](double v) {
    const double p = x0 + inset + (v - tx.lo) / (tx.hi - tx.lo) * (x1 - x0 - 2 * inset);
    return std::clamp(p, x0, x1);
  };
  auto Y = [&](double v) { return std::clamp(y1 - (v - ty.lo) / (ty.hi - ty.lo) * (y1 - y0), y0, y1); };

  std::string body;
  for (double v : ty.values) {
    body +=
        fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"#ddd\"/>", px(x0), px(x1), px(Y(v)));
    body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", px(x0 - 5), px(Y(v) + 4),
                        escape(ty.label(v)));
  }
  for (double v : tx.values) {
    body += fmt::format("<line x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#000\"/>", px(X(v)), px(y1),
                        px(y1 + 4));
    body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(X(v)), px(y1 + 15),
                        escape(tx.label(v)));
  }
  body += fmt::format("<path d=\"M{0} {1}V{2}H{3}\" fill=\"none\" stroke=\"#000\"/>\n", px(x0), px(y0), px(y1), px(x1));
  body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px((x0 + x1) / 2), px(y1 + 33),
                      escape(c.x.text()));
  body += fmt::format("<text transform=\"translate(13 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                      px((y0 + y1) / 2), escape(c.y.text()));
  if (empty) {
    body +=
        fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"{}\" fill=\"#555\">no data</text>\n",
                    px((x0 + x1) / 2), px((y0 + y1) / 2), kLegendFont);
  }

  std::vector<std::string> names;
  for (size_t k = 0; k < c.series.size(); ++k) {
    const auto& s = c.series[k];
    const int style = s.style >= 0 ? s.style : static_cast<int>(k);
    const char* color = line_color(style);
    const size_t n = std::min(s.x.size(), s.y.size());
    auto ok = [&](size_t i) { return i < n && std::isfinite(s.x[i]) && std::isfinite(s.y[i]); };
    std::string d, marks;
    size_t gaps = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!ok(i)) {
        ++gaps;
        continue;
      }
      const bool joined = i > 0 && ok(i - 1);
      d += fmt::format("{}{} {}", joined ? "L" : "M", px(X(s.x[i])), px(Y(s.y[i])));
      const bool isolated = !joined && !ok(i + 1);
      if (s.markers || isolated) marks += marker(style, X(s.x[i]), Y(s.y[i]), s.markers ? 4 : 2.5, color);
    }
    if (!d.empty()) {
      body += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" stroke-linejoin=\"round\"{}/>",
                          d, color, *dash(style) ? fmt::format(" stroke-dasharray=\"{}\"", dash(style)) : "");
    }
    body += marks + "\n";
    std::string name = s.name;
    if (gaps > 0)
      name += fmt::format(" — {} non-finite value{} (gap{})", gaps, gaps == 1 ? "" : "s", gaps == 1 ? "" : "s");
    if (n == 0) name += " — no data";
    names.push_back(name);
  }

  double legend_h = 0;
  const std::string leg = legend(names, x0, H, W - x0 - 8, legend_h, [&](size_t i, double x, double y) {
    const int style = c.series[i].style >= 0 ? c.series[i].style : static_cast<int>(i);
    std::string sw =
        fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>", px(x),
                    px(x + 24), px(y), line_color(style),
                    *dash(style) ? fmt::format(" stroke-dasharray=\"{}\"", dash(style)) : "");
    if (c.series[i].markers) sw += marker(style, x + 12, y, 4, line_color(style));
    return sw + "\n";
  });
  return svg_open(W, H + legend_h, c.title, c.desc) + body + leg + "</svg>";
}

std::string stacked_bars(const BarChart& c) {
  const double W = c.width;
  const double bar_h = 14, pitch = 20, y0 = 32;
  double label_w = 0, vmax = 0;
  for (const auto& b : c.bars) {
    label_w = std::max(label_w, text_width(b.label, kFont));
    double total = 0;
    for (double v : b.values) total += std::isfinite(v) && v > 0 ? v : 0;
    vmax = std::max(vmax, total);
  }
  const bool empty = c.bars.empty() || vmax <= 0;
  const double x0 = 8 + std::min(label_w, 0.4 * W) + 8, x1 = W - 52;
  const double y1 = y0 + pitch * static_cast<double>(std::max<size_t>(c.bars.size(), 1)) + 4;
  const double H = y1 + 42;
  const Ticks t = nice_ticks(0, empty ? 1 : vmax, 6, c.value.integers);
  auto X = [&](double v) { return x0 + v / t.hi * (x1 - x0); };

  std::string body;
  for (double v : t.values) {
    body += fmt::format("<line x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\" stroke=\"{3}\"/>", px(X(v)), px(y0),
                        px(y1 + (v == t.lo ? 0 : 4)), v == t.lo ? "#000" : "#ddd");
    body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(X(v)), px(y1 + 15),
                        escape(t.label(v)));
  }
  body += fmt::format("<path d=\"M{0} {1}H{2}\" stroke=\"#000\"/>\n", px(x0), px(y1), px(x1));
  body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px((x0 + x1) / 2), px(y1 + 33),
                      escape(c.value.text()));
  if (empty) {
    body +=
        fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"{}\" fill=\"#555\">no data</text>\n",
                    px((x0 + x1) / 2), px((y0 + y1) / 2 + 4), kLegendFont);
  }
  body += "<g stroke=\"#333\" stroke-width=\"0.5\">\n";  // outlines part segments in a greyscale print
  for (size_t i = 0; i < c.bars.size(); ++i) {
    const auto& b = c.bars[i];
    const double y = y0 + 4 + pitch * static_cast<double>(i);
    body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" stroke=\"none\">{}</text>", px(x0 - 6),
                        px(y + bar_h - 3), escape(b.label));
    double at = 0;
    for (size_t k = 0; k < b.values.size() && k < c.segments.size(); ++k) {
      const double v = std::isfinite(b.values[k]) && b.values[k] > 0 ? b.values[k] : 0;
      if (v <= 0) continue;
      body +=
          fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {} {}</title></rect>",
                      px(X(at)), px(y), px(X(at + v) - X(at)), px(bar_h), kFillColors[k % kNumFills], escape(b.label),
                      escape(c.segments[k]),
                      escape(number(v, t.decimals + 1) + (c.value.unit.empty() ? "" : " " + c.value.unit)));
      at += v;
    }
    if (at > 0) {
      body += fmt::format("<text x=\"{}\" y=\"{}\" stroke=\"none\">{}</text>", px(X(at) + 4), px(y + bar_h - 3),
                          escape(number(at, t.decimals + 1)));
    }
    body += "\n";
  }
  body += "</g>\n";
  double legend_h = 0, row = 0;
  for (const auto& name : c.segments) row += 24 + 6 + text_width(name, kLegendFont) + 18;
  const double left = x0 + row <= W - 8 ? x0 : 8;  // under the axis if one row fits there
  const std::string leg = legend(c.segments, left, H, W - left - 8, legend_h, [&](size_t i, double x, double y) {
    return fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"24\" height=\"12\" fill=\"{}\" stroke=\"#333\" stroke-width=\"0.5\"/>\n",
        px(x), px(y - 6), kFillColors[i % kNumFills]);
  });
  return svg_open(W, H + legend_h, c.title, c.desc) + body + leg + "</svg>";
}

std::string data_table(const std::string& caption, const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows) {
  std::string s = "<table class=\"data\">";
  if (!caption.empty()) s += "<caption>" + escape(caption) + "</caption>";
  s += "<tr>";
  for (const auto& h : header) s += "<th>" + escape(h) + "</th>";
  s += "</tr>\n";
  for (const auto& r : rows) {
    s += "<tr>";
    for (const auto& cell : r) s += "<td>" + escape(cell) + "</td>";
    s += "</tr>\n";
  }
  return s + "</table>";
}

std::string figure(const std::string& svg, const std::string& table) {
  std::string s = "<figure class=\"chart\">\n" + svg + "\n";
  if (!table.empty()) s += "<details><summary>the numbers</summary>" + table + "</details>\n";
  return s + "</figure>\n";
}

const char* figure_css() {
  return "figure.chart{margin:1em 0}figure.chart svg{display:block;max-width:100%;height:auto;"
         "-webkit-print-color-adjust:exact;print-color-adjust:exact}\n"
         "table.data{width:auto;font-size:.9em}table.data td{font-variant-numeric:tabular-nums}"
         "table.data caption{text-align:left;font-weight:bold;padding:.3em 0}\n"
         "@media print{figure.chart{break-inside:avoid}figure.chart details{display:none}}\n";
}

LineChart scaling_chart(const ScalingData& d) {
  LineChart c;
  c.title = d.title;
  c.x = {"world size", "ranks", std::nullopt, std::nullopt, true};
  c.y = {"throughput", "unique samples/s", 0.0, std::nullopt, false};
  std::vector<double> x(d.ranks.begin(), d.ranks.end());
  c.series.push_back({"data parallel: unique samples/s (measured)", x, d.unique, true, 0});
  c.series.push_back({d.capacity_name, x, d.capacity, true, 1});
  if (!d.required.empty()) c.series.push_back({d.required_name, x, d.required, true, 2});
  std::string desc;
  for (size_t i = 0; i < d.ranks.size() && i < d.unique.size() && i < d.capacity.size(); ++i) {
    desc += fmt::format("{}{} rank{}: {} unique samples/s, capacity {}", desc.empty() ? "" : "; ", d.ranks[i],
                        d.ranks[i] == 1 ? "" : "s", number(d.unique[i], 0), number(d.capacity[i], 0));
    if (d.capacity[i] > 0) desc += fmt::format(", efficiency {}", number(d.unique[i] / d.capacity[i], 3));
  }
  c.desc = desc + ".";
  return c;
}

std::string scaling_table(const ScalingData& d) {
  std::vector<std::string> header = {"ranks", "unique samples/s", "capacity (samples/s)", "efficiency"};
  if (!d.required.empty()) header.push_back("required (samples/s)");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < d.ranks.size(); ++i) {
    const double u = i < d.unique.size() ? d.unique[i] : NAN, cap = i < d.capacity.size() ? d.capacity[i] : NAN;
    std::vector<std::string> r = {std::to_string(d.ranks[i]), number(u, 0), number(cap, 0),
                                  cap > 0 ? number(u / cap, 3) : "n/a"};
    if (!d.required.empty()) r.push_back(i < d.required.size() ? number(d.required[i], 0) : "n/a");
    rows.push_back(std::move(r));
  }
  return data_table(d.title + " — " + d.capacity_name, header, rows);
}

}  // namespace ddplab::grader::svg

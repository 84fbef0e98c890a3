// The grader's outputs from one set of results: Gradescope's results.json, JUnit XML, an HTML
// report and the terminal summary. Formats: references.md (Gradescope), docs/instructor-guide.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/grader/grade.h"
#include "ddplab/grader/svg.h"
#include "ddplab/report.h"
#include "ddplab/timer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ddplab::grader {
namespace {

std::string check_text(const CheckResult& c) {
  std::string s = c.observed;
  if (!c.diagnosis.empty()) s += "\nLikely cause: " + c.diagnosis;
  if (!c.details.empty()) s += "\n\n" + c.details;
  return s;
}

std::string xml_escape(const std::string& in) { return svg::escape(in); }

std::string points(double v) {
  return v == static_cast<int64_t>(v) ? fmt::format("{}", static_cast<int64_t>(v)) : fmt::format("{:.1f}", v);
}

// ---- the report's charts, from the run reports the harness keeps in <lab>/runs/<run>/ ----

/// One run of a graded lab as the harness left it on disk.
struct RunOnDisk {
  std::string name;
  int ranks = 0;
  std::vector<std::optional<json>> reports;  ///< by rank; nullopt: missing or unreadable
};

std::optional<json> read_report(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    json j = json::parse(in);
    if (!j.is_object() || j.value("schema", "") != "ddplab.run-report") return std::nullopt;
    return j;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

/// The runs in <lab.out_dir>/runs (docs/instructor-guide.md, "Outputs"), by world size, then name.
/// A run folder last written before `since` was left by an earlier grading into the same folder
/// (grade_lab replaces the folders of the runs it makes, and only those): it is not this grading's.
std::vector<RunOnDisk> runs_of(const LabResult& lab, fs::file_time_type since) {
  std::vector<RunOnDisk> runs;
  const fs::path root = fs::path(lab.out_dir) / "runs";
  std::error_code ec;
  if (lab.out_dir.empty() || !fs::is_directory(root, ec)) return runs;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory(ec)) continue;
    const auto written = fs::last_write_time(entry.path(), ec);
    if (ec || written < since) continue;
    RunOnDisk r;
    r.name = entry.path().filename().string();
    static const std::regex kRankFile(R"(rank([0-9]{1,3})\.json)");
    for (const auto& f : fs::directory_iterator(entry.path(), ec)) {
      std::smatch m;
      const std::string file = f.path().filename().string();
      if (std::regex_match(file, m, kRankFile)) r.ranks = std::max(r.ranks, std::stoi(m[1]) + 1);
    }
    r.reports.resize(static_cast<size_t>(r.ranks));
    for (int k = 0; k < r.ranks; ++k) {
      r.reports[static_cast<size_t>(k)] = read_report(entry.path() / fmt::format("rank{}.json", k));
    }
    for (const auto& rep : r.reports) {
      if (!rep) continue;
      const auto world = rep->find("world_size");
      if (world != rep->end() && world->is_number_integer()) r.ranks = std::max(r.ranks, world->get<int>());
    }
    r.ranks = std::min(r.ranks, 1024);
    r.reports.resize(static_cast<size_t>(r.ranks));  // ranks that wrote no report stay nullopt
    if (r.ranks > 0) runs.push_back(std::move(r));
  }
  std::sort(runs.begin(), runs.end(), [](const RunOnDisk& a, const RunOnDisk& b) {
    return a.ranks != b.ranks ? a.ranks < b.ranks : a.name < b.name;
  });
  return runs;
}

/// The losses in a report's steps.loss (JSON null, as a NaN is written, and non-numbers: NaN).
std::vector<double> losses_of(const json& report) {
  std::vector<double> out;
  const auto steps = report.find("steps");
  if (steps == report.end() || !steps->is_object()) return out;
  const auto loss = steps->find("loss");
  if (loss == steps->end() || !loss->is_array()) return out;
  for (const auto& v : *loss) out.push_back(v.is_number() ? v.get<double>() : NAN);
  return out;
}

std::string run_label(const RunOnDisk& r) {
  return fmt::format("{} ({} rank{})", r.name, r.ranks, r.ranks == 1 ? "" : "s");
}

/// Rank 0's loss at every step of every run; long runs are drawn as means of k steps (a step with
/// a non-finite loss makes its group a gap, so it still shows).
constexpr size_t kMaxLinePoints = 400;

std::string loss_figure(const std::vector<RunOnDisk>& runs) {
  svg::LineChart c;
  c.title = "Training loss per step (rank 0 of each run)";
  c.x = {"step", "", 0.0, std::nullopt, true};
  c.y = {"loss", "binary cross-entropy, nats", std::nullopt, std::nullopt, false};
  std::vector<std::vector<std::string>> rows;
  size_t drawn = 0;
  for (const auto& r : runs) {
    const auto loss = r.reports[0] ? losses_of(*r.reports[0]) : std::vector<double>{};
    svg::Series s;
    s.name = run_label(r);
    const size_t k = (loss.size() + kMaxLinePoints - 1) / kMaxLinePoints;
    if (k > 1) s.name += fmt::format(", mean of every {} steps", k);
    for (size_t i = 0; i < loss.size(); i += std::max<size_t>(k, 1)) {
      double sum = 0;
      size_t n = 0;
      bool finite = true;
      for (size_t j = i; j < std::min(loss.size(), i + std::max<size_t>(k, 1)); ++j, ++n) {
        finite = finite && std::isfinite(loss[j]);
        sum += loss[j];
      }
      s.x.push_back(static_cast<double>(i) + static_cast<double>(n - 1) / 2);
      s.y.push_back(finite ? sum / static_cast<double>(n) : NAN);
    }
    size_t bad = 0;
    double lo = INFINITY;
    std::optional<size_t> first_bad;
    for (size_t i = 0; i < loss.size(); ++i) {
      if (std::isfinite(loss[i])) {
        lo = std::min(lo, loss[i]);
      } else {
        ++bad;
        if (!first_bad) first_bad = i;
      }
    }
    drawn += loss.size() - bad;
    rows.push_back({r.name, std::to_string(r.ranks), std::to_string(loss.size()),
                    loss.empty() ? "" : svg::number(loss.front(), 4), loss.empty() ? "" : svg::number(loss.back(), 4),
                    std::isfinite(lo) ? svg::number(lo, 4) : "",
                    bad == 0 ? "0" : fmt::format("{} (first at step {})", bad, *first_bad)});
    c.series.push_back(std::move(s));
  }
  if (drawn == 0) return "";  // no run got to a step: nothing to draw
  c.desc = fmt::format("Loss of rank 0 at every step, one line per run ({} runs).", runs.size());
  return svg::figure(svg::line_chart(c),
                     svg::data_table("Loss per run (rank 0)",
                                     {"run", "ranks", "steps", "first", "last", "lowest", "non-finite"}, rows));
}

/// Each rank's mean time per step in each phase (metrics.md, "Phase times").
std::string phases_figure(const std::vector<RunOnDisk>& runs) {
  static const std::vector<std::pair<const char*, const char*>> kPhases = {{"data_wait", "data wait"},
                                                                           {"forward", "forward"},
                                                                           {"backward", "backward"},
                                                                           {"comm", "exposed comm"},
                                                                           {"optimizer", "optimizer"}};
  svg::BarChart c;
  c.title = "Time per step by phase, each rank (mean over its steps)";
  c.value = {"time per step", "ms", std::nullopt, std::nullopt, false};
  for (const auto& p : kPhases) c.segments.push_back(p.second);
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : runs) {
    for (int k = 0; k < r.ranks; ++k) {
      const auto& rep = r.reports[static_cast<size_t>(k)];
      const json phases = rep ? rep->value("phases", json::object()) : json::object();
      const double steps =
          phases.is_object() && phases.value("steps", json()).is_number() ? phases.at("steps").get<double>() : 0;
      std::vector<std::string> row = {r.name, std::to_string(k), svg::number(steps, 0)};
      if (steps <= 0) {
        row.push_back(rep ? "no steps" : "no report");
        rows.push_back(std::move(row));
        continue;
      }
      svg::BarChart::Bar bar{fmt::format("{} · rank {}", r.name, k), {}};
      double total = 0;
      for (const auto& p : kPhases) {
        const auto v = phases.find(p.first);
        const double ms = v != phases.end() && v->is_number() ? v->get<double>() / steps * 1e3 : NAN;
        bar.values.push_back(ms);
        row.push_back(svg::number(ms, 2));
        if (std::isfinite(ms)) total += ms;
      }
      row.push_back(svg::number(total, 2));
      rows.push_back(std::move(row));
      c.bars.push_back(std::move(bar));
    }
  }
  if (c.bars.empty()) return "";
  c.desc =
      "Stacked bars, one per rank of each run: data wait, forward, backward, exposed communication and "
      "optimizer, in milliseconds per step.";
  std::vector<std::string> header = {"run", "rank", "steps"};
  for (const auto& p : kPhases) header.push_back(std::string(p.second) + " (ms)");
  header.push_back("total (ms)");
  return svg::figure(svg::stacked_bars(c), svg::data_table("Milliseconds per step", header, rows));
}

/// A scaling check's chart, from the figures its observation states (checks/scaling.cpp words
/// them; report_plots_test pins the wording against the check itself).
std::string scaling_figure(const CheckResult& check) {
  static const std::regex kObserved(
      R"(unique samples/s: ([0-9.]+) on 1 rank, ([0-9.]+) on ([0-9]+) ranks -> efficiency [0-9.]+; )"
      R"(reference ([0-9.]+) from .*; required >= ([0-9.]+)% of it)");
  std::smatch m;
  if (!std::regex_search(check.observed, m, kObserved)) return "";
  const double r1 = std::stod(m[1]), rn = std::stod(m[2]), ref = std::stod(m[4]), share = std::stod(m[5]) / 100;
  const int n = std::stoi(m[3]);
  svg::ScalingData d;
  d.title = "Scaling: " + check.name;
  d.ranks = {1, n};
  d.unique = {r1, rn};
  d.capacity = {r1, n * r1};
  d.capacity_name = "capacity the check assumes: n × the 1-rank run's rate";
  d.required = {r1, share * ref * n * r1};
  d.required_name = fmt::format("needed to pass: {}% of the reference's efficiency {}", svg::number(100 * share, 0),
                                svg::number(ref, 3));
  return svg::figure(svg::line_chart(svg::scaling_chart(d)), svg::scaling_table(d));
}

/// The charts of one lab ("" when it has nothing to draw: unit tests only, a build error).
std::string lab_charts(const LabResult& lab, fs::file_time_type since) {
  std::string h;
  const auto runs = runs_of(lab, since);
  if (!runs.empty()) h += loss_figure(runs) + phases_figure(runs);
  for (const auto& c : lab.checks) {
    if (c.kind == "scaling" && (c.status == Status::kPassed || c.status == Status::kFailed)) h += scaling_figure(c);
  }
  return h.empty() ? "" : "<h3>Runs</h3>\n" + h;
}

}  // namespace

void summarize(LeaderboardResult& r) {
  if (r.values.empty()) return;
  r.median = median(r.values);
  const auto [lo, hi] = std::minmax_element(r.values.begin(), r.values.end());
  r.spread = *hi - *lo;
}

std::string leaderboard_text(const LeaderboardResult& l) {
  if (!l.counted) return fmt::format("{}: {}", l.name, l.why);
  std::string values;
  for (double v : l.values) values += (values.empty() ? "" : ", ") + fmt::format("{:.4g}", v);
  return fmt::format("{}: {:.4g} (median of {} measurement(s): {}; spread {:.3g}, {:.1f} % of the median)", l.name,
                     l.median, l.values.size(), values, l.spread, l.median != 0 ? 100 * l.spread / l.median : 0.0);
}

/// "multi-rank runs over Open MPI (mpirun): cover, ddp2" and/or "over c10d (the kit's launcher):
/// ..."; "" when the lab made no multi-rank run.
std::string backends_text(const LabResult& lab) {
  std::map<std::string, std::vector<std::string>> by;
  for (const auto& [run, backend] : lab.run_backends) by[backend].push_back(run);
  std::vector<std::string> parts;
  for (const auto& [backend, runs] : by) {
    parts.push_back(fmt::format("{}: {}",
                                backend == "mpi"    ? "over Open MPI's shared memory (mpirun)"
                                : backend == "c10d" ? "over c10d (the kit's launcher)"
                                                    : backend,
                                fmt::join(runs, ", ")));
  }
  return parts.empty() ? "" : fmt::format("multi-rank runs {}", fmt::join(parts, "; "));
}

json gradescope_results(const std::vector<LabResult>& labs) {
  json tests = json::array();
  double score = 0, seconds = 0;
  std::string output;
  for (const auto& lab : labs) {
    score += lab.score;
    seconds += lab.seconds;
    output += fmt::format("{}: {} / {} points", lab.title, points(lab.score), points(lab.max_score));
    if (!lab.not_attempted.empty()) {
      output += " — not attempted: exercise(s) ";
      for (size_t i = 0; i < lab.not_attempted.size(); ++i) output += (i ? ", " : "") + lab.not_attempted[i];
    }
    if (!lab.build_error.empty()) output += " — the submission does not compile";
    output += "\n";
    if (const std::string b = backends_text(lab); !b.empty()) output += "  " + b + "\n";
    for (const auto& l : lab.leaderboard) output += leaderboard_text(l) + "\n";
    for (const auto& c : lab.checks) {
      json t = {{"name", fmt::format("{}: {}", lab.lab, c.name)},
                {"score", c.score},
                {"max_score", c.max_score},
                {"status", c.status == Status::kPassed ? "passed" : "failed"},
                {"output", fmt::format("[{}] {}", status_name(c.status), check_text(c))},
                {"visibility", visibility_name(c.visibility)},
                {"extra_data",
                 {{"id", c.id}, {"kind", c.kind}, {"ddplab_status", status_name(c.status)}, {"seconds", c.seconds}}}};
      if (!c.exercise.empty()) t["number"] = c.exercise;
      tests.push_back(std::move(t));
    }
  }
  json out = {{"score", score},          {"execution_time", seconds},     {"output", output},
              {"visibility", "visible"}, {"stdout_visibility", "hidden"}, {"tests", tests}};
  // How each lab's multi-rank runs were started ("mpi" or "c10d"), by lab and run.
  json backends = json::object();
  for (const auto& lab : labs) {
    if (!lab.run_backends.empty()) backends[lab.lab] = lab.run_backends;
  }
  if (!backends.empty()) out["extra_data"] = {{"backends", backends}};
  // Gradescope's leaderboard: a column per entry, the median of its measurements, and a column of
  // their spread, so that a ranking shows how far the measurement itself moves.
  json board = json::array();
  for (const auto& lab : labs) {
    for (const auto& l : lab.leaderboard) {
      if (!l.counted) continue;
      board.push_back({{"name", fmt::format("{}: {}", lab.lab, l.name)}, {"value", l.median}, {"order", l.order}});
      board.push_back({{"name", fmt::format("{}: {} (spread of {})", lab.lab, l.name, l.values.size())},
                       {"value", l.spread},
                       {"order", "asc"}});
    }
  }
  if (!board.empty()) out["leaderboard"] = board;
  return out;
}

std::string junit_xml(const std::vector<LabResult>& labs) {
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"ddplab grade\">\n";
  for (const auto& lab : labs) {
    int failures = 0, errors = 0;
    for (const auto& c : lab.checks) {
      if (c.status == Status::kError) {
        ++errors;
      } else if (c.status != Status::kPassed) {
        ++failures;
      }
    }
    x += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{:.3f}\">\n",
                     xml_escape(lab.lab), lab.checks.size(), failures, errors, lab.seconds);
    x += fmt::format(
        "    <properties><property name=\"score\" value=\"{}\"/><property name=\"max_score\" "
        "value=\"{}\"/></properties>\n",
        lab.score, lab.max_score);
    for (const auto& c : lab.checks) {
      x += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\"", xml_escape(lab.lab),
                       xml_escape(c.name), c.seconds);
      if (c.status == Status::kPassed) {
        x += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml_escape(c.observed));
      } else {
        const char* tag = c.status == Status::kError ? "error" : "failure";
        x += fmt::format(">\n      <{} type=\"{}\" message=\"{}\">{}</{}>\n    </testcase>\n", tag,
                         c.status == Status::kNotAttempted ? "not_attempted" : c.kind, xml_escape(c.observed),
                         xml_escape(check_text(c)), tag);
      }
    }
    x += "  </testsuite>\n";
  }
  x += "</testsuites>\n";
  return x;
}

std::string html_report(const std::vector<LabResult>& labs) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ddplab grade</title>\n<style>\n"
      "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;width:100%}\n"
      "td,th{border-bottom:1px solid #ddd;padding:.35em .6em;text-align:left;vertical-align:top}\n"
      ".passed{color:#17692b}.failed{color:#b3261e}.na{color:#8a5a00}.error{color:#6b1aa6}\n"
      "pre{background:#f6f6f6;padding:.6em;overflow-x:auto;white-space:pre-wrap}summary{cursor:pointer}\n" +
      std::string(svg::figure_css()) + "</style></head><body>\n<h1>ddplab grade</h1>\n";
  double total = 0, max = 0, seconds = 0;
  for (const auto& lab : labs) total += lab.score, max += lab.max_score, seconds += lab.seconds;
  // Runs older than this grading (its labs' seconds, with a margin) are an earlier grading's.
  const auto since = fs::file_time_type::clock::now() - std::chrono::seconds(static_cast<int64_t>(seconds) + 120);
  h += fmt::format("<p><b>Total: {} / {}</b></p>\n", points(total), points(max));
  for (const auto& lab : labs) {
    h += fmt::format("<h2>{} — {} / {}</h2>\n", xml_escape(lab.title), points(lab.score), points(lab.max_score));
    if (!lab.not_attempted.empty()) {
      std::string ids;
      for (const auto& id : lab.not_attempted) ids += (ids.empty() ? "" : ", ") + id;
      h += fmt::format("<p class=\"na\">Not attempted: exercise(s) {}</p>\n", xml_escape(ids));
    }
    if (!lab.build_error.empty()) h += "<p class=\"failed\">The submission does not compile.</p>\n";
    if (const std::string b = backends_text(lab); !b.empty()) h += fmt::format("<p>{}</p>\n", xml_escape(b));
    h += "<table><tr><th>status</th><th>points</th><th>check</th><th>what the grader saw</th></tr>\n";
    for (const auto& c : lab.checks) {
      const char* cls = c.status == Status::kPassed         ? "passed"
                        : c.status == Status::kNotAttempted ? "na"
                        : c.status == Status::kError        ? "error"
                                                            : "failed";
      h += fmt::format("<tr><td class=\"{}\">{}</td><td>{} / {}</td><td>{}{}</td><td>{}", cls, status_name(c.status),
                       points(c.score), points(c.max_score), c.exercise.empty() ? "" : xml_escape(c.exercise) + " ",
                       xml_escape(c.name), xml_escape(c.observed));
      if (!c.diagnosis.empty()) h += fmt::format("<br><b>Likely cause:</b> {}", xml_escape(c.diagnosis));
      if (!c.details.empty()) {
        h += fmt::format("<details><summary>details</summary><pre>{}</pre></details>", xml_escape(c.details));
      }
      h += "</td></tr>\n";
    }
    h += "</table>\n";
    if (!lab.leaderboard.empty()) {
      h += "<h3>Leaderboard</h3>\n<ul>\n";
      for (const auto& l : lab.leaderboard) h += fmt::format("<li>{}</li>\n", xml_escape(leaderboard_text(l)));
      h += "</ul>\n";
    }
    h += lab_charts(lab, since);
  }
  h += "</body></html>\n";
  return h;
}

std::string terminal_summary(const std::vector<LabResult>& labs, bool color) {
  auto paint = [&](const char* code, const std::string& s) {
    return color ? fmt::format("\033[{}m{}\033[0m", code, s) : s;
  };
  std::string out;
  double total = 0, max = 0;
  for (const auto& lab : labs) {
    total += lab.score, max += lab.max_score;
    out += fmt::format("\n{}  {} / {} points  ({:.1f} s)\n", paint("1", lab.title), points(lab.score),
                       points(lab.max_score), lab.seconds);
    for (const auto& c : lab.checks) {
      const std::string st = c.status == Status::kPassed         ? paint("32", "PASS")
                             : c.status == Status::kNotAttempted ? paint("33", "N/A ")
                             : c.status == Status::kError        ? paint("35", "ERR ")
                                                                 : paint("31", "FAIL");
      out += fmt::format("  {} {:>5} / {:<3} {}{}\n", st, points(c.score), points(c.max_score),
                         c.exercise.empty() ? "" : c.exercise + " ", c.name);
      if (c.status != Status::kPassed) {
        out +=
            fmt::format("       {}\n", c.status == Status::kNotAttempted ? "not attempted: " + c.observed : c.observed);
        if (!c.diagnosis.empty() && c.status != Status::kNotAttempted) {
          out += fmt::format("       likely cause: {}\n", c.diagnosis);
        }
      }
    }
    if (!lab.not_attempted.empty()) {
      std::string ids;
      for (const auto& id : lab.not_attempted) ids += (ids.empty() ? "" : ", ") + id;
      out += paint("33", fmt::format("  not attempted: exercise(s) {}\n", ids));
    }
    for (const auto& l : lab.leaderboard) out += fmt::format("  leaderboard: {}\n", leaderboard_text(l));
    if (const std::string b = backends_text(lab); !b.empty()) out += fmt::format("  {}\n", b);
    out += fmt::format("  results: {}\n", lab.out_dir);
  }
  if (labs.size() > 1) {
    out += fmt::format("\n{}\n", paint("1", fmt::format("Total: {} / {} points", points(total), points(max))));
  }
  return out;
}

void write_outputs(const std::vector<LabResult>& labs, const std::string& dir) {
  fs::create_directories(dir);
  write_file_atomic((fs::path(dir) / "results.json").string(), gradescope_results(labs).dump(2) + "\n");
  write_file_atomic((fs::path(dir) / "junit.xml").string(), junit_xml(labs));
  write_file_atomic((fs::path(dir) / "report.html").string(), html_report(labs));
}

}  // namespace ddplab::grader

// The grader's outputs from one set of results: Gradescope's results.json, JUnit XML, an HTML
// report and the terminal summary. Formats: references.md (Gradescope), docs/instructor-guide.md.
#include <filesystem>

#include <fmt/format.h>

#include "ddplab/grader/grade.h"
#include "ddplab/report.h"

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

std::string xml_escape(const std::string& in) {
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
        // XML 1.0 forbids most control characters, which a crashing program may print.
        if (ch < 0x20 && ch != '\n' && ch != '\t' && ch != '\r') {
          out += '?';
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out;
}

std::string points(double v) {
  return v == static_cast<int64_t>(v) ? fmt::format("{}", static_cast<int64_t>(v)) : fmt::format("{:.1f}", v);
}

}  // namespace

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
  return {{"score", score},          {"execution_time", seconds},     {"output", output},
          {"visibility", "visible"}, {"stdout_visibility", "hidden"}, {"tests", tests}};
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
      "pre{background:#f6f6f6;padding:.6em;overflow-x:auto;white-space:pre-wrap}summary{cursor:pointer}\n"
      "</style></head><body>\n<h1>ddplab grade</h1>\n";
  double total = 0, max = 0;
  for (const auto& lab : labs) total += lab.score, max += lab.max_score;
  h += fmt::format("<p><b>Total: {} / {}</b></p>\n", points(total), points(max));
  for (const auto& lab : labs) {
    h += fmt::format("<h2>{} — {} / {}</h2>\n", xml_escape(lab.title), points(lab.score), points(lab.max_score));
    if (!lab.not_attempted.empty()) {
      std::string ids;
      for (const auto& id : lab.not_attempted) ids += (ids.empty() ? "" : ", ") + id;
      h += fmt::format("<p class=\"na\">Not attempted: exercise(s) {}</p>\n", xml_escape(ids));
    }
    if (!lab.build_error.empty()) h += "<p class=\"failed\">The submission does not compile.</p>\n";
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

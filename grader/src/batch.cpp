// Batch grading: a folder of submissions (folders or zips, as an LMS export or Gradescope
// delivers them) into one result set per student and a gradebook CSV.
#include "ddplab/grader/batch.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "ddplab/error.h"
#include "ddplab/report.h"

namespace fs = std::filesystem;

namespace ddplab::grader {
namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::vector<LabResult> grade_labs(const std::vector<LabSpec>& specs, const GradeOptions& options) {
  std::vector<LabResult> results;
  for (const auto& s : specs) results.push_back(grade_lab(s, options));
  return results;
}

std::string Gradebook::csv() const {
  std::string book = "student,lab,score,max_score,not_attempted,build_error\n";
  for (const auto& r : rows) {
    std::string na;
    for (const auto& id : r.not_attempted) na += (na.empty() ? "" : " ") + id;
    const std::string build = !r.error.empty() ? r.error : r.build_error ? "yes" : "";
    book += fmt::format("{},{},{},{},{},{}\n", csv_field(r.student), csv_field(r.lab), r.score, r.max_score,
                        csv_field(na), csv_field(build));
  }
  return book;
}

std::vector<std::string> batch_submissions(const std::string& dir) {
  if (!fs::is_directory(dir)) throw ConfigError(fmt::format("--batch {}: no such folder", dir));
  std::vector<std::string> subs;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() || (e.is_regular_file() && e.path().extension() == ".zip")) subs.push_back(e.path().string());
  }
  std::sort(subs.begin(), subs.end());
  if (subs.empty()) throw ConfigError(fmt::format("--batch {}: no submission folders or .zip files in it", dir));
  return subs;
}

std::string student_of(const std::string& submission) {
  const fs::path p(submission);
  return p.extension() == ".zip" ? p.stem().string() : p.filename().string();
}

Gradebook grade_batch(const std::vector<LabSpec>& specs, GradeOptions options, const std::string& dir,
                      const PrintFn& print, const GradeFn& grade) {
  Gradebook book;
  const std::string base_out = options.out_dir;
  for (const auto& s : batch_submissions(dir)) {
    const std::string student = student_of(s);
    options.tree = "submission";
    options.submission = fs::absolute(s).string();
    options.out_dir = (fs::path(base_out) / student).string();
    print(fmt::format("== {}\n", student));
    std::vector<LabResult> rs;
    try {
      rs = grade(specs, options);
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& e) {
      // One broken submission (say, a corrupt zip) must not stop the batch.
      print(fmt::format("{}: {}\n", student, e.what()));
      for (const auto& sp : specs) book.rows.push_back({student, sp.id, 0, sp.max_score(), {}, false, e.what()});
      continue;
    }
    write_outputs(rs, options.out_dir);
    print(terminal_summary(rs, options.color));
    for (const auto& r : rs) {
      // A broken rule (an edit outside the regions) is why the row is 0: the gradebook says which.
      book.rows.push_back({student, r.lab, r.score, r.max_score, r.not_attempted, !r.build_error.empty(),
                           r.rule_errors.empty() ? "" : "rejected: " + r.rule_errors.front()});
    }
  }
  const std::string path = (fs::path(base_out) / "gradebook.csv").string();
  write_file_atomic(path, book.csv());
  print(fmt::format("gradebook: {}\n", path));
  return book;
}

}  // namespace ddplab::grader

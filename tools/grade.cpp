// `ddplab grade`: the grader's command line. Grades the working tree (a student's own check), a
// submission folder or zip (an instructor, Gradescope), or a folder of submissions into a
// gradebook; calibrates the reference figures of this machine. Guide: docs/instructor-guide.md.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "ddplab/config.h"
#include "ddplab/error.h"
#include "ddplab/grader/grade.h"
#include "ddplab/report.h"

namespace fs = std::filesystem;

namespace ddplab::tools {
namespace {

struct GradeCli {
  std::vector<std::string> labs;
  bool all = false;
  std::string submission, batch, tree, out = "grade-results", data, kit, build, calibration;
  std::vector<std::string> checks;
  double run_timeout = 0, test_timeout = 0;
  bool no_build = false, calibrate = false, no_color = false, quiet = false;
};

std::string csv(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::vector<grader::LabSpec> selected(const GradeCli& o, const std::string& source) {
  if (o.all || o.labs.empty()) {
    if (!o.all && o.labs.empty()) throw ConfigError("name a lab (ddplab grade lab02) or use --all");
    return grader::load_all_specs(source);
  }
  std::vector<grader::LabSpec> specs;
  for (const auto& l : o.labs) specs.push_back(grader::find_spec(source, l));
  return specs;
}

std::vector<grader::LabResult> grade_set(const std::vector<grader::LabSpec>& specs, grader::GradeOptions go) {
  std::vector<grader::LabResult> results;
  for (const auto& s : specs) results.push_back(grader::grade_lab(s, go));
  return results;
}

bool full_marks(const std::vector<grader::LabResult>& rs) {
  for (const auto& r : rs) {
    if (r.score < r.max_score) return false;
  }
  return !rs.empty();
}

/// Grades the solutions and stores every check's measured figure for this machine.
void calibrate(const std::vector<grader::LabSpec>& specs, grader::GradeOptions go, const std::string& path) {
  go.tree = "solutions";
  go.submission.clear();
  go.out_dir = (fs::path(go.out_dir) / "calibration").string();
  grader::Calibration cal = grader::load_calibration(path, grader::calibration_key(go.data_dir));
  fmt::print("calibrating on {}\n", cal.machine);
  for (const auto& s : specs) {
    const auto r = grader::grade_lab(s, go);
    for (const auto& c : r.checks) {
      if (c.figure) {
        cal.values[s.id + "/" + c.name] = *c.figure;
        fmt::print("  {} / {}: {:.4f}\n", s.id, c.name, *c.figure);
      }
    }
    if (r.score < r.max_score) {
      fmt::print(stderr, "warning: the reference solution of {} scores {} / {} on this machine:\n{}", s.id, r.score,
                 r.max_score, grader::terminal_summary({r}, false));
    }
  }
  grader::save_calibration(path, cal);
  fmt::print("calibration written to {}\n", path);
}

int run_grade(const GradeCli& o) {
  grader::GradeOptions go;
  go.source_dir = o.kit.empty() ? DDPLAB_SOURCE_DIR : o.kit;
  // The build this ddplab belongs to: <build>/bin/ddplab.
  go.build_dir = o.build.empty() ? fs::canonical("/proc/self/exe").parent_path().parent_path().string() : o.build;
  go.tree = o.tree.empty() ? DDPLAB_LAB_TREE : o.tree;
  go.data_dir = o.data;
  if (go.data_dir.empty()) {
    const char* env = std::getenv("DDPLAB_DATA");
    go.data_dir = env ? env : (fs::path(go.source_dir) / "data" / "ctr-small").string();
  }
  if (!fs::exists(fs::path(go.data_dir) / "meta.json")) {
    throw ConfigError(fmt::format("--data {}: no data set there (generate one: ddplab data gen --out {})", go.data_dir, go.data_dir));
  }
  go.data_dir = fs::canonical(go.data_dir).string();
  go.out_dir = fs::absolute(o.out).string();
  go.build = !o.no_build;
  go.only_checks = o.checks;
  go.run_timeout_s = o.run_timeout;
  go.test_timeout_s = o.test_timeout;
  go.color = !o.no_color && ::isatty(STDOUT_FILENO);
  go.quiet = o.quiet;
  go.calibration = o.calibration.empty() ? grader::default_calibration_path(go.build_dir) : o.calibration;
  if (!o.submission.empty() && !o.batch.empty()) throw ConfigError("--submission and --batch: give one of them");
  if (go.tree != "labs" && go.tree != "solutions") throw ConfigError(fmt::format("--tree {}: expected labs or solutions", go.tree));
  const auto specs = selected(o, go.source_dir);

  if (o.calibrate) {
    calibrate(specs, go, go.calibration);
    return 0;
  }
  if (!o.submission.empty()) {
    go.tree = "submission";
    go.submission = fs::absolute(o.submission).string();
  }
  if (!o.batch.empty()) {
    // One result set per student, and one gradebook row per student and lab.
    std::vector<fs::path> subs;
    for (const auto& e : fs::directory_iterator(o.batch)) {
      if (e.is_directory() || e.path().extension() == ".zip") subs.push_back(e.path());
    }
    std::sort(subs.begin(), subs.end());
    if (subs.empty()) throw ConfigError(fmt::format("--batch {}: no submission folders or .zip files in it", o.batch));
    std::string book = "student,lab,score,max_score,not_attempted,build_error\n";
    const std::string base_out = go.out_dir;
    for (const auto& s : subs) {
      const std::string student = s.stem().string();
      go.tree = "submission";
      go.submission = fs::absolute(s).string();
      go.out_dir = (fs::path(base_out) / student).string();
      fmt::print("== {}\n", student);
      std::vector<grader::LabResult> rs;
      try {
        rs = grade_set(specs, go);
      } catch (const ConfigError&) {
        throw;
      } catch (const std::exception& e) {
        // One broken submission (say, a corrupt zip) must not stop the batch.
        fmt::print(stderr, "{}: {}\n", student, e.what());
        for (const auto& sp : specs) book += fmt::format("{},{},0,{},,{}\n", csv(student), sp.id, sp.max_score(), csv(e.what()));
        continue;
      }
      grader::write_outputs(rs, go.out_dir);
      fmt::print("{}", grader::terminal_summary(rs, go.color));
      for (const auto& r : rs) {
        std::string na;
        for (const auto& id : r.not_attempted) na += (na.empty() ? "" : " ") + id;
        book += fmt::format("{},{},{},{},{},{}\n", csv(student), r.lab, r.score, r.max_score, csv(na),
                            r.build_error.empty() ? "" : "yes");
      }
    }
    write_file_atomic((fs::path(base_out) / "gradebook.csv").string(), book);
    fmt::print("gradebook: {}\n", (fs::path(base_out) / "gradebook.csv").string());
    return 0;
  }
  const auto results = grade_set(specs, go);
  grader::write_outputs(results, go.out_dir);
  fmt::print("{}", grader::terminal_summary(results, go.color));
  fmt::print("results.json, junit.xml and report.html in {}\n", go.out_dir);
  return full_marks(results) ? 0 : 1;
}

}  // namespace

/// `ddplab bench grade`: wall time to grade every lab of one tree, builds excluded, against the
/// target (3 minutes for labs 01-03 on 2 cores).
int run_bench_grade(const GradeCli& o, double target_s) {
  GradeCli g = o;
  g.all = true;
  g.no_build = true;
  g.quiet = true;
  g.no_color = true;
  if (g.tree.empty()) g.tree = "solutions";
  const auto start = std::chrono::steady_clock::now();
  const int status = run_grade(g);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool ok = s <= target_s;
  fmt::print("bench grade: every lab of the {} tree graded in {:.1f} s (builds excluded); target <= {:.0f} s   {}\n",
             g.tree, s, target_s, ok ? "OK" : "FAILED");
  if (status != 0) fmt::print("  (the graded tree did not score full marks: see the summary above)\n");
  return ok ? 0 : 1;
}

void setup_bench_grade(CLI::App& bench) {
  auto o = std::make_shared<GradeCli>();
  auto target = std::make_shared<double>(180.0);
  auto* sub = bench.add_subcommand("grade", "Time to grade every lab of a built tree (builds excluded) vs the target");
  sub->add_option("--tree", o->tree, "labs or solutions (default: solutions)");
  sub->add_option("--data", o->data, "Data set for the runs (default: $DDPLAB_DATA, else <kit>/data/ctr-small)");
  sub->add_option("--out", o->out, "Where results go")->capture_default_str();
  sub->add_option("--calibration", o->calibration, "Calibration file (default: <build>/grader/calibration.json)");
  sub->add_option("--target", *target, "Required seconds")->capture_default_str();
  sub->callback([o, target] { exit_status() = run_bench_grade(*o, *target); });
}

void setup_grade(CLI::App& app) {
  auto o = std::make_shared<GradeCli>();
  auto* sub = app.add_subcommand("grade", "Grade labs: correctness, utilization, scaling (results.json, JUnit, HTML)");
  sub->add_option("labs", o->labs, "Labs to grade: lab01, 02, lab03_sampler, or a grade.toml file");
  sub->add_flag("--all", o->all, "Grade every lab");
  sub->add_option("--submission", o->submission, "A submission folder or .zip (only its manifest files are used)");
  sub->add_option("--batch", o->batch, "A folder of submissions (folders or .zip): gradebook.csv + one result set each");
  sub->add_option("--tree", o->tree, "Without --submission: grade this build's labs or solutions tree");
  sub->add_option("--out", o->out, "Where results go")->capture_default_str();
  sub->add_option("--data", o->data, "Data set for the runs (default: $DDPLAB_DATA, else <kit>/data/ctr-small)");
  sub->add_option("--kit", o->kit, "The kit's source tree (default: the one this ddplab was built from)");
  sub->add_option("--build", o->build, "The kit's build folder (default: the one this ddplab belongs to)");
  sub->add_option("--calibration", o->calibration, "Calibration file (default: <build>/grader/calibration.json)");
  sub->add_option("--check", o->checks, "Grade only the checks whose name contains this (repeatable)");
  sub->add_option("--run-timeout", o->run_timeout, "Override the specs' run timeout (seconds)");
  sub->add_option("--test-timeout", o->test_timeout, "Override the specs' unit-test timeout (seconds)");
  sub->add_flag("--calibrate", o->calibrate, "Measure the reference solutions on this machine and store their figures");
  sub->add_flag("--no-build", o->no_build, "Grade the binaries as they are");
  sub->add_flag("--no-color", o->no_color, "No ANSI colours");
  sub->add_flag("--quiet", o->quiet, "No progress lines");
  sub->callback([o] { exit_status() = run_grade(*o); });
}

}  // namespace ddplab::tools

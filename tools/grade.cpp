// `ddplab grade`: the grader's command line. Grades the working tree (a student's own check), a
// submission folder or zip (an instructor, Gradescope), or a folder of submissions into a
// gradebook; calibrates the reference figures of this machine. Options -> one grader call; the
// grading itself is in grader/. Guide: docs/instructor-guide.md.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "ddplab/config.h"
#include "ddplab/cxx_runtime.h"
#include "ddplab/error.h"
#include "ddplab/grader/batch.h"
#include "ddplab/grader/grade.h"

namespace fs = std::filesystem;

namespace ddplab::tools {
namespace {

struct GradeCli {
  std::vector<std::string> labs;
  bool all = false;
  std::string submission, batch, tree, out = "grade-results", data, kit, build, calibration, sandbox = "auto", backend;
  std::vector<std::string> checks, overlays;
  double run_timeout = 0, test_timeout = 0, quiet_wait = 120;
  int leaderboard = 0;
  bool no_build = false, sanitize = false, calibrate = false, check_calibration = false, no_color = false,
       quiet = false;
};

void print(const std::string& s) { fmt::print("{}", s); }

int run_grade(const GradeCli& o) {
  sys::require_std_filesystem_from_runtime();  // the grader removes run folders: fail here, not in a crash
  grader::GradeOptions go;
  go.source_dir = o.kit.empty() ? DDPLAB_SOURCE_DIR : o.kit;
  go.build_dir = o.build.empty() ? grader::this_build_dir() : o.build;
  go.tree = o.tree.empty() ? DDPLAB_LAB_TREE : o.tree;
  go.data_dir = grader::resolve_data_dir(o.data, go.source_dir);
  go.out_dir = fs::absolute(o.out).string();
  go.build = !o.no_build;
  go.sanitize = o.sanitize;
  go.only_checks = o.checks;
  go.run_timeout_s = o.run_timeout;
  go.test_timeout_s = o.test_timeout;
  go.quiet_wait_s = o.quiet_wait;
  go.leaderboard_repeats = o.leaderboard;
  go.color = !o.no_color && ::isatty(STDOUT_FILENO);
  go.quiet = o.quiet;
  go.sandbox = o.sandbox;
  go.backend = o.backend;
  go.calibration = o.calibration.empty() ? grader::default_calibration_path(go.build_dir) : o.calibration;
  if (o.calibration.empty() && !o.calibrate && !fs::exists(go.calibration)) {
    // A student's build/labs holds none: `./kit main` measured this machine into build/solutions,
    // and grading against it is what makes the student's grade the instructor's.
    const fs::path kit_main = fs::path(go.source_dir) / "build" / "solutions" / "grader" / "calibration.json";
    if (fs::exists(kit_main)) go.calibration = kit_main.string();
  }
  if (!o.submission.empty() && !o.batch.empty()) throw ConfigError("--submission and --batch: give one of them");
  if (go.tree != "labs" && go.tree != "solutions") {
    throw ConfigError(fmt::format("--tree {}: expected labs or solutions", go.tree));
  }
  if (!o.all && o.labs.empty()) throw ConfigError("name a lab (ddplab grade lab02) or use --all");
  std::vector<grader::LabSpec> specs;
  if (o.all) {
    specs = grader::load_all_specs(go.source_dir);
  } else {
    for (const auto& l : o.labs) specs.push_back(grader::find_spec(go.source_dir, l));
  }
  // Overlays (the instructor's private checks): each joins the spec of the lab it names.
  std::map<std::string, std::vector<std::string>> overlays;
  for (const auto& f : o.overlays) {
    overlays[grader::overlay_lab(f)].push_back(fs::absolute(f).string());
    go.private_paths.push_back(fs::absolute(f).string());  // a submission's build must not read them
  }
  if (!o.batch.empty()) go.private_paths.push_back(fs::absolute(o.batch).string());  // the other submissions
  for (auto& s : specs) {
    const auto it = overlays.find(s.id);
    if (it == overlays.end()) continue;
    s = grader::load_spec(s.path, it->second);
    overlays.erase(it);
  }
  if (!overlays.empty()) {
    throw ConfigError(fmt::format("--overlay {}: it is for lab '{}', which is not being graded",
                                  overlays.begin()->second.front(), overlays.begin()->first));
  }

  if (o.calibrate) {
    grader::calibrate(specs, go, go.calibration, print);
    return 0;
  }
  if (o.check_calibration) {
    const auto gaps = grader::calibration_gaps(specs, go.calibration, grader::calibration_key(go.data_dir, go.backend));
    for (const auto& g : gaps) fmt::print("calibration stale: {}\n", g);
    if (gaps.empty()) fmt::print("calibration current: {} (this machine and data set)\n", go.calibration);
    return gaps.empty() ? 0 : 1;
  }
  if (!o.batch.empty()) {
    grader::grade_batch(specs, go, o.batch, print);
    return 0;
  }
  if (!o.submission.empty()) {
    go.tree = "submission";
    go.submission = fs::absolute(o.submission).string();
  }
  const auto results = grader::grade_labs(specs, go);
  grader::write_outputs(results, go.out_dir);
  fmt::print("{}", grader::terminal_summary(results, go.color));
  fmt::print("results.json, junit.xml and report.html in {}\n", go.out_dir);
  bool full = !results.empty();
  for (const auto& r : results) full = full && r.score >= r.max_score;
  return full ? 0 : 1;
}

}  // namespace

void setup_grade(CLI::App& app) {
  auto o = std::make_shared<GradeCli>();
  auto* sub = app.add_subcommand("grade", "Grade labs: correctness, utilization, scaling (results.json, JUnit, HTML)");
  sub->add_option("labs", o->labs, "Labs to grade: lab03_sampler, lab03, 3, or a grade.toml file");
  sub->add_flag("--all", o->all, "Grade every lab");
  sub->add_option("--submission", o->submission, "A submission folder or .zip (only its manifest files are used)");
  sub->add_option("--batch", o->batch,
                  "A folder of submissions (folders or .zip): gradebook.csv + one result set each");
  sub->add_option("--tree", o->tree, "Without --submission: grade this build's labs or solutions tree");
  sub->add_option("--out", o->out, "Where results go")->capture_default_str();
  sub->add_option("--data", o->data, "Data set for the runs (default: $DDPLAB_DATA, else <kit>/data/ctr-small)");
  sub->add_option("--kit", o->kit, "The kit's source tree (default: the one this ddplab was built from)");
  sub->add_option("--build", o->build, "The kit's build folder (default: the one this ddplab belongs to)");
  sub->add_option("--calibration", o->calibration,
                  "Calibration file (default: <build>/grader/calibration.json, else the one ./kit main wrote in "
                  "<kit>/build/solutions)");
  sub->add_option("--overlay", o->overlays,
                  "Extra [[run]]/[[check]] tables for a lab, kept outside the students' clone (repeatable; "
                  "docs/instructor-guide.md, Private checks)")
      ->check(CLI::ExistingFile);
  sub->add_option("--check", o->checks, "Grade only the check with this id, or whose name contains this (repeatable)");
  sub->add_option("--run-timeout", o->run_timeout, "Override the specs' run timeout (seconds)");
  sub->add_option("--test-timeout", o->test_timeout, "Override the specs' unit-test timeout (seconds)");
  sub->add_option("--quiet-wait", o->quiet_wait,
                  "Before measuring a failed timing check again, wait for the machine to give the runs their cores, "
                  "up to this many seconds in all for one lab (0: measure again at once)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--leaderboard", o->leaderboard,
                  "Measure each [[leaderboard]] figure of the specs N times (its check's runs made again) and put "
                  "the median and the spread in results.json's leaderboard (0: none)")
      ->check(CLI::Range(0, 9))
      ->capture_default_str();
  sub->add_flag("--calibrate", o->calibrate, "Measure the reference solutions on this machine and store their figures");
  sub->add_flag("--check-calibration", o->check_calibration,
                "Exit 0 if the calibration holds this machine's and data set's figures for the labs named, else "
                "say what is missing and exit 1 (./kit main then calibrates)");
  sub->add_flag("--no-build", o->no_build,
                "Grade the binaries as they are (with --submission: those the build compiled from that folder, "
                "the planted bugs and the audit's variants)");
  sub->add_flag("--sanitize", o->sanitize,
                "Run the unit tests built under the lab's sanitizer (AddressSanitizer + UBSan; ThreadSanitizer for "
                "lab 08): a memory error or data race fails the check with the sanitizer's first frame");
  sub->add_option("--backend", o->backend,
                  "Who starts the multi-rank runs of labs whose spec leaves it to the grader ([lab] backend = "
                  "\"auto\"): auto (Open MPI's mpirun where the kit has it: shared memory between the ranks; else "
                  "the kit's launcher), c10d (the kit's launcher: Gloo on CPU), mpi. A lab or run that pins one "
                  "keeps it (docs/instructor-guide.md)")
      ->envname("DDPLAB_GRADE_BACKEND")
      ->check(CLI::IsMember({"auto", "c10d", "mpi"}));
  sub->add_option("--sandbox", o->sandbox,
                  "How student programs run: auto (bubblewrap if it works here, else an unprivileged user if the "
                  "grader is root and the secrets are unreadable to it, else unconfined with a warning), required "
                  "(one of the two, or refuse to grade), bwrap, user, none")
      ->check(CLI::IsMember({"auto", "required", "bwrap", "user", "none"}))
      ->capture_default_str();
  sub->add_flag("--no-color", o->no_color, "No ANSI colours");
  sub->add_flag("--quiet", o->quiet, "No progress lines");
  sub->callback([o] { exit_status() = run_grade(*o); });
}

}  // namespace ddplab::tools

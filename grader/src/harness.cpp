// The grading harness: grade_lab drives one lab's grading through its parts (harness_parts.h):
// intake, the sandbox, the runs, the checks measured, and what each says of its exercise.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/error.h"
#include "ddplab/grader/checks.h"
#include "ddplab/timer.h"
#include "harness_parts.h"

namespace fs = std::filesystem;

namespace ddplab::grader {

const char* status_name(Status s) {
  switch (s) {
    case Status::kPassed: return "passed";
    case Status::kFailed: return "failed";
    case Status::kNotAttempted: return "not attempted";
    case Status::kError: return "grader error";
  }
  return "failed";
}

namespace {

/// Sets the process's umask for its lifetime.
class UmaskGuard {
 public:
  explicit UmaskGuard(mode_t mask) : old_(::umask(mask)) {}
  ~UmaskGuard() { ::umask(old_); }
  UmaskGuard(const UmaskGuard&) = delete;
  UmaskGuard& operator=(const UmaskGuard&) = delete;

 private:
  mode_t old_;
};

}  // namespace

std::string resolve_data_dir(const std::string& given, const std::string& source_dir) {
  std::string dir = given;
  if (dir.empty()) {
    const char* env = std::getenv("DDPLAB_DATA");
    dir = env ? env : (fs::path(source_dir) / "data" / "ctr-small").string();
  }
  if (!fs::exists(fs::path(dir) / "meta.json")) {
    throw ConfigError(fmt::format("--data {}: no data set there (generate one: ddplab data gen --out {})", dir, dir));
  }
  return fs::canonical(dir).string();
}

std::string this_build_dir() { return fs::canonical("/proc/self/exe").parent_path().parent_path().string(); }

LabSpec effective_spec(const LabSpec& full, const GradeOptions& o) {
  LabSpec spec = full;
  if (o.run_timeout_s > 0) spec.run_timeout_s = o.run_timeout_s;
  if (o.test_timeout_s > 0) spec.test_timeout_s = o.test_timeout_s;
  if (o.only_checks.empty()) return spec;
  spec.checks.clear();
  for (const auto& c : full.checks) {
    for (const auto& want : o.only_checks) {
      if (c.id == want || c.name.find(want) != std::string::npos) {
        spec.checks.push_back(c);
        break;
      }
    }
  }
  if (spec.checks.empty()) throw ConfigError(fmt::format("--check: no check of {} matches", full.id));
  spec.runs = parts::runs_used_by(full.runs, spec.checks);
  // A leaderboard entry stays only with its check and the checks it requires.
  std::vector<LeaderboardSpec> board;
  for (const auto& l : full.leaderboard) {
    auto selected = [&](const std::string& id) {
      return std::any_of(spec.checks.begin(), spec.checks.end(), [&](const CheckSpec& c) { return c.id == id; });
    };
    if (selected(l.check) && std::all_of(l.gates.begin(), l.gates.end(), selected)) board.push_back(l);
  }
  spec.leaderboard = std::move(board);
  return spec;
}

LabResult grade_lab(const LabSpec& full_spec, const GradeOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const LabSpec spec = effective_spec(full_spec, o);  // its checks were validated by load_spec
  LabResult result;
  result.lab = spec.id;
  result.title = spec.title;
  result.max_score = spec.max_score();
  const fs::path out = fs::absolute(fs::path(o.out_dir) / spec.id);
  fs::create_directories(out);
  result.out_dir = out.string();
  const parts::Say say = [&](const std::string& m) {
    if (!o.quiet) fmt::print(stderr, "grade {}: {}\n", spec.id, m);
  };
  // Every check fails for one reason found before anything runs (no build, a broken rule).
  auto fail_all = [&](const std::string& observed, const std::string& diagnosis, const std::string& details) {
    for (const auto& c : spec.checks) {
      CheckResult r = result_of(c);
      r.status = Status::kFailed;
      r.observed = observed;
      r.diagnosis = diagnosis;
      r.details = details;
      result.checks.push_back(r);
    }
    result.seconds = seconds_since(start);
    return result;
  };

  // The sandbox is decided first, so that --sandbox bwrap on a machine without it stops before any build.
  const std::string calibration_path = o.calibration.empty() ? default_calibration_path(o.build_dir) : o.calibration;
  const auto targets = parts::load_targets(o.build_dir);
  const Sandbox sandbox = parts::lab_sandbox(spec, o, targets, calibration_path);
  if (sandbox.enabled) {
    say(sandbox.note);
  } else if (o.sandbox != "none") {
    fmt::print(stderr, "grade {}: {}\n", spec.id, sandbox.note);  // a warning, --quiet or not
  }

  const parts::Intake in = parts::take_in(spec, o, targets, sandbox, out, result, say);
  if (!result.rule_errors.empty()) {
    // Every check fails with the first edit outside the regions, before a build.
    for (const auto& e : result.rule_errors) say(e);
    return fail_all(result.rule_errors.front(),
                    fmt::format("only the code between `// BEGIN STUDENT CODE` and `// END STUDENT CODE` may "
                                "change{} text outside the regions (git diff labs/ shows your edits); nothing was "
                                "built or run",
                                in.restore),
                    fmt::format("{}", fmt::join(result.rule_errors, "\n")));
  }
  if (!result.build_error.empty()) {
    return fail_all("the submission does not compile",
                    "fix the compiler errors below (build your tree with ./kit build labs)", result.build_error);
  }
  for (const auto& f : in.forbidden) {
    say(fmt::format("{}: exercise {} calls {} ({})", f.file, f.exercise, f.function, f.symbol));
  }
  const parts::Progress progress = exercise_progress(in.graded_files);

  const Calibration calibration = load_calibration(calibration_path, calibration_key(o.data_dir, o.backend));
  // As another uid, the programs would read whatever the grader writes from here on with a
  // permissive umask (logs, earlier results): the built binaries are in place, so from now on
  // what it writes is its own; each run folder is handed over (confine).
  std::optional<UmaskGuard> private_files;
  if (sandbox.as_user) {
    ::chmod(out.c_str(), 0711);
    private_files.emplace(077);
  }
  GradeContext ctx{spec, o, in.bin, calibration, {}, (out / "work").string(), &sandbox};
  fs::remove_all(ctx.work_dir);
  fs::create_directories(ctx.work_dir);
  // A check of an exercise none of whose regions was edited is "not attempted" as it stands: its
  // code is the skeleton's stubs, which throw NotImplemented (so is a check of no exercise while no
  // exercise is begun). Nothing is run for it, so a lab begun (or a skeleton) is graded in the
  // time of what was written.
  std::vector<CheckSpec> measured;
  for (const auto& c : spec.checks) {
    if (!parts::not_begun_check(progress, c)) measured.push_back(c);
  }
  const std::vector<RunSpec> runs = parts::runs_used_by(spec.runs, measured);
  if (runs.size() < spec.runs.size()) {
    say(fmt::format("{} of {} run(s) not made: only checks of exercises not begun use them",
                    spec.runs.size() - runs.size(), spec.runs.size()));
  }
  for (const auto& run : runs) {
    say(fmt::format("run '{}' on {} rank(s)", run.name, run.ranks));
    auto r = parts::make_run(run, ctx, out / "runs" / run.name);
    say(fmt::format("run '{}': {} in {:.1f} s{}", run.name, r.ok() ? "ok" : r.summary, r.seconds,
                    run.ranks > 1 && !r.backend.empty() ? fmt::format(" ({})", r.backend) : std::string()));
    if (run.ranks > 1 && !r.backend.empty()) result.run_backends[run.name] = r.backend;
    for (const auto& id : r.not_attempted) {  // one begun is not: its checks say what is missing
      if (parts::edited(progress, id) == nullptr) parts::add_once(result.not_attempted, id);
    }
    ctx.runs.emplace(run.name, std::move(r));
  }
  double quiet_wait_left = o.quiet_wait_s;  // for the whole lab: a grading's time stays bounded
  for (const auto& c : spec.checks) {
    if (parts::not_begun_check(progress, c)) {
      result.checks.push_back(parts::not_begun(c));
      if (!c.exercise.empty()) parts::add_once(result.not_attempted, c.exercise);
      continue;
    }
    const auto t = std::chrono::steady_clock::now();
    CheckResult r = parts::measure_check(c, ctx, out / "runs", quiet_wait_left, say);
    r.seconds = seconds_since(t);
    parts::name_sandbox_cause(sandbox, o, in.bin, r);
    parts::apply_forbidden(in.forbidden, r);
    parts::settle_attempt(c, progress, r);
    if (r.status == Status::kNotAttempted && !r.exercise.empty()) parts::add_once(result.not_attempted, r.exercise);
    result.score += r.score;
    result.checks.push_back(std::move(r));
  }
  blame_earlier_exercises(spec, result.checks);
  if (o.leaderboard_repeats > 0 && !spec.leaderboard.empty()) {
    result.leaderboard = parts::measure_leaderboard(spec.leaderboard, result.checks, ctx, out / "runs", say);
  }
  std::sort(result.not_attempted.begin(), result.not_attempted.end());
  fs::remove_all(ctx.work_dir);
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace ddplab::grader

// The grading harness: submission intake, building, runs under the launcher, scoring.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "ddplab/data/shard.h"
#include "ddplab/error.h"
#include "ddplab/grader/checks.h"
#include "ddplab/grader/grade.h"
#include "ddplab/launch.h"
#include "ddplab/report.h"
#include "ddplab/system.h"

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

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs a helper command (cmake, unzip) to completion, its output collected; returns exit code.
int run_command(const std::vector<std::string>& cmd, double timeout_s, std::string& output) {
  LaunchSpec spec;
  spec.nproc = 1;
  spec.command = cmd;
  spec.timeout_s = timeout_s;
  spec.prefix_output = false;
  spec.forward_signals = true;
  std::string out;
  spec.on_line = [&](int, bool, const std::string& line) { out += line + "\n"; };
  spec.on_message = [&](const std::string& m) { out += m + "\n"; };
  const auto r = launch(spec);
  output = std::move(out);
  return r.exit_code;
}

std::string tail_lines(const std::string& text, size_t n) {
  std::deque<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

/// An exclusive lock on a file, held for the object's lifetime (flock: released if we die).
class FileLock {
 public:
  explicit FileLock(const fs::path& p) {
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(fmt::format("grader: cannot open the lock file {}", p.string()));
    if (::flock(fd_, LOCK_EX) != 0) throw Error(fmt::format("grader: cannot lock {}", p.string()));
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

/// Reads <build>/grader/targets.json (written by CMake): the binaries of each lab per tree.
nlohmann::json load_targets(const std::string& build_dir) {
  const fs::path p = fs::path(build_dir) / "grader" / "targets.json";
  if (!fs::exists(p)) {
    throw Error(fmt::format("{} not found: '{}' is not a configured ddplab build (run ./kit build first)", p.string(),
                            build_dir));
  }
  try {
    return nlohmann::json::parse(read_text(p));
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {}", p.string(), e.what()));
  }
}

LabBinaries binaries_for(const nlohmann::json& targets, const LabSpec& spec, const std::string& tree) {
  const auto lab = targets.find(spec.program + "/" + tree);
  if (lab == targets.end()) {
    throw Error(
        fmt::format("the build has no '{}' binaries of {} (configure it with the {} tree, or "
                    "-DDDPLAB_BUILD_BOTH_TREES=ON)",
                    tree, spec.program, tree));
  }
  LabBinaries b;
  b.program = lab->at("program").get<std::string>();
  b.tests = lab->at("tests").get<std::string>();
  b.reference = targets.at("ddp_train").get<std::string>();
  b.ddplab = targets.at("ddplab").get<std::string>();
  return b;
}

std::string build_targets(const GradeOptions& o, const std::vector<std::string>& targets) {
  std::vector<std::string> cmd = {"cmake", "--build", o.build_dir, "--target"};
  cmd.insert(cmd.end(), targets.begin(), targets.end());
  std::string out;
  const int rc = run_command(cmd, 1800, out);
  if (rc != 0) {
    // Keep the compiler's first errors, which are the useful ones.
    std::string errors;
    std::istringstream in(out);
    std::string line;
    int kept = 0;
    while (std::getline(in, line) && kept < 60) {
      if (line.find("error") != std::string::npos || line.find("note:") != std::string::npos || kept > 0) {
        errors += line + "\n";
        ++kept;
      }
    }
    return errors.empty() ? tail_lines(out, 40) : errors;
  }
  return "";
}

}  // namespace

std::vector<std::string> effective_args(const RunSpec& run, const std::string& data_dir) {
  // A spec written for the full data set still runs on a smaller one (the CI's tiny set): sample
  // counts above the data set's are capped to it.
  std::vector<std::string> args = run.args;
  const auto meta = data::read_metadata(data_dir);
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    const uint64_t cap = args[i] == "--train-samples"  ? meta.train_count
                         : args[i] == "--eval-samples" ? meta.test_count
                                                       : 0;
    if (cap == 0) continue;
    try {
      if (std::stoull(args[i + 1]) > cap) args[i + 1] = std::to_string(cap);
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("run '{}': {} {} is not a number", run.name, args[i], args[i + 1]));
    }
  }
  return args;
}

namespace {

RunOutcome make_run(const RunSpec& run, GradeContext& ctx, const fs::path& dir) {
  RunOutcome r;
  r.name = run.name;
  r.ranks = run.ranks;
  r.expect_failure = run.expect_failure;
  r.dir = dir.string();
  r.args = effective_args(run, ctx.options.data_dir);
  fs::remove_all(dir);
  fs::create_directories(dir / "logs");
  LaunchSpec spec;
  spec.nproc = run.ranks;
  spec.command = {run.program == "reference" ? ctx.bin.reference : ctx.bin.program};
  spec.command.insert(spec.command.end(), r.args.begin(), r.args.end());
  spec.command.insert(spec.command.end(),
                      {"--data", ctx.options.data_dir, "--report", (dir / "rank{rank}.json").string()});
  if (run.save_model) {
    r.model = (dir / "model.pt").string();
    spec.command.insert(spec.command.end(), {"--save-model", r.model});
  }
  const double timeout = run.timeout_s > 0 ? run.timeout_s : ctx.spec.run_timeout_s;
  spec.timeout_s = timeout;
  spec.grace_s = 3;
  spec.log_dir = (dir / "logs").string();
  spec.memory_limit_bytes = static_cast<uint64_t>(ctx.spec.memory_limit_mb * 1024 * 1024);
  spec.file_size_limit_bytes = uint64_t{1} << 30;
  // A collective that waits longer than this fails with the stall diagnosis instead of running
  // into the run's wall-clock timeout silently.
  spec.extra_env["DDPLAB_COMM_TIMEOUT"] = fmt::format("{}", std::max(5.0, std::min(60.0, timeout / 3)));
  spec.extra_env["DDPLAB_LOG_LEVEL"] = "info";
  std::string output;
  spec.on_line = [&](int rank, bool, const std::string& line) {
    if (output.size() < (4u << 20)) output += fmt::format("[rank {}] {}\n", rank, line);
  };
  spec.on_message = [&](const std::string& m) { output += "[launcher] " + m + "\n"; };
  const auto start = std::chrono::steady_clock::now();
  LaunchResult lr;
  try {
    lr = launch(spec);
  } catch (const Error& e) {
    r.exit_code = 127;
    r.summary = e.what();
    r.log_tail = e.what();
    return r;
  }
  r.seconds = seconds_since(start);
  r.exit_code = lr.exit_code;
  r.timed_out = lr.timed_out;
  r.first_failed_rank = lr.first_failed_rank;
  r.summary = lr.summary;
  r.log_tail = tail_lines(output, 40);
  write_file_atomic((dir / "output.txt").string(), output);
  for (int k = 0; k < run.ranks; ++k) {
    RankOutcome ro;
    if (static_cast<size_t>(k) < lr.ranks.size()) {
      ro.exit_code = lr.ranks[static_cast<size_t>(k)].exit_code;
      ro.signal = lr.ranks[static_cast<size_t>(k)].signal;
      ro.timed_out = lr.ranks[static_cast<size_t>(k)].timed_out;
    }
    const fs::path report = dir / fmt::format("rank{}.json", k);
    if (!fs::exists(report)) {
      ro.report_error = fmt::format("rank {} wrote no report", k);
    } else {
      try {
        ro.report = RunReport::load(report.string());
      } catch (const std::exception& e) {
        ro.report_error = fmt::format("rank {}'s report is unusable: {}", k, e.what());
      }
    }
    if (ro.report) {
      for (const auto& id : ro.report->value("not_attempted", nlohmann::json::array())) {
        const auto s = id.get<std::string>();
        if (std::find(r.not_attempted.begin(), r.not_attempted.end(), s) == r.not_attempted.end()) {
          r.not_attempted.push_back(s);
        }
      }
    }
    r.rank.push_back(std::move(ro));
  }
  if (r.ok()) fs::remove_all(dir / "logs");  // per-rank logs are kept for failed runs only
  return r;
}

std::string now_text() {
  const auto t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

}  // namespace

// ---- calibration ----

std::optional<double> Calibration::get(const std::string& lab, const std::string& check_id) const {
  const auto it = values.find(lab + "/" + check_id);
  if (it == values.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string machine_id() {
  std::string model = "unknown-cpu";
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{} | {} | {} cores", host, model, sys::usable_cores());
}

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

std::string default_calibration_path(const std::string& build_dir) {
  return (fs::path(build_dir) / "grader" / "calibration.json").string();
}

std::string calibration_key(const std::string& data_dir) {
  const auto meta = data::read_metadata(data_dir);
  return fmt::format("{} | data {} ({} train, {} test, seed {})", machine_id(), data_dir, meta.train_count,
                     meta.test_count, meta.seed);
}

Calibration load_calibration(const std::string& path, const std::string& key) {
  Calibration c;
  c.machine = key;
  if (!fs::exists(path)) return c;
  try {
    const auto j = nlohmann::json::parse(read_text(path));
    if (j.value("machine", "") == c.machine) c.values = j.value("values", nlohmann::json::object());
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not a calibration file: {}", path, e.what()));
  }
  return c;
}

void save_calibration(const std::string& path, const Calibration& c) {
  const nlohmann::json j = {{"machine", c.machine}, {"written", now_text()}, {"values", c.values}};
  write_file_atomic(path, j.dump(2) + "\n");
}

// ---- submissions ----

std::vector<std::string> collect_submission(const LabSpec& spec, const std::string& source_dir,
                                            const std::string& submission, const std::string& dest) {
  fs::path root = submission;
  fs::path unpacked;
  std::vector<std::string> notes;
  if (!fs::exists(root)) throw ConfigError(fmt::format("--submission {}: no such file or folder", submission));
  if (fs::is_regular_file(root)) {
    if (root.extension() != ".zip") {
      throw ConfigError(fmt::format("--submission {}: expected a folder or a .zip", submission));
    }
    unpacked = fs::path(dest).parent_path() / "unzipped";
    fs::remove_all(unpacked);
    fs::create_directories(unpacked);
    std::string out;
    // unzip refuses entries with "../" or absolute paths (it strips them), so nothing lands
    // outside the scratch folder.
    const int rc = run_command({"unzip", "-qq", "-o", root.string(), "-d", unpacked.string()}, 120, out);
    if (rc != 0 && rc != 1) {
      throw Error(fmt::format("--submission {}: unzip failed (status {}): {}", submission, rc, out));
    }
    root = unpacked;
  }
  fs::create_directories(dest);
  for (const auto& f : spec.manifest) {
    const fs::path target = fs::path(dest) / f;
    fs::create_directories(target.parent_path());
    fs::path found;
    for (const fs::path& cand : {root / f, root / spec.folder / f, root / "labs" / spec.folder / f}) {
      if (fs::is_regular_file(cand)) {
        found = cand;
        break;
      }
    }
    if (found.empty()) {
      // Anywhere in the submission by file name (Gradescope keeps the student's folders).
      for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        if (it->is_regular_file() && it->path().filename() == fs::path(f).filename()) {
          found = it->path();
          break;
        }
      }
    }
    if (found.empty()) {
      found = fs::path(source_dir) / "labs" / spec.folder / f;
      notes.push_back(fmt::format("{}: not in the submission, the skeleton's is used", f));
    } else {
      notes.push_back(fmt::format("{}: from {}", f, fs::relative(found, root).string()));
    }
    if (fs::file_size(found) > (4u << 20)) throw ConfigError(fmt::format("{}: larger than 4 MiB", found.string()));
    // A fresh copy (new mtime) so the build always sees the file as changed.
    const fs::path tmp = target.string() + ".tmp";
    fs::copy_file(found, tmp, fs::copy_options::overwrite_existing);
    fs::rename(tmp, target);
  }
  if (!unpacked.empty()) fs::remove_all(unpacked);
  return notes;
}

// ---- grading ----

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
  std::vector<RunSpec> runs;
  for (const auto& r : full.runs) {
    bool used = false;
    for (const auto& c : spec.checks) used = used || std::find(c.runs.begin(), c.runs.end(), r.name) != c.runs.end();
    if (used) runs.push_back(r);
  }
  spec.runs = std::move(runs);
  return spec;
}

LabResult grade_lab(const LabSpec& full_spec, const GradeOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const LabSpec spec = effective_spec(full_spec, o);  // its checks were validated by load_spec
  bool need_tests = false;
  for (const auto& c : spec.checks) need_tests = need_tests || c.kind == "unit_tests";
  LabResult result;
  result.lab = spec.id;
  result.title = spec.title;
  result.max_score = spec.max_score();
  const fs::path out = fs::path(o.out_dir) / spec.id;
  fs::create_directories(out);
  result.out_dir = out.string();
  auto say = [&](const std::string& m) {
    if (!o.quiet) fmt::print(stderr, "grade {}: {}\n", spec.id, m);
  };

  const auto targets = load_targets(o.build_dir);
  LabBinaries bin;
  if (o.tree == "submission") {
    // One submission slot per build folder: lay the files over it, build, copy the binaries out.
    const fs::path slot = fs::path(o.build_dir) / "submission";
    fs::create_directories(slot);
    FileLock lock(slot / ".lock");
    const auto notes = collect_submission(spec, o.source_dir, o.submission, (slot / spec.folder).string());
    for (const auto& n : notes) say(n);
    bin = binaries_for(targets, spec, "submission");
    say("building the submission");
    std::vector<std::string> wanted = {spec.program + "_submission"};
    if (need_tests) wanted.push_back(spec.program + "_tests_submission");
    const std::string err = build_targets(o, wanted);
    if (!err.empty()) {
      result.build_error = err;
    } else {
      fs::create_directories(out / "bin");
      for (std::string* b : {&bin.program, &bin.tests}) {
        if (b == &bin.tests && !need_tests) continue;
        const fs::path copy = out / "bin" / fs::path(*b).filename();
        fs::copy_file(*b, copy, fs::copy_options::overwrite_existing);
        *b = copy.string();
      }
    }
  } else {
    bin = binaries_for(targets, spec, o.tree);
    if (o.build) {
      const std::string suffix = targets.value("tree", "solutions") == o.tree ? "" : "_" + o.tree;
      say("building " + o.tree);
      const std::string err = build_targets(o, {spec.program + suffix, spec.program + "_tests" + suffix, "ddp_train"});
      if (!err.empty()) result.build_error = err;
    }
  }

  if (!result.build_error.empty()) {
    for (const auto& c : spec.checks) {
      CheckResult r = result_of(c);
      r.status = Status::kFailed;
      r.observed = "the submission does not compile";
      r.diagnosis = "fix the compiler errors below (build your tree with ./kit build labs)";
      r.details = result.build_error;
      result.checks.push_back(r);
    }
    result.seconds = seconds_since(start);
    return result;
  }

  const Calibration calibration =
      load_calibration(o.calibration.empty() ? default_calibration_path(o.build_dir) : o.calibration,
                       calibration_key(o.data_dir));
  GradeContext ctx{spec, o, bin, calibration, {}, (out / "work").string()};
  fs::remove_all(ctx.work_dir);
  fs::create_directories(ctx.work_dir);
  for (const auto& run : spec.runs) {
    say(fmt::format("run '{}' on {} rank(s)", run.name, run.ranks));
    auto r = make_run(run, ctx, out / "runs" / run.name);
    say(fmt::format("run '{}': {} in {:.1f} s", run.name, r.ok() ? "ok" : r.summary, r.seconds));
    for (const auto& id : r.not_attempted) {
      if (std::find(result.not_attempted.begin(), result.not_attempted.end(), id) == result.not_attempted.end()) {
        result.not_attempted.push_back(id);
      }
    }
    ctx.runs.emplace(run.name, std::move(r));
  }
  for (const auto& c : spec.checks) {
    const auto t = std::chrono::steady_clock::now();
    CheckResult r = run_check(c, ctx);
    r.seconds = seconds_since(t);
    if (r.status == Status::kNotAttempted && !r.exercise.empty() &&
        std::find(result.not_attempted.begin(), result.not_attempted.end(), r.exercise) == result.not_attempted.end()) {
      result.not_attempted.push_back(r.exercise);
    }
    result.score += r.score;
    result.checks.push_back(std::move(r));
  }
  std::sort(result.not_attempted.begin(), result.not_attempted.end());
  fs::remove_all(ctx.work_dir);
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace ddplab::grader

// The grading harness: submission intake, building, runs under the launcher, scoring.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/data/shard.h"
#include "ddplab/error.h"
#include "ddplab/grader/checks.h"
#include "ddplab/grader/contention.h"
#include "ddplab/grader/grade.h"
#include "ddplab/grader/regions.h"
#include "ddplab/grader/rules.h"
#include "ddplab/grader/sandbox.h"
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
  b.student = lab->value("student", "");
  return b;
}

/// Builds `targets` in the kit's build folder; "" or the compiler's first errors. With `sandbox`
/// enabled (a submission's build) the compiler runs confined: it cannot read the kit's solutions/
/// or the calibration (bwrap_build_command).
std::string build_targets(const GradeOptions& o, const std::vector<std::string>& targets,
                          const Sandbox* sandbox = nullptr) {
  std::vector<std::string> cmd = {"cmake", "--build", o.build_dir, "--target"};
  cmd.insert(cmd.end(), targets.begin(), targets.end());
  if (sandbox != nullptr && sandbox->enabled && sandbox->as_user) {
    // Ninja runs as root; the submission's compiler, through the slot's launcher
    // (grader/compile-as-student, labs/CMakeLists.txt), as kCompileUid.
    cmd.insert(cmd.begin(), {"env", fmt::format("DDPLAB_SANDBOX_COMPILE_UID={}", kCompileUid),
                             "DDPLAB_SANDBOX_RUN_AS=" + sandbox->run_as});
  } else if (sandbox != nullptr && sandbox->enabled) {
    // CMake's own regeneration (new files in the slot re-run its globs) reads the kit, solutions/
    // included, and runs no student code: done first, unconfined; then only compiling is left.
    if (fs::exists(fs::path(o.build_dir) / "build.ninja")) {
      std::string regen;
      if (run_command({"cmake", "--build", o.build_dir, "--target", "build.ninja"}, 600, regen) != 0) {
        return tail_lines(regen, 40);
      }
    }
    std::vector<std::string> hidden = {(fs::path(o.source_dir) / "solutions").string(), o.calibration};
    hidden.insert(hidden.end(), o.private_paths.begin(), o.private_paths.end());
    cmd = bwrap_build_command(sandbox->bwrap, cmd, o.build_dir, hidden);
  }
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

/// The share of the runs' cores the machine must give before a failed timing check is measured
/// again (1.6 of 2: a core held elsewhere measures ~1.0).
constexpr double kQuietShare = 0.8;

RunOutcome make_run(const RunSpec& run, GradeContext& ctx, const fs::path& dir) {
  RunOutcome r;
  r.name = run.name;
  r.ranks = run.ranks;
  r.expect_failure = run.expect_failure;
  r.dir = dir.string();
  r.data_dir = run.data.empty() ? ctx.options.data_dir : run.data;
  r.args = effective_args(run, r.data_dir);
  // "{run:NAME}" in an argument is the folder of the earlier run NAME (lab 09 resumes from the
  // checkpoints a killed run left there); the sandbox lets the program read it.
  std::vector<std::string> earlier_runs;
  for (auto& a : r.args) {
    for (size_t at = a.find("{run:"); at != std::string::npos; at = a.find("{run:", at)) {
      const size_t end = a.find('}', at);
      if (end == std::string::npos) break;
      const fs::path other = dir.parent_path() / a.substr(at + 5, end - at - 5);
      earlier_runs.push_back(other.string());
      a.replace(at, end - at + 1, other.string());
    }
  }
  fs::remove_all(dir);
  fs::create_directories(dir / "logs");
  LaunchSpec spec;
  spec.nproc = run.ranks;
  spec.command = {ctx.bin.program};
  spec.command.insert(spec.command.end(), r.args.begin(), r.args.end());
  spec.command.insert(spec.command.end(), {"--data", r.data_dir, "--report", (dir / "rank{rank}.json").string()});
  if (run.save_model) {
    r.model = (dir / "model.pt").string();
    spec.command.insert(spec.command.end(), {"--save-model", r.model});
  }
  const double timeout = run.timeout_s > 0 ? run.timeout_s : ctx.spec.run_timeout_s;
  spec.timeout_s = timeout;
  spec.grace_s = 3;
  spec.log_dir = (dir / "logs").string();
  apply_memory_limit(spec, ctx.spec.memory_limit_mb);
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
  // The run folder is the only place the program may write (and, sandboxed, the only one it sees
  // besides the system, its program and the data set).
  if (ctx.sandbox) confine(*ctx.sandbox, spec, dir.string(), earlier_runs);
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
  if (ctx.sandbox) restore_signals(*ctx.sandbox, lr);
  fs::remove_all(dir / "tmp");
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

/// Fails a check of an exercise that calls a function the spec forbids it, whatever it measured.
void apply_forbidden(const std::vector<ForbiddenCall>& forbidden, CheckResult& r) {
  std::vector<std::string> calls, symbols;
  for (const auto& f : forbidden) {
    if (f.exercise != r.exercise || r.exercise.empty()) continue;
    if (std::find(calls.begin(), calls.end(), f.function) == calls.end()) calls.push_back(f.function);
    symbols.push_back(fmt::format("{}: undefined symbol `{}`", f.file, f.symbol));
  }
  if (calls.empty()) return;
  const std::string before =
      fmt::format("Without this rule the check would be: [{}] {}", status_name(r.status), r.observed);
  r.status = Status::kFailed;
  r.score = 0;
  r.observed =
      fmt::format("exercise {} calls {}, which the lab does not allow it to call", r.exercise, fmt::join(calls, ", "));
  r.diagnosis = fmt::format(
      "exercise {} asks you to write what {} does: implement it with what the contract in the lab's header allows",
      r.exercise, fmt::join(calls, ", "));
  r.details = fmt::format("{}\n{}", fmt::join(symbols, "\n"), before);
}

/// The first path in `text` that names what a sandboxed program reached for and cannot see: in
/// the kit's solutions/ or its build folder, or the calibration file — but not in the results
/// (run folders), the data set or the submission slot (whose paths the program's own messages
/// carry). "" if none.
std::string hidden_path_in(const std::string& text, const GradeOptions& o, const LabBinaries& bin, bool as_user) {
  const auto dir = [](const std::string& d) { return fs::absolute(d).lexically_normal().string() + "/"; };
  std::vector<std::string> hidden = {dir(o.source_dir) + "solutions/"};
  if (!as_user) hidden.push_back(dir(o.build_dir));  // as another uid, the build folder stays readable
  if (!o.calibration.empty()) hidden.push_back(fs::absolute(o.calibration).lexically_normal().string());
  std::vector<std::string> visible = {dir(o.out_dir), dir(o.data_dir), dir(o.build_dir) + "submission/"};
  for (const auto& b : {bin.program, bin.tests}) {
    if (!b.empty()) visible.push_back(fs::absolute(b).lexically_normal().string());  // bound read-only
  }
  for (const auto& h : hidden) {
    for (size_t at = text.find(h); at != std::string::npos; at = text.find(h, at + 1)) {
      const size_t end = text.find_first_of(" \t\n\"'`),;", at);
      const std::string path = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
      if (std::none_of(visible.begin(), visible.end(), [&](const std::string& v) { return path.rfind(v, 0) == 0; })) {
        return path;
      }
    }
  }
  return "";
}

/// A failed check whose program reached for a file the sandbox hides says so first.
void name_sandbox_cause(const Sandbox& sandbox, const GradeOptions& o, const LabBinaries& bin, CheckResult& r) {
  if (!sandbox.enabled || r.status == Status::kPassed) return;
  const std::string path = hidden_path_in(r.observed + "\n" + r.details, o, bin, sandbox.as_user);
  if (path.empty()) return;
  if (sandbox.as_user) {
    r.diagnosis = fmt::format(
        "the program reached for {}, which the grader's sandbox hides (graded programs run as uid {}, which cannot "
        "read the kit's solutions or the calibration); {}",
        path, kRunUid, r.diagnosis);
    return;
  }
  r.diagnosis = fmt::format(
      "the program reached for {}, which the grader's sandbox hides (graded programs see only the system, the data "
      "set and their run folder: not the kit's source, solutions or build folder); {}",
      path, r.diagnosis);
}

}  // namespace

void blame_earlier_exercises(const LabSpec& spec, std::vector<CheckResult>& checks) {
  for (CheckResult& r : checks) {
    const auto c =
        std::find_if(spec.checks.begin(), spec.checks.end(), [&](const CheckSpec& x) { return x.id == r.id; });
    if (r.status != Status::kFailed || c == spec.checks.end()) continue;
    for (const auto& ex : c->builds_on) {
      if (r.diagnosis.find(fmt::format("finish {} first", ex)) != std::string::npos) break;  // said already
      const auto failed = std::find_if(checks.begin(), checks.end(), [&](const CheckResult& c) {
        return c.exercise == ex && (c.status == Status::kFailed || c.status == Status::kNotAttempted);
      });
      if (failed == checks.end()) continue;
      r.diagnosis = fmt::format(
          "this check also runs your {} code, and {}'s check '{}' fails too: fix exercise {} first, then this one; {}",
          ex, ex, failed->name, ex, r.diagnosis);
      break;
    }
  }
}

namespace {

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
  // Not the host name: a Gradescope container (or a rebuilt VM) gets a new one every time, and the
  // figures depend on the processor and the cores the runs may use, not on the name.
  return fmt::format("{} | {} cores", model, sys::usable_cores());
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
  // The data set by content, not by path: its meta.json (sizes, seed, the teacher's figures and the
  // click rates) is the same wherever the set lies, and differs for another set.
  const std::string text = read_text(fs::path(data_dir) / "meta.json");
  uint64_t digest = 0xcbf29ce484222325ULL;
  for (unsigned char ch : text) digest = (digest ^ ch) * 0x100000001b3ULL;
  return fmt::format("{} | data {} train, {} test, seed {}, meta.json {:016x}", machine_id(), meta.train_count,
                     meta.test_count, meta.seed, digest);
}

Calibration load_calibration(const std::string& path, const std::string& key) {
  Calibration c;
  c.machine = key;
  if (!fs::exists(path)) return c;
  try {
    const auto j = nlohmann::json::parse(read_text(path));
    c.file_machine = j.value("machine", "");
    if (c.file_machine == c.machine) {
      c.values = j.value("values", nlohmann::json::object());
      c.measurements = j.value("measurements", nlohmann::json::object());
    }
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not a calibration file: {}", path, e.what()));
  }
  return c;
}

void save_calibration(const std::string& path, const Calibration& c) {
  nlohmann::json j = {{"machine", c.machine}, {"written", now_text()}, {"values", c.values}};
  if (!c.measurements.empty()) j["measurements"] = c.measurements;
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
  std::set<std::string> used;
  for (const auto& c : spec.checks) used.insert(c.runs.begin(), c.runs.end());
  // A run kept needs the earlier runs its arguments name ({run:NAME}): latest first, so a chain is followed.
  for (auto r = full.runs.rbegin(); r != full.runs.rend(); ++r) {
    if (!used.count(r->name)) continue;
    for (const auto& other : full.runs) {
      for (const auto& a : r->args) {
        if (a.find("{run:" + other.name + "}") != std::string::npos) used.insert(other.name);
      }
    }
  }
  std::vector<RunSpec> runs;
  for (const auto& r : full.runs) {
    if (used.count(r.name)) runs.push_back(r);
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
  const fs::path out = fs::absolute(fs::path(o.out_dir) / spec.id);
  fs::create_directories(out);
  result.out_dir = out.string();
  auto say = [&](const std::string& m) {
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
  };

  // Every check fails with the first edit outside the regions (result.rule_errors), before a build;
  // `restore` says whose text to put back: the skeleton's (a submission) or the kit's (a student's
  // own tree, compared with the solution).
  auto reject_edits = [&](const std::string& restore) {
    for (const auto& e : result.rule_errors) say(e);
    fail_all(result.rule_errors.front(),
             fmt::format("only the code between `// BEGIN STUDENT CODE` and `// END STUDENT CODE` may change{} text "
                         "outside the regions (git diff labs/ shows your edits); nothing was built or run",
                         restore),
             fmt::format("{}", fmt::join(result.rule_errors, "\n")));
  };

  // Decided first, so that --sandbox bwrap on a machine without it stops before any build.
  std::vector<std::string> data_dirs = {o.data_dir};  // read-only in the sandbox, with any run's own
  for (const auto& run : spec.runs) {
    if (!run.data.empty()) data_dirs.push_back(run.data);
  }
  const std::string calibration_path = o.calibration.empty() ? default_calibration_path(o.build_dir) : o.calibration;
  UserSandboxPaths user_paths;  // for the unprivileged-user sandbox, where bubblewrap cannot run
  user_paths.secrets = {(fs::path(o.source_dir) / "solutions").string(), calibration_path};
  user_paths.secrets.insert(user_paths.secrets.end(), o.private_paths.begin(), o.private_paths.end());
  const auto targets = load_targets(o.build_dir);
  if (o.tree != "solutions" && targets.contains(spec.program + "/solutions")) {
    // The reference solution's own binaries: a program could run them in its place.
    const auto& ref = targets.at(spec.program + "/solutions");
    for (const char* k : {"program", "tests", "student"}) {
      if (ref.contains(k)) user_paths.secrets.push_back(ref.at(k).get<std::string>());
    }
  }
  std::vector<std::string> read_only = data_dirs;  // and the libraries the programs load (a pip torch)
  for (const auto& d : kit_library_dirs()) read_only.push_back(d);
  user_paths.readable = read_only;
  user_paths.readable.push_back(o.build_dir);  // the programs, and the headers a submission compiles with
  user_paths.readable.push_back((fs::path(o.source_dir) / "labs" / spec.folder).string());
  user_paths.out_dir = o.out_dir;
  const Sandbox sandbox = make_sandbox(parse_sandbox_mode(o.sandbox), read_only, user_paths);
  if (sandbox.enabled) {
    say(sandbox.note);
  } else if (o.sandbox != "none") {
    fmt::print(stderr, "grade {}: {}\n", spec.id, sandbox.note);  // a warning, --quiet or not
  }

  LabBinaries bin;
  // The graded files' regions, read where they are graded: how far each exercise got, so that
  // "not attempted" is said only of an exercise none of whose regions was edited (half an
  // exercise is attempted, and failing).
  std::vector<MarkedFile> graded_files;
  auto read_graded = [&](const fs::path& dir) {
    for (const auto& f : spec.manifest) {
      if (!fs::exists(dir / f)) continue;
      try {
        graded_files.push_back(parse_marked_file((dir / f).string()));
      } catch (const Error&) {
        // A broken marker is the region rule's to report; this file then tells nothing here.
      }
    }
  };
  std::vector<ForbiddenCall> forbidden;
  // The kit functions the spec forbids, among the compiled student library's undefined symbols.
  auto find_forbidden = [&]() {
    if (spec.forbidden.empty()) return;
    if (bin.student.empty()) {
      throw Error(
          fmt::format("{}: the build's grader/targets.json names no student library of {} (reconfigure the build)",
                      o.build_dir, spec.program));
    }
    forbidden = forbidden_calls(spec, undefined_symbols(bin.student));
  };
  if (o.tree == "submission") {
    // One submission slot per build folder: lay the files over it, build, copy the binaries out.
    const fs::path slot = fs::path(o.build_dir) / "submission";
    fs::create_directories(slot);
    FileLock lock(slot / ".lock");
    const auto notes = collect_submission(spec, o.source_dir, o.submission, (slot / spec.folder).string());
    for (const auto& n : notes) say(n);
    for (const auto& f : spec.manifest) {  // whatever mode they came with: the compiler may be another uid
      std::error_code ec;
      fs::permissions(slot / spec.folder / f,
                      fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read,
                      ec);
    }
    // Only the code inside the STUDENT CODE regions is the student's: checked before building.
    result.rule_errors = submission_region_edits(spec, (fs::path(o.source_dir) / "labs" / spec.folder).string(),
                                                 (slot / spec.folder).string());
    if (!result.rule_errors.empty()) {
      reject_edits(": restore the skeleton's");
      return result;
    }
    read_graded(slot / spec.folder);
    bin = binaries_for(targets, spec, "submission");
    say("building the submission");
    std::vector<std::string> wanted = {spec.program + "_submission"};
    if (need_tests) wanted.push_back(spec.program + "_tests_submission");
    const std::string err = build_targets(o, wanted, &sandbox);
    if (!err.empty()) {
      result.build_error = err;
    } else {
      find_forbidden();
      fs::create_directories(out / "bin");
      for (std::string* b : {&bin.program, &bin.tests}) {
        if (b == &bin.tests && !need_tests) continue;
        const fs::path copy = out / "bin" / fs::path(*b).filename();
        fs::copy_file(*b, copy, fs::copy_options::overwrite_existing);
        fs::permissions(copy, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);  // run as another uid
        *b = copy.string();
      }
    }
  } else {
    if (o.tree != "solutions") {
      // A student's own tree: the same rule as a submission's. Their labs/ file is the edited one,
      // so the reference is the solution, whose text outside the regions is the skeleton's.
      const fs::path reference = fs::path(o.source_dir) / "solutions" / spec.folder;
      if (fs::is_directory(reference)) {
        result.rule_errors = submission_region_edits(spec, reference.string(),
                                                     (fs::path(o.source_dir) / o.tree / spec.folder).string(), false);
      } else {
        say(
            fmt::format("no {} in this clone: edits outside the STUDENT CODE regions are not checked here (the "
                        "instructor's grader checks them)",
                        reference.string()));
      }
      if (!result.rule_errors.empty()) {
        reject_edits(", as in a submission: restore the kit's");
        return result;
      }
    }
    read_graded(fs::path(o.source_dir) / o.tree / spec.folder);
    bin = binaries_for(targets, spec, o.tree);
    if (o.build) {
      const std::string suffix = targets.value("tree", "solutions") == o.tree ? "" : "_" + o.tree;
      say("building " + o.tree);
      const std::string err = build_targets(o, {spec.program + suffix, spec.program + "_tests" + suffix});
      if (!err.empty()) result.build_error = err;
    }
    if (result.build_error.empty()) find_forbidden();
  }

  if (!result.build_error.empty()) {
    fail_all("the submission does not compile", "fix the compiler errors below (build your tree with ./kit build labs)",
             result.build_error);
    return result;
  }
  for (const auto& f : forbidden)
    say(fmt::format("{}: exercise {} calls {} ({})", f.file, f.exercise, f.function, f.symbol));

  const auto progress = exercise_progress(graded_files);
  auto edited = [&](const std::string& exercise) -> const ExerciseProgress* {
    const auto it = progress.find(exercise);
    return it != progress.end() && it->second.edited > 0 ? &it->second : nullptr;
  };

  const Calibration calibration = load_calibration(calibration_path, calibration_key(o.data_dir));
  // As another uid, the programs would read whatever the grader writes from here on with a
  // permissive umask (logs, earlier results): the built binaries are in place, so from now on
  // what it writes is its own; each run folder is handed over (confine).
  std::optional<UmaskGuard> private_files;
  if (sandbox.as_user) {
    ::chmod(out.c_str(), 0711);
    private_files.emplace(077);
  }
  GradeContext ctx{spec, o, bin, calibration, {}, (out / "work").string(), &sandbox};
  fs::remove_all(ctx.work_dir);
  fs::create_directories(ctx.work_dir);
  for (const auto& run : spec.runs) {
    say(fmt::format("run '{}' on {} rank(s)", run.name, run.ranks));
    auto r = make_run(run, ctx, out / "runs" / run.name);
    say(fmt::format("run '{}': {} in {:.1f} s", run.name, r.ok() ? "ok" : r.summary, r.seconds));
    for (const auto& id : r.not_attempted) {
      if (edited(id) != nullptr) continue;  // begun: its checks say what is missing
      if (std::find(result.not_attempted.begin(), result.not_attempted.end(), id) == result.not_attempted.end()) {
        result.not_attempted.push_back(id);
      }
    }
    ctx.runs.emplace(run.name, std::move(r));
  }
  double quiet_wait_left = o.quiet_wait_s;  // for the whole lab: a grading's time stays bounded
  for (const auto& c : spec.checks) {
    const auto t = std::chrono::steady_clock::now();
    CheckResult r = run_check(c, ctx);
    // A timing check compares throughput or waiting measured at different moments, and on a
    // shared machine one of them can land in a neighbour's burst (seen: lab 03's scaling
    // efficiency 0.37-0.60 for the same binary within an hour). A failed timing check is
    // measured again, its runs re-run, up to o.timing_attempts in all; the first that passes (else
    // the last) counts, and the output says how many were taken. The threshold itself never moves.
    // A machine that lends a core elsewhere for minutes would fail every attempt alike: before
    // each, the grader waits (up to o.quiet_wait_s) until it gives the runs their cores.
    for (int attempt = 2;
         attempt <= o.timing_attempts && r.status == Status::kFailed && !r.exact && is_timing_kind(c.kind) &&
         std::all_of(c.runs.begin(), c.runs.end(),
                     [&](const std::string& n) { return ctx.runs.count(n) && ctx.runs.at(n).ok(); });
         ++attempt) {
      say(fmt::format("check '{}' failed on timing ({}); measuring again, attempt {} of {}", c.id, r.observed, attempt,
                      o.timing_attempts));
      std::string waited;
      if (quiet_wait_left > 0) {
        int threads = 2;  // a rank and its loader or communication thread
        for (const auto& name : c.runs) threads = std::max(threads, spec.run(name).ranks);
        threads = std::min(threads, sys::usable_cores());
        if (threads > 1) {
          const QuietWait w = wait_for_quiet_machine(
              threads, kQuietShare, quiet_wait_left, 5.0, parallel_capacity,
              [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }, say);
          quiet_wait_left -= w.waited_s;
          if (w.waited_s > 0 || !w.quiet) {
            waited = w.quiet ? fmt::format(
                                   "; before attempt {} the grader waited {:.0f} s for a quiet machine ({:.1f} "
                                   "of {} cores)",
                                   attempt, w.waited_s, w.capacity, threads)
                             : fmt::format(
                                   "; attempt {} was measured on a busy machine: {:.1f} of {} cores after "
                                   "waiting {:.0f} s",
                                   attempt, w.capacity, threads, w.waited_s);
          }
        }
      }
      for (const auto& name : c.runs) {
        const auto it =
            std::find_if(spec.runs.begin(), spec.runs.end(), [&](const RunSpec& x) { return x.name == name; });
        if (it == spec.runs.end()) continue;
        auto again = make_run(*it, ctx, out / "runs" / it->name);
        ctx.runs.erase(it->name);
        ctx.runs.emplace(it->name, std::move(again));
      }
      const std::string before = r.observed;
      r = run_check(c, ctx);
      r.observed +=
          fmt::format(" (attempt {} of {}; attempt {}: {}){}", attempt, o.timing_attempts, attempt - 1, before, waited);
    }
    r.seconds = seconds_since(t);
    name_sandbox_cause(sandbox, o, bin, r);
    apply_forbidden(forbidden, r);
    if (r.status == Status::kNotAttempted && !r.exercise.empty() && edited(r.exercise) != nullptr) {
      // Written, but it runs an exercise it builds on that is still a stub: that one comes first.
      for (const auto& ex : c.builds_on) {
        const ExerciseProgress* dep = edited(ex);
        if (dep != nullptr && dep->stubs.empty()) continue;
        r.status = Status::kFailed;
        r.score = 0;
        r.diagnosis =
            fmt::format("this check also runs exercise {}, which still holds NotImplemented stubs: finish {} first", ex,
                        ex);
        break;
      }
    }
    if (r.status == Status::kNotAttempted && !r.exercise.empty()) {
      if (const ExerciseProgress* p = edited(r.exercise)) {
        // Half an exercise: some of its regions were written, and what it runs still reaches a stub.
        r.status = Status::kFailed;
        r.score = 0;
        r.diagnosis =
            p->stubs.empty()
                ? fmt::format("exercise {} was edited but its code still throws ddplab::NotImplemented", r.exercise)
                : fmt::format(
                      "exercise {} is half done: {} of its regions still hold the NotImplemented stub ({}); "
                      "the checks reach it",
                      r.exercise, p->stubs.size(), fmt::join(p->stubs, ", "));
      }
    }
    if (r.status == Status::kNotAttempted && !r.exercise.empty() &&
        std::find(result.not_attempted.begin(), result.not_attempted.end(), r.exercise) == result.not_attempted.end()) {
      result.not_attempted.push_back(r.exercise);
    }
    result.score += r.score;
    result.checks.push_back(std::move(r));
  }
  blame_earlier_exercises(spec, result.checks);
  std::sort(result.not_attempted.begin(), result.not_attempted.end());
  fs::remove_all(ctx.work_dir);
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace ddplab::grader

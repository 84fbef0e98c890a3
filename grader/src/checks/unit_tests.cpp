// Check kind `unit_tests`: runs a gtest filter of the lab's test binary under the launcher's limits
// and scores it. "Not attempted" is decided by the NotImplemented stub's exercise id: some failing
// test stops at *this check's* exercise's stub and every other one at a stub too. When this
// exercise's stub is gone but its tests stop at another exercise's, that is a failure naming the
// other exercise; each failing test gets the diagnosis its name maps to.
#include <fnmatch.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "check_util.h"
#include "ddplab/grader/regions.h"
#include "ddplab/grader/sandbox.h"
#include "ddplab/launch.h"

namespace fs = std::filesystem;

namespace ddplab::grader::checks {
namespace {

std::string last_chars(const std::string& s, size_t n) { return s.substr(s.size() > n ? s.size() - n : 0); }

/// The exercise ids of the NotImplemented stubs a failure message reached ("exercise 03.1 is not
/// implemented yet", error.cpp's wording).
std::set<std::string> stubs_reached(const std::string& msg) {
  static const std::regex re("exercise ([0-9A-Za-z_.-]+) is not implemented yet");
  std::set<std::string> ids;
  for (auto it = std::sregex_iterator(msg.begin(), msg.end(), re); it != std::sregex_iterator(); ++it) {
    ids.insert((*it)[1].str());
  }
  return ids;
}

/// "Pattern=diagnosis" entries of `test_diagnoses`: the first whose pattern (gtest's * and ?)
/// matches the test's "Suite.Name" (parameterised: "Prefix/Suite.Name/N" matched as is, then
/// without prefix and index).
std::string diagnosis_for(const std::vector<std::string>& map, const std::string& test) {
  std::string bare = test;
  if (const size_t slash = bare.find('/'); slash != std::string::npos && slash < bare.find('.'))
    bare.erase(0, slash + 1);
  if (const size_t slash = bare.rfind('/'); slash != std::string::npos && slash > bare.find('.')) bare.erase(slash);
  for (const auto& entry : map) {
    const size_t eq = entry.find('=');
    const std::string pattern = entry.substr(0, eq);
    if (fnmatch(pattern.c_str(), test.c_str(), 0) == 0 || fnmatch(pattern.c_str(), bare.c_str(), 0) == 0) {
      return entry.substr(eq + 1);
    }
  }
  return "";
}

/// The first report a sanitizer wrote into the tests' output, if any.
struct SanitizerReport {
  std::string what;   ///< "ThreadSanitizer: data race", "runtime error: signed integer overflow: ..."
  std::string where;  ///< "lab08_student.cpp:57 (in lab08::PrefetchLoader::State::work())", or ""
  std::string path;   ///< the frame's file as the report names it
  int line = 0;
  std::string text;  ///< the report, from its first line
};

/// Finds the first AddressSanitizer / ThreadSanitizer / UBSan report in `log` and its first stack
/// frame in one of `student_files` (file names), else its first frame with a source line.
std::optional<SanitizerReport> sanitizer_report(const std::string& log, const std::vector<std::string>& student_files) {
  static const std::regex head_re(
      R"((?:ERROR|WARNING): ((?:Address|Thread|Memory)Sanitizer: [^\n]*?)(?= on address| at pc| \(pid|\n))");
  static const std::regex ub_re(R"(([^\s:]+):(\d+):\d+: runtime error: ([^\n]*))");
  static const std::regex frame_re(R"(^\s*#\d+ (?:0x[0-9a-f]+ in )?(.*) (/[^\s:]+):(\d+)(?::\d+)?(?: \(.*)?$)");
  SanitizerReport rep;
  std::smatch m;
  size_t at = std::string::npos;
  if (std::regex_search(log, m, head_re)) {
    rep.what = m[1].str();
    at = static_cast<size_t>(m.position(0));
  }
  std::smatch u;
  if (std::regex_search(log, u, ub_re) && static_cast<size_t>(u.position(0)) < at) {
    rep.what = "runtime error: " + u[3].str();
    at = static_cast<size_t>(u.position(0));
    rep.path = u[1].str();
    rep.line = std::stoi(u[2].str());
  }
  if (at == std::string::npos) return std::nullopt;
  at = log.rfind('\n', at) == std::string::npos ? 0 : log.rfind('\n', at) + 1;
  rep.text = log.substr(at, 6000);
  auto is_student = [&](const std::string& path) {
    const fs::path name = fs::path(path).filename();
    return std::any_of(student_files.begin(), student_files.end(),
                       [&](const std::string& f) { return fs::path(f).filename() == name; });
  };
  std::istringstream lines(log.substr(at, 1 << 16));  // C++ frames run to hundreds of characters each
  std::string l, first_path, first_fn, fn;
  int first_line = 0;
  bool found = !rep.path.empty() && is_student(rep.path);
  while (!found && std::getline(lines, l)) {
    std::smatch f;
    if (!std::regex_match(l, f, frame_re)) continue;
    if (first_path.empty()) {
      first_fn = f[1].str();
      first_path = f[2].str();
      first_line = std::stoi(f[3].str());
    }
    if (is_student(f[2].str())) {
      fn = f[1].str();
      rep.path = f[2].str();
      rep.line = std::stoi(f[3].str());
      found = true;
    }
  }
  if (!found && rep.path.empty() && !first_path.empty()) {
    rep.path = first_path;
    rep.line = first_line;
    fn = first_fn;
  }
  if (!rep.path.empty()) {
    rep.where = fmt::format("{}:{}", fs::path(rep.path).filename().string(), rep.line);
    if (!fn.empty()) rep.where += fmt::format(" (in {})", fn.substr(0, 120));
  }
  return rep;
}

/// What a sanitizer's finding means, for a student; the exercise whose region holds its line.
std::string sanitizer_diagnosis(const SanitizerReport& rep) {
  std::string meaning = "the sanitizer stopped the tests";
  if (rep.what.find("data race") != std::string::npos) {
    meaning =
        "two threads use the same memory and nothing orders them: hold the same lock for every access "
        "(or use an atomic)";
  } else if (rep.what.find("use-after-free") != std::string::npos) {
    meaning =
        "memory is used after it was freed: a pointer into a tensor, vector or object that no longer "
        "exists (a temporary's data_ptr, an iterator kept across a resize)";
  } else if (rep.what.find("overflow") != std::string::npos && rep.what.find("runtime error") == std::string::npos) {
    meaning = "an access outside a buffer (an index off by one, a size from the wrong tensor)";
  } else if (rep.what.find("use-after-return") != std::string::npos ||
             rep.what.find("use-after-scope") != std::string::npos) {
    meaning = "a reference to a local variable is used after it went away";
  } else if (rep.what.find("deadlock") != std::string::npos || rep.what.find("lock-order") != std::string::npos) {
    meaning = "two locks are taken in different orders by different threads: they can deadlock";
  } else if (rep.what.find("runtime error") != std::string::npos) {
    meaning = "undefined behaviour";
  }
  std::string exercise;
  if (!rep.path.empty() && fs::is_regular_file(rep.path)) {
    try {
      for (const auto& region : parse_marked_file(rep.path).regions) {
        if (rep.line > region.begin_line && rep.line < region.end_line) {
          exercise = fmt::format(", in exercise {}'s code", region.id);
        }
      }
    } catch (const Error&) {
      // Markers the region rule reports; the frame still names the line.
    }
  }
  return fmt::format("{}{}{}: {}", rep.what, rep.where.empty() ? "" : " at " + rep.where, exercise, meaning);
}

/// The test that was running when the binary stopped (its last "[ RUN      ]" without an end), or "".
std::string running_test(const std::string& log) {
  static const std::regex run_re(R"(\[ RUN      \] (\S+))");
  std::string running;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), run_re); it != std::sregex_iterator(); ++it) {
    running = (*it)[1].str();
  }
  if (!running.empty() && (log.find("[       OK ] " + running) != std::string::npos ||
                           log.find("[  FAILED  ] " + running) != std::string::npos)) {
    running.clear();
  }
  return running;
}

/// The tests that failed before the binary stopped, in order ("[  FAILED  ] Suite.Name (12 ms)").
std::vector<std::string> failed_tests(const std::string& log) {
  static const std::regex failed_re(R"(\[  FAILED  \] (\S+) \()");
  std::vector<std::string> failed;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), failed_re); it != std::sregex_iterator(); ++it) {
    failed.push_back((*it)[1].str());
  }
  return failed;
}

void check_unit_tests(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  const std::string filter = c.text("filter");
  // The test binary's own folder: its only writable place (sandboxed), its TMPDIR, its results.
  const fs::path dir = fs::absolute(ctx.work_dir) / fmt::format("tests-{}", c.id);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path out = dir / "results.json";
  LaunchSpec spec;
  spec.nproc = 1;
  spec.command = {ctx.bin.tests, "--gtest_filter=" + filter, "--gtest_output=json:" + out.string(), "--gtest_color=no"};
  spec.timeout_s = c.number("timeout_s") > 0 ? c.number("timeout_s") : ctx.spec.test_timeout_s;
  spec.prefix_output = false;
  const bool sanitized = !ctx.bin.sanitizer.empty();
  if (sanitized) {
    // Stop at the first finding, with its stack; LibTorch's allocations live as long as the
    // process, so leaks are not reported. The sanitizers' shadow memory is terabytes of address
    // space: no address-space limit, and instrumented code runs several times slower.
    spec.extra_env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1:abort_on_error=0";
    spec.extra_env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1";
    spec.extra_env["TSAN_OPTIONS"] = "halt_on_error=1:second_deadlock_stack=1";
    spec.extra_env["OMP_NUM_THREADS"] = "1";  // LibTorch's OpenMP pool is not instrumented
    spec.timeout_s *= 4;
  } else {
    apply_memory_limit(spec, ctx.spec.memory_limit_mb);
  }
  spec.file_size_limit_bytes = uint64_t{1} << 30;
  std::string log;
  spec.on_line = [&](int, bool, const std::string& l) {
    if (log.size() < (1u << 20)) log += l + "\n";
  };
  spec.on_message = [&](const std::string& m) { log += m + "\n"; };
  if (ctx.sandbox) confine(*ctx.sandbox, spec, dir.string());
  LaunchResult lr = launch(spec);
  if (ctx.sandbox) restore_signals(*ctx.sandbox, lr);
  if (sanitized) {
    if (const auto rep = sanitizer_report(log, ctx.spec.manifest)) {
      fail(r, fmt::format("{} (-fsanitize={})", rep->what, ctx.bin.sanitizer), sanitizer_diagnosis(*rep), rep->text);
      return;
    }
  }
  if (lr.timed_out) {
    // Which test hung, and what failed before it: a bug that breaks one test often hangs a later
    // one (a lost wake-up), and the first failure's own diagnosis names it best.
    const std::string running = running_test(log);
    const auto failed_before = failed_tests(log);
    const auto map = c.texts("test_diagnoses");
    std::string hung = "the code under test hangs or loops forever";
    if (!running.empty()) {
      const std::string own = diagnosis_for(map, running);
      hung = fmt::format("{} hangs (never returns){}", running, own.empty() ? "" : ": " + own);
    }
    std::string diagnosis = hung;
    if (!failed_before.empty()) {
      const std::string own = diagnosis_for(map, failed_before.front());
      diagnosis = fmt::format("{} failed first{}; then {}", failed_before.front(), own.empty() ? "" : ": " + own, hung);
    }
    fail(r,
         fmt::format("the tests ({}) timed out after {:.0f} s{}{}", filter, spec.timeout_s,
                     running.empty() ? "" : " in " + running,
                     failed_before.empty() ? "" : fmt::format(", after {} failed", failed_before.size())),
         diagnosis, last_chars(log, 4000));
    return;
  }
  if (!fs::exists(out)) {
    const std::string running = running_test(log);
    std::string diagnosis = "the code under test crashed the test program (out-of-bounds access, null tensor?)";
    if (!running.empty()) {
      const std::string own = diagnosis_for(c.texts("test_diagnoses"), running);
      diagnosis = fmt::format("the code under test crashed the test program in {}{}", running,
                              own.empty() ? " (out-of-bounds access, null tensor?)" : ": " + own);
    }
    fail(r,
         fmt::format("the test binary ended without results{}: {}", running.empty() ? "" : " during " + running,
                     lr.summary),
         diagnosis, last_chars(log, 4000));
    return;
  }
  json j;
  try {
    std::ifstream in(out);
    j = json::parse(in);
  } catch (const std::exception& e) {
    fail(r, fmt::format("unreadable test results: {}", e.what()), "the test program was interrupted");
    return;
  }
  int tests = 0, failed = 0, not_impl = 0, plain = 0;  // plain: failed without reaching any stub
  std::string details;
  std::set<std::string> other_stubs;   // other exercises' stubs the tests reached
  std::set<std::string> needed_stubs;  // stubs of the exercises this check builds on that they reached
  std::vector<std::string> diagnoses;  // per failing test, in order, each once
  const auto map = c.texts("test_diagnoses");
  bool unmapped = false;
  for (const auto& suite : j.value("testsuites", json::array())) {
    for (const auto& t : suite.value("testsuite", json::array())) {
      ++tests;
      const auto failures = t.value("failures", json::array());
      if (failures.empty()) continue;
      ++failed;
      std::string msg;
      for (const auto& f : failures) msg += f.value("failure", "") + "\n";
      const std::string name = suite.value("name", "") + "." + t.value("name", "");
      const auto stubs = stubs_reached(msg);
      // Its own exercise's stub, or the stub of an exercise it builds on (its tests run that code
      // first): either way nothing here can be judged yet.
      bool own_stub = c.exercise.empty() ? !stubs.empty() : stubs.count(c.exercise) > 0;
      for (const auto& ex : c.builds_on) {
        if (stubs.count(ex) > 0) {
          own_stub = true;
          needed_stubs.insert(ex);
        }
      }
      if (own_stub) {
        ++not_impl;
      } else {
        for (const auto& id : stubs) other_stubs.insert(id);
        if (stubs.empty()) {
          ++plain;
          const std::string d = diagnosis_for(map, name);
          if (d.empty()) {
            unmapped = true;
          } else if (std::find(diagnoses.begin(), diagnoses.end(), d) == diagnoses.end()) {
            diagnoses.push_back(d);
          }
        }
      }
      details += fmt::format("FAILED {}:\n{}\n", name, msg);
    }
  }
  if (tests == 0) {
    r.status = Status::kError;
    r.observed =
        fmt::format("the filter '{}' matches no test in {}", filter, fs::path(ctx.bin.tests).filename().string());
    return;
  }
  if (failed == 0) {
    pass(r, fmt::format("{} test(s) passed", tests));
  } else if (not_impl > 0 && plain == 0) {
    // This exercise is still a stub, and every other failure stops at some stub too (a test of a
    // later exercise that builds on an earlier one): nothing of it was attempted.
    r.status = Status::kNotAttempted;
    r.observed = fmt::format("{} of {} test(s) reach a NotImplemented stub", failed, tests);
    r.diagnosis = c.exercise.empty() ? "implement the exercise" : fmt::format("exercise {} not attempted", c.exercise);
    if (!needed_stubs.empty()) {
      r.diagnosis += fmt::format(" (its tests also run exercise {}, not implemented yet)",
                                 join(std::vector<std::string>(needed_stubs.begin(), needed_stubs.end()), " and "));
    }
    r.details = details.substr(0, 4000);
  } else {
    // What failed, most specific first: another exercise's missing code (this exercise's own stub
    // is gone, so it was attempted: its tests cannot run without the other), then each failing
    // test's own diagnosis, then the check's (for tests the map does not name, and for this
    // exercise's stub reached by some tests while others ran and failed: half an exercise).
    std::vector<std::string> parts;
    if (!other_stubs.empty()) {
      std::vector<std::string> ids(other_stubs.begin(), other_stubs.end());
      parts.push_back(fmt::format("these tests need exercise {}, which is not implemented yet", join(ids, " and ")));
    }
    for (const auto& d : diagnoses) parts.push_back(d);
    if (unmapped || (parts.empty() && not_impl == 0)) parts.push_back(c.diagnosis);
    if (not_impl > 0) {
      parts.push_back(fmt::format("{} test(s) still reach the NotImplemented stub of exercise {}", not_impl,
                                  c.exercise.empty() ? "?" : c.exercise));
    }
    fail(r, fmt::format("{} of {} test(s) failed", failed, tests), join(parts, "; "), details.substr(0, 8000));
  }
}

}  // namespace

const CheckKind kUnitTests =
    {"unit_tests",
     "every selected test of the lab's test binary passes; all failing at this exercise's NotImplemented stub = "
     "not attempted",
     RunArity::kNone,
     {{"filter", ParamType::kString, nullptr, "gtest filter selecting the tests (`Lab03Shard.*`)", Presence::kRequired},
      {"timeout_s", ParamType::kNumber, 0, "wall clock for the test binary (0: [limits] test_timeout_s)"},
      {"test_diagnoses", ParamType::kStringList, json::array(),
       "`\"Pattern=diagnosis\"` entries: a failing test whose `Suite.Name` matches Pattern (gtest's `*`, `?`) "
       "gets that diagnosis instead of the check's"}},
     "the exercise's contract (in the lab's header) is not met: see the failed assertions",
     check_unit_tests,
     [](const CheckSpec& c, const LabSpec&) -> std::string {
       for (const auto& e : c.texts("test_diagnoses")) {
         const size_t eq = e.find('=');
         if (eq == std::string::npos || eq == 0 || eq + 1 == e.size()) {
           return fmt::format("test_diagnoses entry \"{}\" must be \"Pattern=diagnosis\"", e);
         }
       }
       return "";
     }};

}  // namespace ddplab::grader::checks

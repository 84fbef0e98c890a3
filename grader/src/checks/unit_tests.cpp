// Check kind `unit_tests`: runs a gtest filter of the lab's test binary under the launcher's limits
// and scores it; every failing test stopping at a NotImplemented stub means "not attempted".
#include <filesystem>
#include <fstream>

#include "check_util.h"
#include "ddplab/grader/sandbox.h"
#include "ddplab/launch.h"

namespace fs = std::filesystem;

namespace ddplab::grader::checks {
namespace {

std::string last_chars(const std::string& s, size_t n) { return s.substr(s.size() > n ? s.size() - n : 0); }

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
  spec.memory_limit_bytes = static_cast<uint64_t>(ctx.spec.memory_limit_mb * 1024 * 1024);
  spec.file_size_limit_bytes = uint64_t{1} << 30;
  std::string log;
  spec.on_line = [&](int, bool, const std::string& l) {
    if (log.size() < (1u << 20)) log += l + "\n";
  };
  spec.on_message = [&](const std::string& m) { log += m + "\n"; };
  if (ctx.sandbox) confine(*ctx.sandbox, spec, dir.string());
  LaunchResult lr = launch(spec);
  if (ctx.sandbox) restore_signals(*ctx.sandbox, lr);
  if (lr.timed_out) {
    fail(r, fmt::format("the tests ({}) timed out after {:.0f} s", filter, spec.timeout_s),
         "the code under test hangs or loops forever", last_chars(log, 4000));
    return;
  }
  if (!fs::exists(out)) {
    fail(r, fmt::format("the test binary ended without results: {}", lr.summary),
         "the code under test crashed the test program (out-of-bounds access, null tensor?)", last_chars(log, 4000));
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
  int tests = 0, failed = 0, not_impl = 0;
  std::string details;
  for (const auto& suite : j.value("testsuites", json::array())) {
    for (const auto& t : suite.value("testsuite", json::array())) {
      ++tests;
      const auto failures = t.value("failures", json::array());
      if (failures.empty()) continue;
      ++failed;
      std::string msg;
      for (const auto& f : failures) msg += f.value("failure", "") + "\n";
      if (msg.find("is not implemented yet") != std::string::npos) ++not_impl;
      details += fmt::format("FAILED {}.{}:\n{}\n", suite.value("name", ""), t.value("name", ""), msg);
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
  } else if (not_impl == failed) {
    r.status = Status::kNotAttempted;
    r.observed = fmt::format("{} of {} test(s) reach a NotImplemented stub", failed, tests);
    r.diagnosis = c.exercise.empty() ? "implement the exercise" : fmt::format("exercise {} not attempted", c.exercise);
    r.details = details.substr(0, 4000);
  } else {
    fail(r, fmt::format("{} of {} test(s) failed", failed, tests), c.diagnosis, details.substr(0, 8000));
  }
}

}  // namespace

const CheckKind kUnitTests =
    {"unit_tests",
     "every selected test of the lab's test binary passes; all failing on NotImplemented = not attempted",
     RunArity::kNone,
     {{"filter", ParamType::kString, nullptr, "gtest filter selecting the tests (`Lab03Shard.*`)", Presence::kRequired},
      {"timeout_s", ParamType::kNumber, 0, "wall clock for the test binary (0: [limits] test_timeout_s)"}},
     "the exercise's contract (in the lab's header) is not met: see the failed assertions",
     check_unit_tests,
     nullptr};

}  // namespace ddplab::grader::checks

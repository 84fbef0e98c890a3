// The per-kind check tests' harness stand-in (check_fixture.h).
#include "check_fixture.h"

#include <unistd.h>

#include <fstream>

#include <fmt/format.h>

#include "../../src/checks/check_util.h"
#include "ddplab/error.h"
#include "ddplab/report.h"

namespace fs = std::filesystem;

namespace ddplab::grader::testing {

void CheckTest::SetUp() {
  fs::create_directories(dir_ / "work");
  options_.data_dir = (dir_ / "no-data").string();  // checks that need a data set are given one
  calibration_.machine = "test";
}

std::string CheckTest::write(const std::string& name, const std::string& text) {
  const fs::path p = dir_ / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
  return p.string();
}

void CheckTest::load(const std::string& body) {
  spec_ = load_spec(write("grade.toml",
                          "[lab]\ntitle = \"t\"\nfolder = \"lab09_x\"\nprogram = \"lab09_x\"\n"
                          "manifest = [\"lab09_student.cpp\"]\nexercises = [\"09.1\", \"09.2\"]\n\n" +
                              body));
}

std::string CheckTest::load_error(const std::string& body) {
  try {
    load(body);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

RunOutcome& CheckTest::add_run(const std::string& name, std::vector<json> reports, std::vector<std::string> args) {
  RunOutcome r;
  r.name = name;
  r.ranks = static_cast<int>(reports.size());
  r.args = std::move(args);
  r.dir = (dir_ / "runs" / name).string();
  r.summary = "all ranks exited 0";
  r.data_dir = options_.data_dir;
  for (const auto& spec_run : spec_.runs) {
    if (spec_run.name == name) {
      r.expect_failure = spec_run.expect_failure;
      if (!spec_run.data.empty()) r.data_dir = spec_run.data;
    }
  }
  for (auto& rep : reports) {
    RankOutcome o;
    o.exit_code = 0;
    o.report = std::move(rep);
    r.rank.push_back(std::move(o));
  }
  fs::create_directories(r.dir);
  return runs_[name] = std::move(r);
}

CheckResult CheckTest::grade(const std::string& id) {
  for (const auto& c : spec_.checks) {
    if (c.id != id) continue;
    GradeContext ctx{spec_, options_, bin_, calibration_, runs_, (dir_ / "work").string()};
    return run_check(c, ctx);
  }
  ADD_FAILURE() << "no check " << id;
  return {};
}

json good_report() {
  return {{"schema", "ddplab.run_report"},
          {"status", "ok"},
          {"phases",
           {{"forward", 1.0}, {"backward", 2.0}, {"optimizer", 0.5}, {"compute", 3.5}, {"wall", 4.0}, {"steps", 4}}},
          {"params", {{"initial_digest", "00000000000000aa"}, {"final_digest", "00000000000000bb"}}},
          {"comm", {{"ops", {{"allreduce", {{"calls", 4}, {"bytes", 4000000}}}}}}},
          {"steps", {{"loss", {0.7, 0.6, 0.5, 0.45}}}}};
}

json epoch_of(const std::vector<uint64_t>& indices, uint64_t order) {
  uint64_t set = 0;
  ddplab::SampleLedger seen;  // the bitmap, as a lab's ledger writes it
  for (auto i : indices) {
    set += checks::index_digest(i);
    seen.add(i);
  }
  return {{"set_digest", fmt::format("{:016x}", set)},
          {"order_digest", fmt::format("{:016x}", order)},
          {"samples", indices.size()},
          {"steps", (indices.size() + 99) / 100},
          {"seen", ddplab::encode_seen(seen.seen())}};
}

::testing::AssertionResult has(const CheckResult& r, Status status, const std::string& diagnosis) {
  if (r.status != status || r.diagnosis.find(diagnosis) == std::string::npos ||
      r.score != (status == Status::kPassed ? r.max_score : 0.0)) {
    return ::testing::AssertionFailure() << "status '" << status_name(r.status) << "' (wanted '" << status_name(status)
                                         << "'), score " << r.score << "/" << r.max_score
                                         << ", observed: " << r.observed << "; diagnosis: " << r.diagnosis
                                         << " (wanted one containing '" << diagnosis << "')";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ddplab::grader::testing

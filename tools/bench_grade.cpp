// `ddplab bench grade`: wall time to grade every lab of one built tree, builds excluded, against
// the target (3 minutes for labs 01-03 on 2 cores: docs/instructor-guide.md).
#include <chrono>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "ddplab/config.h"
#include "ddplab/grader/batch.h"
#include "ddplab/grader/grade.h"

namespace fs = std::filesystem;

namespace ddplab::tools {
namespace {

struct BenchGradeCli {
  std::string tree = "solutions", data, out = "grade-results", calibration;
  double target_s = 180;
};

int run_bench_grade(const BenchGradeCli& o) {
  grader::GradeOptions go;
  go.source_dir = DDPLAB_SOURCE_DIR;
  go.build_dir = grader::this_build_dir();
  go.tree = o.tree;
  go.data_dir = grader::resolve_data_dir(o.data, go.source_dir);
  go.out_dir = fs::absolute(o.out).string();
  go.build = false;
  go.quiet = true;
  go.calibration = o.calibration.empty() ? grader::default_calibration_path(go.build_dir) : o.calibration;
  const auto specs = grader::load_all_specs(go.source_dir);
  const auto start = std::chrono::steady_clock::now();
  const auto results = grader::grade_labs(specs, go);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  grader::write_outputs(results, go.out_dir);
  fmt::print("{}", grader::terminal_summary(results, false));
  bool full = !results.empty();
  for (const auto& r : results) full = full && r.score >= r.max_score;
  const bool ok = s <= o.target_s;
  fmt::print("bench grade: every lab of the {} tree graded in {:.1f} s (builds excluded); target <= {:.0f} s   {}\n",
             go.tree, s, o.target_s, ok ? "OK" : "FAILED");
  if (!full) fmt::print("  (the graded tree did not score full marks: see the summary above)\n");
  return ok ? 0 : 1;
}

}  // namespace

void setup_bench_grade(CLI::App& bench) {
  auto o = std::make_shared<BenchGradeCli>();
  auto* sub = bench.add_subcommand("grade", "Time to grade every lab of a built tree (builds excluded) vs the target");
  sub->add_option("--tree", o->tree, "labs or solutions")->capture_default_str();
  sub->add_option("--data", o->data, "Data set for the runs (default: $DDPLAB_DATA, else <kit>/data/ctr-small)");
  sub->add_option("--out", o->out, "Where results go")->capture_default_str();
  sub->add_option("--calibration", o->calibration, "Calibration file (default: <build>/grader/calibration.json)");
  sub->add_option("--target", o->target_s, "Required seconds")->capture_default_str();
  sub->callback([o] { exit_status() = run_bench_grade(*o); });
}

}  // namespace ddplab::tools

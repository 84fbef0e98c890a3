// `ddplab preflight`: before a job is scaled out, a short trial of it on one rank, on N ranks that
// never talk (the machine's N-process capacity) and data-parallel on N ranks; it reports
// utilization, exposed communication and scaling efficiency and says whether the job is ready to
// scale out, with the reason when it is not ("confirm utilization above 70 % on one machine before
// you add nodes", the seeds' lesson). Exit status 0: ready; 1: not ready. Lab 09's handout.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ddplab/error.h"
#include "ddplab/report.h"
#include "trial.h"

namespace fs = std::filesystem;

namespace ddplab::tools {
namespace {

struct PreflightOptions {
  std::string program;
  int ranks = 2;
  int64_t steps = 40;
  double min_utilization = 0.70;   // the seeds: "check utilization > 70 % before adding nodes"
  double max_exposed_comm = 0.10;  // the seeds' fixed job: AllReduce 6 % of the step
  double min_efficiency = 0.85;    // of the machine's N-process capacity (issue 18's target)
  double timeout = 600;
  std::string keep;
  std::string json;
  std::vector<std::string> args;
};

struct Verdict {
  std::string what;
  double value = 0, bound = 0;
  bool at_least = true;  // value >= bound passes; else value <= bound
  bool percent = false;  // shown as a percentage
  std::string reason;    // why it matters and what to do, when it fails
  bool ok() const { return at_least ? value >= bound : value <= bound; }
};

int run_preflight(const PreflightOptions& o) {
  if (o.ranks < 2) throw ConfigError(fmt::format("--ranks {}: a scale-out trial needs 2 or more ranks", o.ranks));
  if (o.steps < 5) throw ConfigError(fmt::format("--steps {}: need at least 5 steps a trial", o.steps));
  refuse_trial_flags(o.args, "ddplab preflight");
  const std::string program = template_program(o.program);
  const fs::path dir =
      o.keep.empty() ? fs::temp_directory_path() / fmt::format("ddplab-preflight-{}", ::getpid()) : fs::path(o.keep);
  fmt::print("preflight: {} {} ({} steps a trial)\n", fs::path(program).filename().string(), fmt::join(o.args, " "),
             o.steps);
  const Trial one = run_trial(program, o.args, 1, o.steps, dir / "one", o.timeout);
  fmt::print("  1 rank                 {:8.1f} ms a step  {:>9.0f} samples/s  busy {:.2f}\n", one.step_s * 1e3,
             one.samples_per_s, one.busy);
  const auto copies = run_independent(program, o.args, o.ranks, o.steps, dir / "capacity", o.timeout);
  double capacity = 0;
  for (const auto& c : copies) capacity += c.samples_per_s;
  fmt::print("  {} ranks, independent   {:>19} {:>9.0f} samples/s  (this machine's {}-process capacity)\n", o.ranks, "",
             capacity, o.ranks);
  const Trial dp = run_trial(program, o.args, o.ranks, o.steps, dir / "data-parallel", o.timeout);
  const double efficiency = dp.samples_per_s / capacity;
  fmt::print(
      "  {} ranks, data parallel {:8.1f} ms a step  {:>9.0f} samples/s  busy {:.2f}, exposed communication {:.0f} %\n",
      o.ranks, dp.step_s * 1e3, dp.samples_per_s, dp.busy, 100 * dp.comm_share);

  std::vector<Verdict> v = {
      {"utilization, 1 rank", one.busy, o.min_utilization, true, false,
       fmt::format("one rank is busy only {:.0f} % of its steps (waiting for data or host work outside the step's "
                   "compute); adding ranks multiplies that idle time: fix it on one machine first (the input "
                   "pipeline of lab 08, the step's overheads)",
                   100 * one.busy)},
      {fmt::format("exposed communication, {} ranks", o.ranks), dp.comm_share, o.max_exposed_comm, false, true,
       fmt::format("the step waits {:.1f} ms for gradients (--sync {}); it grows with the world size: another rung "
                   "of --sync (lab 04), a larger batch a rank or --accumulate (lab 06), or a faster link",
                   dp.comm_share * dp.step_s * 1e3, dp.reports.front().at("config").value("sync", std::string("?")))},
      {fmt::format("scaling efficiency, {} ranks", o.ranks), efficiency, o.min_efficiency, true, false,
       fmt::format("{} ranks give {:.2f} of what {} independent processes reach on this machine; the gap widens "
                   "with more ranks (`ddplab forecast` shows by how much)",
                   o.ranks, efficiency, o.ranks)},
  };
  int failed = 0;
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& c : v) {
    auto show = [&](double x, int digits) {
      return c.percent ? fmt::format("{:.{}f} %", 100 * x, digits) : fmt::format("{:.{}f}", x, digits + 2);
    };
    const std::string bound = show(c.bound, 0);
    std::string value = show(c.value, 0);
    if (value == bound && !c.ok()) {
      // Never "0.85 need >= 0.85 NOT READY": a value that fails by less than the rounding shows one
      // more digit, cut toward the side it fails on (0.8497 -> 0.849).
      const double cut = c.at_least ? std::floor(c.value * 1000) / 1000 : std::ceil(c.value * 1000) / 1000;
      value = show(cut, 1);
    }
    fmt::print("  {:<34} {:>6}   need {} {:<6} {}\n", c.what, value, c.at_least ? ">=" : "<=", bound,
               c.ok() ? "OK" : "NOT READY");
    if (!c.ok()) {
      ++failed;
      fmt::print("      {}\n", c.reason);
    }
    checks.push_back({{"check", c.what},
                      {"value", c.value},
                      {"bound", c.bound},
                      {"at_least", c.at_least},
                      {"ok", c.ok()},
                      {"reason", c.ok() ? "" : c.reason}});
  }
  const bool ready = failed == 0;
  if (ready) {
    fmt::print("verdict: READY to scale out: all {} checks pass\n", v.size());
  } else {
    fmt::print("verdict: NOT READY to scale out: {} of {} checks fail (reasons above)\n", failed, v.size());
  }
  if (!o.json.empty()) {
    const nlohmann::json j = {{"program", program},
                              {"args", o.args},
                              {"steps", o.steps},
                              {"ranks", o.ranks},
                              {"one_rank",
                               {{"step_s", one.step_s}, {"samples_per_s", one.samples_per_s}, {"busy", one.busy}}},
                              {"capacity_samples_per_s", capacity},
                              {"data_parallel",
                               {{"step_s", dp.step_s},
                                {"samples_per_s", dp.samples_per_s},
                                {"busy", dp.busy},
                                {"exposed_comm", dp.comm_share}}},
                              {"efficiency", efficiency},
                              {"checks", checks},
                              {"ready", ready}};
    write_file_atomic(o.json, j.dump(2) + "\n");
  }
  if (o.keep.empty()) fs::remove_all(dir);
  return ready ? 0 : 1;
}

}  // namespace

void setup_preflight(CLI::App& app) {
  auto o = std::make_shared<PreflightOptions>();
  auto* sub = app.add_subcommand(
      "preflight",
      "A short trial of a job on 1 and N ranks: utilization, exposed communication, scaling efficiency, and whether "
      "it is ready to scale out (exit 1 if not). Usage: ddplab preflight [options] -- PROGRAM-ARGS");
  sub->add_option("--program", o->program, "The program to try (default: lab09_capstone next to ddplab)");
  sub->add_option("--ranks", o->ranks, "Ranks of the scale-out trial")->capture_default_str();
  sub->add_option("--steps", o->steps, "Optimizer steps of each trial")->capture_default_str();
  sub->add_option("--min-utilization", o->min_utilization, "Busy fraction one rank needs")->capture_default_str();
  sub->add_option("--max-exposed-comm", o->max_exposed_comm,
                  "Largest share of the N-rank step spent waiting for gradients")
      ->capture_default_str();
  sub->add_option("--min-efficiency", o->min_efficiency, "N-rank throughput needed, as a share of N independent ranks'")
      ->capture_default_str();
  sub->add_option("--timeout", o->timeout, "Seconds before a trial is stopped")->capture_default_str();
  sub->add_option("--keep", o->keep, "Keep the trials' reports and output in this folder");
  sub->add_option("--json", o->json, "Also write the figures and the verdict to this JSON file");
  sub->add_option("args", o->args,
                  "The program's arguments (after --), e.g. --config labs/lab09_capstone/template.toml");
  sub->callback([o] { exit_status() = run_preflight(*o); });
}

}  // namespace ddplab::tools

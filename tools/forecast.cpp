// `ddplab forecast`: the scaling forecast of lab 09. Fits the ring model (latency a, bandwidth B)
// to `ddplab bench allreduce` at 2 ranks, reads one rank's compute from a one-rank run of the
// template, and predicts step time, efficiency, throughput and the cost of an epoch at 8 / 64 /
// 512 devices for each link of the sourced link table (common/links.toml) and each rung of the
// sync ladder (forecast.h). --check runs the template at the given world sizes on this machine
// and prints the prediction error against each (target: within --max-error); --seeds holds the
// model against the seeds' 3,500 -> 24,000 samples/s on 8 V100.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ddplab/cost.h"
#include "ddplab/data/shard.h"
#include "ddplab/error.h"
#include "ddplab/forecast.h"
#include "ddplab/launch.h"
#include "ddplab/report.h"
#include "ddplab/system.h"
#include "trial.h"

namespace fs = std::filesystem;

namespace ddplab::tools {
namespace {

using namespace ddplab::forecast;

struct ForecastOptions {
  std::string program;
  std::string allreduce;  // bench allreduce --json output; "" = measure it here
  std::string run;        // a one-rank report; "" = run a trial here
  std::string sync;       // "" = the run's --sync
  std::vector<int> devices = {8, 64, 512};
  std::string links;
  std::string instance = "p3.16xlarge";
  std::string local_instance = "c6i.large";
  std::string prices;
  double epoch_samples = 0;  // 0: the run's training set
  std::vector<int> check;
  double max_error = 0.15;
  int64_t steps = 40;
  double timeout = 600;
  int64_t max_bytes = 64LL << 20;  // of the all-reduce timings measured here
  bool seeds = false;
  std::string keep, json;
  std::vector<std::string> args;
};

/// `ddplab bench allreduce` at 2 ranks, 4 B to `max_bytes`, its rows written to `out`; started as
/// the job being forecast is (--backend auto: over Open MPI where the kit has it), so the ring is
/// fitted to the transport the template's runs use.
std::pair<std::vector<Timing>, int> measure_allreduce(const fs::path& out, int64_t max_bytes, double timeout_s) {
  LaunchSpec spec;
  spec.nproc = 2;
  spec.backend = LaunchBackend::kAuto;
  spec.command = {fs::canonical("/proc/self/exe").string(),
                  "bench",
                  "allreduce",
                  "--iters",
                  "20",
                  "--warmup",
                  "3",
                  "--max-bytes",
                  std::to_string(max_bytes),
                  "--json",
                  out.string()};
  run_captured(spec, timeout_s, "bench allreduce at 2 ranks");
  return load_allreduce_json(out.string());
}

std::string money(double usd) { return usd >= 100 ? fmt::format("{:.0f}", usd) : fmt::format("{:.2f}", usd); }

nlohmann::json to_json(const StepForecast& f) {
  return {{"ranks", f.ranks},
          {"batch", f.batch},
          {"compute_s", f.compute_s},
          {"comm_s", f.comm_s},
          {"exposed_s", f.exposed_s},
          {"step_s", f.step_s},
          {"samples_per_s", f.samples_per_s},
          {"efficiency", f.efficiency},
          {"collectives", f.collectives},
          {"bytes", f.bytes},
          {"note", f.note}};
}

void print_header() {
  fmt::print("  {:<14} {:>7} {:<9} {:>9} {:>9} {:>9} {:>11} {:>6} {:>12}\n", "link", "devices", "sync", "step ms",
             "comm ms", "exposed", "samples/s", "eff.", "$ an epoch");
}

void print_row(const std::string& link, const StepForecast& f, const char* rung, double usd) {
  fmt::print("  {:<14} {:>7} {:<9} {:>9.2f} {:>9.2f} {:>9.2f} {:>11.0f} {:>6.2f} {:>12}\n", link, f.ranks, rung,
             f.step_s * 1e3, f.comm_s * 1e3, f.exposed_s * 1e3, f.samples_per_s, f.efficiency, money(usd));
}

int run_forecast(const ForecastOptions& o) {
  refuse_trial_flags(o.args, "ddplab forecast");
  for (int n : o.devices) {
    if (n < 1) throw ConfigError(fmt::format("--devices {}: each must be 1 or more", n));
  }
  for (int n : o.check) {
    if (n < 1 || n > 64) throw ConfigError(fmt::format("--check {}: each world size must be in 1..64", n));
  }
  const fs::path dir =
      o.keep.empty() ? fs::temp_directory_path() / fmt::format("ddplab-forecast-{}", ::getpid()) : fs::path(o.keep);
  fs::create_directories(dir);
  const auto links = links_from(o.links);
  const auto prices = cost::prices_from(o.prices);
  const std::string prices_name = o.prices.empty() ? cost::kKitPrices : o.prices;
  const cost::Price& price = cost::find_price(prices, o.instance, prices_name);
  const cost::Price& local_price = cost::find_price(prices, o.local_instance, prices_name);
  nlohmann::json out = {{"forecast", nlohmann::json::object()}};

  // ---- the seeds: 8 V100 on NVLink, known only by their throughput ----
  if (o.seeds) {
    constexpr double kOneV100 = 3500, kEightV100 = 24000;  // references.md, the seeds
    constexpr int64_t kBatch = 256;                        // the seed's DataLoader(batch_size=256)
    constexpr double kCriteo = 45840617;                   // Criteo Kaggle train.txt rows (lab-facts §9.1)
    const Model model = deepfm_model(16);
    const Compute c = compute_from_throughput(kOneV100);
    const Link& nv = find_link(links, "nvlink-v100");
    const cost::Price& p3 = cost::find_price(prices, "p3.16xlarge", prices_name);
    fmt::print(
        "forecast for the seeds' job: one V100 at {:.0f} samples/s (batch {}), DeepFM as the course's ({:.2f} MB of "
        "gradients), 8 V100 joined by {} (a {:.1f} us, B {:.0f} GB/s{})\n",
        kOneV100, kBatch, model.gradient_bytes() / 1e6, nv.name, nv.ring.latency_s * 1e6, nv.ring.bytes_per_s / 1e9,
        nv.estimate ? ", an estimate" : "");
    print_header();
    nlohmann::json rows = nlohmann::json::array();
    for (Rung r : {Rung::kBucketed, Rung::kOverlap}) {
      const auto f = predict(model, c, nv.ring, 8, kBatch, r);
      print_row(nv.name, f, rung_name(r), epoch_usd(f, kCriteo, p3.usd_per_device_hour()));
      rows.push_back(to_json(f));
    }
    const auto best = predict(model, c, nv.ring, 8, kBatch, Rung::kOverlap);
    const double seed_eff = kEightV100 / (8 * kOneV100);
    fmt::print(
        "  the seeds measured {:.0f} samples/s on 8 (efficiency {:.2f}); the model says {:.0f} ({:.2f}): it misses by "
        "{:.0f} %. The ring model prices only the all-reduce; on NVLink that is {:.2f} ms of a {:.1f} ms step, so the "
        "seeds' {:.0f} % loss came from elsewhere (their input pipeline, stragglers, the step's host work).\n",
        kEightV100, seed_eff, best.samples_per_s, best.efficiency, 100 * relative_error(best.samples_per_s, kEightV100),
        best.exposed_s * 1e3, best.step_s * 1e3, 100 * (1 - seed_eff));
    fmt::print(
        "  one epoch of Criteo Kaggle ({:.0f} samples) on {}: ${} measured by the seeds' throughput, ${} "
        "forecast; at the seeds' 3,500 samples/s without a sampler, 8 GPUs bill ${}\n",
        kCriteo, p3.instance, money(kCriteo / kEightV100 / 3600 * p3.usd_per_hour),
        money(epoch_usd(best, kCriteo, p3.usd_per_device_hour())), money(kCriteo / kOneV100 / 3600 * p3.usd_per_hour));
    out["seeds"] = {{"measured_samples_per_s", kEightV100},
                    {"forecast_samples_per_s", best.samples_per_s},
                    {"error", relative_error(best.samples_per_s, kEightV100)},
                    {"rows", rows}};
  }

  // ---- this machine: the ring, one rank's compute ----
  const bool need_machine = !o.seeds || !o.check.empty() || !o.run.empty() || !o.args.empty();
  int exit = 0;
  if (need_machine) {
    std::pair<std::vector<Timing>, int> timings =
        o.allreduce.empty() ? measure_allreduce(dir / "allreduce.json", o.max_bytes, o.timeout)
                            : load_allreduce_json(o.allreduce);
    const Fit fit = fit_ring(timings.first, timings.second);
    fmt::print(
        "ring model of this machine, fitted to bench allreduce at {} ranks ({} sizes): a = {:.1f} us, B = {:.2f} GB/s; "
        "the fit misses by {:.0f} % (median), {:.0f} % at most ({:.0f} B)\n",
        fit.ranks, timings.first.size(), fit.ring.latency_s * 1e6, fit.ring.bytes_per_s / 1e9,
        100 * fit.median_relative_error, 100 * fit.worst_relative_error, fit.worst_bytes);
    if (!fit.fallback.empty()) fmt::print("  note: {}\n", fit.fallback);
    nlohmann::json report;
    const std::string program = template_program(o.program);
    if (!o.run.empty()) {
      report = RunReport::load(o.run);
    } else {
      report = run_trial(program, o.args, 1, o.steps, dir / "one", o.timeout).reports.front();
    }
    const Compute compute = compute_from_report(report);
    const auto& cfg = report.at("config");
    const int64_t batch = cfg.at("batch").get<int64_t>();
    const std::string sync = !o.sync.empty() ? o.sync : cfg.value("sync", std::string("bucketed"));
    const Rung rung = parse_rung(sync);
    Model model = deepfm_model(cfg.value("embedding_dim", int64_t{16}));
    const std::string data_dir = cfg.at("data").get<std::string>();
    const BatchRows batch_rows = measure_batch_rows(data_dir, batch, cfg.value("seed", uint64_t{0}));
    model.rows_touched = batch_rows.distinct;
    model.lookups = batch_rows.lookups;
    // The one-pass Adam takes row-sparse table gradients, which the sparse rung sends as they are.
    model.row_sparse = cfg.value("adam", std::string("torch")) == "fused";
    if (model.row_sparse) {
      model.row_sparse_work = measure_row_sparse_work(model);
    } else {
      model.sparse_work = measure_sparse_work(model);
    }
    const SparseWork& work = model.row_sparse ? model.row_sparse_work : model.sparse_work;
    // A program's all-reduces a step besides the gradients', as its report says (lab 09's template
    // agrees on stopping every step: an 8-byte all-reduce of its stop flags).
    model.control_allreduces =
        report.value(nlohmann::json::json_pointer("/template/control_allreduces_per_step"), int64_t{0});
    const double epoch =
        o.epoch_samples > 0 ? o.epoch_samples : static_cast<double>(data::read_metadata(data_dir).train_count);
    const int cores = sys::usable_cores();
    fmt::print(
        "one rank of this machine: {:.2f} ms a step at batch {} ({:.2f} us a sample, {:.2f} ms a step besides; "
        "backward {:.2f} us a sample); DeepFM {:.2f} MB of gradients, {:.0f} distinct rows a batch (the sparse "
        "rung's own work{}: {:.2f} ms a step + {:.2f} ms a rank); {} control all-reduce(s) a step; an epoch is {:.0f} "
        "samples\n",
        compute.step_seconds(batch) * 1e3, batch, compute.per_sample_s * 1e6, compute.per_step_s * 1e3,
        compute.backward_per_sample_s * 1e6, model.gradient_bytes() / 1e6, model.rows_touched,
        model.row_sparse ? fmt::format(" on row-sparse gradients, {:.0f} lookups a batch", model.lookups) : "",
        work.scan_s * 1e3, work.per_rank_s * 1e3, model.control_allreduces, epoch);
    out["ring"] = {{"latency_s", fit.ring.latency_s},
                   {"bytes_per_s", fit.ring.bytes_per_s},
                   {"ranks", fit.ranks},
                   {"median_relative_error", fit.median_relative_error},
                   {"worst_relative_error", fit.worst_relative_error},
                   {"fallback", fit.fallback}};
    out["compute"] = {{"per_sample_s", compute.per_sample_s},
                      {"backward_per_sample_s", compute.backward_per_sample_s},
                      {"per_step_s", compute.per_step_s},
                      {"batch", batch},
                      {"rows_touched", model.rows_touched},
                      {"lookups", model.lookups},
                      {"row_sparse", model.row_sparse},
                      {"sparse_scan_s", work.scan_s},
                      {"sparse_per_rank_s", work.per_rank_s},
                      {"control_allreduces", model.control_allreduces},
                      {"epoch_samples", epoch}};

    // ---- the forecast table: each link at each device count, each rung ----
    fmt::print(
        "forecast at batch {} a device, compute as one rank of this machine; $ an epoch as {} (${:.3f} a "
        "device-hour, {})\n",
        batch, price.instance, price.usd_per_device_hour(), price.as_of);
    print_header();
    nlohmann::json table = nlohmann::json::array();
    std::vector<std::string> notes;
    for (const auto& link : links) {
      for (int n : o.devices) {
        if (link.max_devices > 0 && n > link.max_devices) {
          fmt::print("  {:<14} {:>7} (one {} domain joins at most {} devices)\n", link.name, n, link.name,
                     link.max_devices);
          continue;
        }
        for (Rung r : {Rung::kBucketed, Rung::kOverlap, Rung::kSparse}) {
          const auto f = predict(model, compute, link.ring, n, batch, r);
          const double usd = epoch_usd(f, epoch, price.usd_per_device_hour());
          print_row(link.name, f, rung_name(r), usd);
          auto j = to_json(f);
          j["link"] = link.name;
          j["sync"] = rung_name(r);
          j["usd_per_epoch"] = usd;
          table.push_back(j);
          if (!f.note.empty() && std::find(notes.begin(), notes.end(), f.note) == notes.end()) notes.push_back(f.note);
        }
      }
    }
    for (const auto& n : notes) fmt::print("  note: {}\n", n);
    for (const auto& l : links) {
      if (l.estimate) fmt::print("  {} is an estimate: {}; {}\n", l.name, l.latency_source, l.bandwidth_source);
    }
    out["forecast"] = table;

    // ---- the check: this machine's measured runs against the forecast ----
    if (!o.check.empty()) {
      fmt::print(
          "check against this machine ({} usable cores; a job of more ranks than cores shares them: compute x "
          "ranks/cores), sync {}, {} steps a run; $ an epoch as {}\n",
          cores, sync, o.steps, local_price.instance);
      fmt::print("  {:>5} {:>12} {:>12} {:>8} {:>13} {:>13}\n", "ranks", "forecast s/s", "measured s/s", "error",
                 "forecast step", "measured step");
      nlohmann::json checks = nlohmann::json::array();
      double worst = 0;
      for (int n : o.check) {
        const auto f = predict(model, compute, fit.ring, n, batch, rung, Machine::cpu(n, cores));
        const Trial t = run_trial(program, o.args, n, o.steps, dir / fmt::format("check-{}", n), o.timeout);
        const double err = relative_error(f.samples_per_s, t.samples_per_s);
        worst = std::max(worst, err);
        fmt::print("  {:>5} {:>12.0f} {:>12.0f} {:>7.0f}% {:>10.2f} ms {:>10.2f} ms   ${} an epoch\n", n,
                   f.samples_per_s, t.samples_per_s, 100 * err, f.step_s * 1e3, t.step_s * 1e3,
                   money(epoch_usd(f, epoch, local_price.usd_per_device_hour())));
        checks.push_back({{"ranks", n},
                          {"forecast", to_json(f)},
                          {"measured_samples_per_s", t.samples_per_s},
                          {"measured_step_s", t.step_s},
                          {"error", err}});
      }
      const bool ok = worst <= o.max_error;
      fmt::print("  largest prediction error {:.1f} %   target <= {:.0f} %   {}\n", 100 * worst, 100 * o.max_error,
                 ok ? "OK" : "FAILED");
      out["check"] = {{"rows", checks}, {"worst_error", worst}, {"max_error", o.max_error}, {"ok", ok}};
      exit = ok ? 0 : 1;
    }
  }
  if (!o.json.empty()) write_file_atomic(o.json, out.dump(2) + "\n");
  if (o.keep.empty()) fs::remove_all(dir);
  return exit;
}

}  // namespace

void setup_forecast(CLI::App& app) {
  auto o = std::make_shared<ForecastOptions>();
  auto* sub = app.add_subcommand(
      "forecast",
      "Scaling forecast: the ring model fitted to bench allreduce and one rank's compute, step time, efficiency, "
      "throughput and cost at 8/64/512 devices per link and sync rung; --check compares with runs on this machine. "
      "Usage: ddplab forecast [options] -- PROGRAM-ARGS");
  sub->add_option("--program", o->program, "The program to measure (default: lab09_capstone next to ddplab)");
  sub->add_option("--allreduce", o->allreduce,
                  "All-reduce timings (bench allreduce --json) to fit; default: measure at 2 ranks now");
  sub->add_option("--run", o->run, "A one-rank run's report for the compute; default: a trial run now");
  sub->add_option("--max-bytes", o->max_bytes, "Largest message of the all-reduce timings measured here")
      ->capture_default_str();
  sub->add_option("--sync", o->sync, "The rung of the --check runs and the forecast's own (default: the run's)");
  sub->add_option("--devices", o->devices, "Device counts of the forecast table")
      ->delimiter(',')
      ->allow_extra_args(false)  // one comma-separated token: a following `--` starts the program's arguments
      ->capture_default_str();
  sub->add_option("--links", o->links, "Link table (TOML, the format of common/links.toml; default: the kit's)");
  sub->add_option("--instance", o->instance, "Price-table instance the forecast's devices are billed as")
      ->capture_default_str();
  sub->add_option("--local-instance", o->local_instance, "Instance this machine's runs are billed as")
      ->capture_default_str();
  sub->add_option("--prices", o->prices, "Price table (TOML; default: the kit's)");
  sub->add_option("--epoch-samples", o->epoch_samples, "Samples in an epoch (default: the run's training set)");
  sub->add_option("--check", o->check, "World sizes to run here and compare with the forecast, e.g. 1,2,4")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_option("--max-error", o->max_error, "The prediction error --check accepts")->capture_default_str();
  sub->add_option("--steps", o->steps, "Optimizer steps of each trial run")->capture_default_str();
  sub->add_option("--timeout", o->timeout, "Seconds before a trial is stopped")->capture_default_str();
  sub->add_flag("--seeds", o->seeds, "The seeds' 8 V100 job (3,500 -> 24,000 samples/s) against the model");
  sub->add_option("--keep", o->keep, "Keep the trials' reports and the timings in this folder");
  sub->add_option("--json", o->json, "Also write every figure to this JSON file");
  sub->add_option("args", o->args,
                  "The program's arguments (after --), e.g. --config labs/lab09_capstone/template.toml");
  sub->callback([o] { exit_status() = run_forecast(*o); });
}

}  // namespace ddplab::tools

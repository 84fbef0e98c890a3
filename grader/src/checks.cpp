// The check plug-ins. Each reads what it needs from the runs the harness made and recomputes
// every figure it can (sample coverage from the ranks' digests, test AUC from the saved model)
// instead of trusting the student program's own conclusions.
#include "ddplab/grader/checks.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <torch/torch.h>

#include "ddplab/data/shard.h"
#include "ddplab/deepfm.h"
#include "ddplab/error.h"
#include "ddplab/evaluate.h"
#include "ddplab/launch.h"
#include "ddplab/report.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ddplab::grader {
namespace {

std::string where(const GradeContext& ctx, const CheckSpec& c) { return fmt::format("{}:{} ({})", ctx.spec.path, c.line, c.name); }

double num(const CheckSpec& c, const char* key, double def) {
  const auto it = c.params.find(key);
  return it != c.params.end() && it->is_number() ? it->get<double>() : def;
}

std::string text(const CheckSpec& c, const char* key, const std::string& def) {
  const auto it = c.params.find(key);
  return it != c.params.end() && it->is_string() ? it->get<std::string>() : def;
}

void fail(CheckResult& r, std::string observed, std::string diagnosis, std::string details = "") {
  r.status = Status::kFailed;
  r.observed = std::move(observed);
  r.diagnosis = std::move(diagnosis);
  if (!details.empty()) r.details = std::move(details);
}

void pass(CheckResult& r, std::string observed) {
  r.status = Status::kPassed;
  r.observed = std::move(observed);
  r.diagnosis.clear();
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

/// The runtime's stall diagnosis (dist/process_group.h) a rank printed when a collective timed
/// out: "allreduce #12 (...) did not complete within ... Last collective entered per rank: ...".
std::string stall_line(const std::string& log) {
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("did not complete within");
    if (at != std::string::npos) {
      const auto end = line.find(" Backend:");
      std::string s = line.substr(0, end);
      const auto rank = s.find("rank ", s.find(']') == std::string::npos ? 0 : s.rfind(']') + 1);
      return rank == std::string::npos ? s : s.substr(rank);
    }
  }
  return "";
}

/// The first line of an error message (c10 appends a C++ backtrace).
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

/// Checks that the runs a check reads completed well enough to be judged, and explains why not.
/// `need_ok`: the check needs a complete run (no exercise may be missing).
bool runs_usable(const CheckSpec& c, GradeContext& ctx, CheckResult& r, bool need_ok = false) {
  if (c.runs.empty()) throw ConfigError(fmt::format("{}: this kind of check needs 'run' or 'runs'", where(ctx, c)));
  for (const auto& name : c.runs) {
    const auto it = ctx.runs.find(name);
    if (it == ctx.runs.end()) {
      r.status = Status::kError;
      r.observed = fmt::format("run '{}' was not made", name);
      return false;
    }
    const RunOutcome& run = it->second;
    if (!c.exercise.empty() &&
        std::find(run.not_attempted.begin(), run.not_attempted.end(), c.exercise) != run.not_attempted.end()) {
      r.status = Status::kNotAttempted;
      r.observed = fmt::format("exercise {} not attempted", c.exercise);
      r.diagnosis = fmt::format("exercise {} still throws NotImplemented: implement its STUDENT CODE region", c.exercise);
      return false;
    }
    if (run.timed_out) {
      const std::string stall = stall_line(run.log_tail);
      fail(r, fmt::format("run '{}' ({} ranks) timed out: {}", name, run.ranks, run.summary),
           stall.empty() ? "the program hangs or loops: a rank waits in a collective its peers never enter, or a loop never ends"
                         : "a collective did not complete: " + stall,
           run.log_tail);
      return false;
    }
    if (run.exit_code == kExitNotAttempted) {
      if (need_ok || c.exercise.empty()) {
        r.status = Status::kNotAttempted;
        r.observed = fmt::format("run '{}' stopped at exercise(s) not attempted: {}", name, join(run.not_attempted));
        r.diagnosis = "implement the exercises listed";
        return false;
      }
    } else if (run.exit_code != 0) {
      std::string cause = run.summary;
      for (size_t k = 0; k < run.rank.size(); ++k) {
        const auto& rep = run.rank[k].report;
        if (rep && rep->value("status", "") == "error") {
          cause = fmt::format("rank {}: {}", k, first_line(rep->value("message", "error")));
          break;
        }
      }
      std::string diagnosis = "the program failed: see the log below";
      const std::string& log = run.log_tail;
      if (log.find("bad_alloc") != std::string::npos || log.find("can't allocate memory") != std::string::npos ||
          log.find("Cannot allocate memory") != std::string::npos) {
        diagnosis = fmt::format("ran out of memory (the grader allows {:.0f} MiB per rank)", ctx.spec.memory_limit_mb);
      } else if (!stall_line(log).empty()) {
        diagnosis = "a collective timed out (a rank skipped it or called a different one): " + stall_line(log);
        cause = "a collective timed out";
      } else if (run.summary.find("SIG") != std::string::npos) {
        diagnosis = "a rank crashed: an out-of-bounds access, a null or undefined tensor, or an uncaught signal";
      }
      fail(r, fmt::format("run '{}' failed: {}", name, cause), diagnosis, run.log_tail);
      return false;
    }
    for (size_t k = 0; k < run.rank.size(); ++k) {
      if (!run.rank[k].report) {
        fail(r, fmt::format("run '{}': {}", name, run.rank[k].report_error),
             "the run report is missing or malformed: the program must end through the lab's driver", run.log_tail);
        return false;
      }
    }
  }
  return true;
}

const RunOutcome& the_run(const CheckSpec& c, GradeContext& ctx, size_t i = 0) { return ctx.runs.at(c.runs.at(i)); }

std::vector<json> reports(const RunOutcome& run) {
  std::vector<json> out;
  for (const auto& r : run.rank) out.push_back(*r.report);
  return out;
}

/// A report field the grader needs; a missing or mistyped one is a failed check (garbage report).
template <typename T>
T field(const json& rep, const std::string& path, int rank) {
  const json* j = &rep;
  std::istringstream in(path);
  std::string key;
  while (std::getline(in, key, '.')) {
    if (j->is_array()) {
      const size_t i = std::stoul(key);
      if (i >= j->size()) throw Error(fmt::format("rank {}'s report has no {}", rank, path));
      j = &(*j)[i];
    } else {
      const auto it = j->find(key);
      if (it == j->end()) throw Error(fmt::format("rank {}'s report has no {}", rank, path));
      j = &*it;
    }
  }
  try {
    return j->get<T>();
  } catch (const std::exception&) {
    throw Error(fmt::format("rank {}'s report: {} has the wrong type", rank, path));
  }
}

uint64_t parse_hex(const std::string& s) { return std::stoull(s, nullptr, 16); }

/// Training samples of a run: --train-samples if given, else the data set's.
uint64_t train_size(const GradeContext& ctx, const RunSpec& spec) {
  const auto& args = ctx.runs.at(spec.name).args;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--train-samples") return std::stoull(args[i + 1]);
  }
  return data::read_metadata(ctx.options.data_dir).train_count;
}

uint64_t eval_count(const CheckSpec& c, const GradeContext& ctx) {
  const double n = num(c, "eval_samples", 0);
  const uint64_t all = data::read_metadata(ctx.options.data_dir).test_count;
  return n > 0 ? std::min(all, static_cast<uint64_t>(n)) : all;
}

/// Test AUC of a saved model, computed here (never taken from the report).
EvalResult evaluate_saved(const std::string& path, const GradeContext& ctx, uint64_t count) {
  if (path.empty() || !fs::exists(path)) throw Error("the run saved no model (rank 0 must write --save-model)");
  DeepFM model;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    model->load(archive);
  } catch (const std::exception& e) {
    throw Error(fmt::format("the saved model {} cannot be loaded as the course's DeepFM: {}", path, e.what()));
  }
  const data::Dataset test(ctx.options.data_dir, data::Split::kTest);
  torch::NoGradGuard ng;
  return evaluate_model(model, test, std::min<uint64_t>(count, test.size()), 4096, torch::kCPU);
}

/// A figure relative to the reference: calibrated on this machine if available, else the spec's.
std::pair<double, std::string> reference_figure(const CheckSpec& c, const GradeContext& ctx) {
  if (auto v = ctx.calibration.get(ctx.spec.id, c.name)) return {*v, "the reference solution on this machine"};
  const auto it = c.params.find("reference");
  if (it == c.params.end() || !it->is_number()) {
    throw ConfigError(fmt::format("{}: no calibration on this machine and no 'reference' value in the spec", where(ctx, c)));
  }
  return {it->get<double>(), "the spec's reference value (uncalibrated machine)"};
}

// ---------------------------------------------------------------- unit_tests

void check_unit_tests(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  const std::string filter = text(c, "filter", "");
  if (filter.empty()) throw ConfigError(fmt::format("{}: unit_tests needs 'filter'", where(ctx, c)));
  const fs::path out = fs::path(ctx.work_dir) / fmt::format("tests-{}.json", std::hash<std::string>()(c.name));
  fs::remove(out);
  LaunchSpec spec;
  spec.nproc = 1;
  spec.command = {ctx.bin.tests, "--gtest_filter=" + filter, "--gtest_output=json:" + out.string(), "--gtest_color=no"};
  spec.timeout_s = num(c, "timeout_s", ctx.spec.test_timeout_s);
  spec.prefix_output = false;
  spec.memory_limit_bytes = static_cast<uint64_t>(ctx.spec.memory_limit_mb * 1024 * 1024);
  spec.file_size_limit_bytes = uint64_t{1} << 30;
  std::string log;
  spec.on_line = [&](int, bool, const std::string& l) {
    if (log.size() < (1u << 20)) log += l + "\n";
  };
  spec.on_message = [&](const std::string& m) { log += m + "\n"; };
  const LaunchResult lr = launch(spec);
  if (lr.timed_out) {
    fail(r, fmt::format("the tests ({}) timed out after {:.0f} s", filter, spec.timeout_s),
         "the code under test hangs or loops forever", log.substr(log.size() > 4000 ? log.size() - 4000 : 0));
    return;
  }
  if (!fs::exists(out)) {
    fail(r, fmt::format("the test binary ended without results: {}", lr.summary),
         "the code under test crashed the test program (out-of-bounds access, null tensor?)",
         log.substr(log.size() > 4000 ? log.size() - 4000 : 0));
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
    r.observed = fmt::format("the filter '{}' matches no test in {}", filter, fs::path(ctx.bin.tests).filename().string());
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
    fail(r, fmt::format("{} of {} test(s) failed", failed, tests),
         c.diagnosis.empty() ? "the exercise's contract (in the lab's header) is not met: see the failed assertions" : c.diagnosis,
         details.substr(0, 8000));
  }
}

// ---------------------------------------------------------------- run_ok

void check_run_ok(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r, true)) return;
  std::vector<std::string> seen;
  for (const auto& name : c.runs) {
    const auto& run = ctx.runs.at(name);
    for (size_t k = 0; k < run.rank.size(); ++k) {
      const auto st = run.rank[k].report->value("status", "");
      if (st != "ok") {
        fail(r, fmt::format("run '{}': rank {} reports status '{}'", name, k, st), "the run did not finish cleanly");
        return;
      }
    }
    seen.push_back(fmt::format("'{}' ({} rank(s), {:.1f} s)", name, run.ranks, run.seconds));
  }
  pass(r, "completed: " + join(seen));
}

// ---------------------------------------------------------------- phases

void check_phases(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  std::vector<std::string> phases = {"forward", "backward", "optimizer"};
  if (c.params.contains("phases")) phases = c.params["phases"].get<std::vector<std::string>>();
  const auto reps = reports(the_run(c, ctx));
  for (size_t k = 0; k < reps.size(); ++k) {
    for (const auto& p : phases) {
      const double v = field<double>(reps[k], "phases." + p, static_cast<int>(k));
      if (!(v > 0)) {
        fail(r, fmt::format("rank {}: phase '{}' has {} s", k, p, v),
             fmt::format("the {} part of the step is not timed: wrap it in timer.scope(ddplab::Phase::k{}{})", p,
                         static_cast<char>(std::toupper(p[0])), p.substr(1)));
        return;
      }
    }
  }
  const auto& p0 = reps[0]["phases"];
  pass(r, fmt::format("rank 0: forward {:.2f} s, backward {:.2f} s, optimizer {:.2f} s", p0.value("forward", 0.0),
                      p0.value("backward", 0.0), p0.value("optimizer", 0.0)));
}

// ---------------------------------------------------------------- auc

void check_auc(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& run = the_run(c, ctx);
  const EvalResult e = evaluate_saved(run.model, ctx, eval_count(c, ctx));
  r.figure = e.auc;
  const double tol = num(c, "tolerance", 0.01);
  const auto [ref, source] = reference_figure(c, ctx);
  const std::string obs = fmt::format("test AUC {:.4f} on {} samples (computed by the grader from the saved model); "
                                      "reference {:.4f} from {}, tolerance {}",
                                      e.auc, e.samples, ref, source, tol);
  if (e.auc >= ref - tol) {
    pass(r, obs);
  } else {
    fail(r, obs, c.diagnosis.empty() ? "the model learns less than the reference: check the loss, the learning rate and "
                                       "that gradients are averaged, not summed or dropped"
                                     : c.diagnosis);
  }
}

// ---------------------------------------------------------------- consistency

void check_consistency(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto reps = reports(the_run(c, ctx));
  const std::string at = text(c, "at", "both");
  if (reps.size() < 2) throw ConfigError(fmt::format("{}: consistency needs a run with 2 or more ranks", where(ctx, c)));
  std::vector<std::string> init, fin;
  for (size_t k = 0; k < reps.size(); ++k) {
    init.push_back(field<std::string>(reps[k], "params.initial_digest", static_cast<int>(k)));
    fin.push_back(field<std::string>(reps[k], "params.final_digest", static_cast<int>(k)));
  }
  for (size_t k = 1; k < reps.size(); ++k) {
    if ((at == "start" || at == "both") && init[k] != init[0]) {
      fail(r, fmt::format("parameters differ across ranks at the start: rank 0 {} vs rank {} {}", init[0], k, init[k]),
           c.diagnosis.empty() ? "initial weights not broadcast from rank 0: every rank trains its own random model" : c.diagnosis);
      return;
    }
  }
  for (size_t k = 1; k < reps.size(); ++k) {
    if ((at == "end" || at == "both") && fin[k] != fin[0]) {
      fail(r, fmt::format("parameters differ across ranks after training: rank 0 {} vs rank {} {}", fin[0], k, fin[k]),
           c.diagnosis.empty() ? "gradients are not synchronised: each rank steps on its own gradients" : c.diagnosis);
      return;
    }
  }
  pass(r, fmt::format("all {} ranks hold identical parameters {} (start {}, end {})", reps.size(),
                      at == "both" ? "at the start and the end" : "at the " + at, init[0], fin[0]));
}

// ---------------------------------------------------------------- coverage

struct EpochView {
  std::vector<uint64_t> set, order, samples, steps;
};

std::vector<EpochView> epochs_of(const std::vector<json>& reps) {
  size_t n_epochs = SIZE_MAX;
  for (const auto& rep : reps) n_epochs = std::min(n_epochs, rep.value("epochs", json::array()).size());
  std::vector<EpochView> out(n_epochs == SIZE_MAX ? 0 : n_epochs);
  for (size_t e = 0; e < out.size(); ++e) {
    for (size_t k = 0; k < reps.size(); ++k) {
      const std::string base = fmt::format("epochs.{}.", e);
      out[e].set.push_back(parse_hex(field<std::string>(reps[k], base + "set_digest", static_cast<int>(k))));
      out[e].order.push_back(parse_hex(field<std::string>(reps[k], base + "order_digest", static_cast<int>(k))));
      out[e].samples.push_back(field<uint64_t>(reps[k], base + "samples", static_cast<int>(k)));
      out[e].steps.push_back(field<uint64_t>(reps[k], base + "steps", static_cast<int>(k)));
    }
  }
  return out;
}

/// Indices a sampler reports as padded (repeated) or dropped in epoch `epoch` (report section
/// sampler.epochs[e], else sampler); at most world - 1 each. The grader checks them against the
/// digests, so a lying list cannot make a wrong epoch add up.
std::vector<uint64_t> listed(const json& rep, const char* key, size_t world, uint64_t n, size_t epoch) {
  std::vector<uint64_t> out;
  const auto s = rep.find("sampler");
  if (s == rep.end()) return out;
  const json* src = &*s;
  if (s->contains("epochs") && (*s)["epochs"].is_array() && epoch < (*s)["epochs"].size()) src = &(*s)["epochs"][epoch];
  if (!src->contains(key)) return out;
  for (const auto& v : (*src)[key]) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= n || out.size() >= world) {
      throw Error(fmt::format("report: sampler.{} is not a list of at most {} sample indices below {}", key, world - 1, n));
    }
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

void check_coverage(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& run = the_run(c, ctx);
  const auto reps = reports(run);
  const size_t world = reps.size();
  const uint64_t n = train_size(ctx, ctx.spec.run(c.runs[0]));
  const std::string expect = text(c, "expect", "partitioned");
  const bool check_order = c.params.value("check_order", true);
  const bool order_only = c.params.value("order_only", false);
  const auto epochs = epochs_of(reps);
  const size_t min_epochs = static_cast<size_t>(num(c, "min_epochs", 1));
  if (epochs.size() < min_epochs) {
    fail(r, fmt::format("{} complete epoch(s) reported, {} needed", epochs.size(), min_epochs),
         "the run ended before its epochs were done");
    return;
  }
  const uint64_t full = SampleLedger::range_set_digest(0, n);
  for (size_t e = 0; e < epochs.size() && !order_only; ++e) {
    const auto& ep = epochs[e];
    for (size_t k = 1; k < world; ++k) {
      if (ep.steps[k] != ep.steps[0]) {
        fail(r, fmt::format("epoch {}: rank {} took {} steps, rank 0 took {}", e, k, ep.steps[k], ep.steps[0]),
             "uneven shards: ranks take different step counts, so one waits at a collective for a peer that has "
             "finished (pad the tail or drop it, exercise 03.3)");
        return;
      }
    }
    if (expect == "replicated") {
      for (size_t k = 0; k < world; ++k) {
        if (ep.set[k] != full || ep.samples[k] != n) {
          fail(r, fmt::format("epoch {}: rank {} saw {} samples, not the whole data set of {}", e, k, ep.samples[k], n),
               "every rank of this lab iterates the whole data set");
          return;
        }
      }
      continue;
    }
    // Partitioned: together the ranks see [0, n) exactly once, up to the documented padding.
    bool all_same = world > 1;
    for (size_t k = 1; k < world; ++k) all_same = all_same && ep.order[k] == ep.order[0];
    if (all_same) {
      fail(r, fmt::format("epoch {}: ranks 0 and 1 processed identical batches ({} samples each)", e, ep.samples[0]),
           "no sampler: every rank iterates the whole data set in the same order, so N processes do the work of one "
           "(shard the indices, exercise 03.1)");
      return;
    }
    const auto padded = listed(reps[0], "padded_indices", world, n, e);
    const auto dropped = listed(reps[0], "dropped_indices", world, n, e);
    uint64_t expect_digest = full, expect_samples = n;
    for (auto i : padded) expect_digest += SampleLedger::hash(i), ++expect_samples;
    for (auto i : dropped) expect_digest -= SampleLedger::hash(i), --expect_samples;
    uint64_t digest = 0, samples = 0;
    for (size_t k = 0; k < world; ++k) digest += ep.set[k], samples += ep.samples[k];
    if (digest != expect_digest || samples != expect_samples) {
      std::string why;
      if (samples > expect_samples) {
        why = "samples seen more than once across ranks: the shards overlap (exercise 03.1)";
      } else if (samples < expect_samples) {
        why = "samples never seen in the epoch: the shards do not cover the data set (exercise 03.1, or a tail "
              "dropped without reporting it, 03.3)";
      } else {
        why = "the right number of samples but not the right ones: some seen twice and others never (exercise 03.1)";
      }
      fail(r, fmt::format("epoch {}: the ranks saw {} samples in all, {} expected ({} + {} padded - {} dropped), and "
                          "their set digests do not add up to [0, {})",
                          e, samples, expect_samples, n, padded.size(), dropped.size(), n),
           why);
      return;
    }
  }
  if (order_only && epochs.size() < 2) {
    throw ConfigError(fmt::format("{}: order_only needs a run of 2 or more epochs (min_epochs = 2)", where(ctx, c)));
  }
  if (check_order && epochs.size() >= 2) {
    for (size_t k = 0; k < world; ++k) {
      if (epochs[0].order[k] == epochs[1].order[k]) {
        fail(r, fmt::format("rank {} visited its samples in the same order in epoch 0 and 1", k),
             "same order in every epoch: set_epoch not called, or the shuffle ignores the epoch (exercise 03.2)");
        return;
      }
    }
  }
  if (order_only) {
    pass(r, fmt::format("every rank visited its samples in a new order in each of {} epochs", epochs.size()));
  } else if (expect == "replicated") {
    pass(r, fmt::format("each of the {} ranks processed all {} samples in every epoch: {} processed per epoch for {} unique",
                        world, n, world * n, n));
  } else {
    pass(r, fmt::format("{} epoch(s): every sample of [0, {}) seen exactly once across {} ranks (+ documented padding), "
                        "equal step counts{}",
                        epochs.size(), n, world, check_order && epochs.size() >= 2 ? ", a new order each epoch" : ""));
  }
}

// ---------------------------------------------------------------- parity

void check_parity(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (c.runs.size() != 2) throw ConfigError(fmt::format("{}: parity needs runs = [single, multi]", where(ctx, c)));
  if (!runs_usable(c, ctx, r)) return;
  const auto& one = the_run(c, ctx, 0);
  const auto& many = the_run(c, ctx, 1);
  const double loss_tol = num(c, "loss_tolerance", 0.02);
  const double auc_tol = num(c, "auc_tolerance", 0.01);
  // Mean loss per step over ranks vs the single process's loss.
  const auto ones = reports(one), manys = reports(many);
  const auto l1 = ones[0]["steps"]["loss"];
  double worst = 0;
  size_t worst_step = 0;
  const size_t steps = l1.size();
  for (size_t k = 0; k < manys.size(); ++k) {
    if (manys[k]["steps"]["loss"].size() != steps) {
      fail(r, fmt::format("{} ranks took {} steps, one process took {}", many.ranks, manys[k]["steps"]["loss"].size(), steps),
           "the ranks do not split each global batch: with N ranks x batch B, every rank takes the steps one process "
           "takes at batch N x B");
      return;
    }
  }
  for (size_t s = 0; s < steps; ++s) {
    double mean = 0;
    for (const auto& rep : manys) mean += rep["steps"]["loss"][s].get<double>();
    mean /= static_cast<double>(manys.size());
    const double d = std::abs(mean - l1[s].get<double>());
    if (d > worst) worst = d, worst_step = s;
  }
  const uint64_t count = eval_count(c, ctx);
  const EvalResult a1 = evaluate_saved(one.model, ctx, count), aN = evaluate_saved(many.model, ctx, count);
  r.figure = aN.auc - a1.auc;
  const std::string obs = fmt::format("{} ranks vs 1 process at the same global batch: largest per-step loss gap {:.2e} "
                                      "(step {}, tolerance {}), test AUC {:.4f} vs {:.4f} (tolerance {})",
                                      many.ranks, worst, worst_step, loss_tol, aN.auc, a1.auc, auc_tol);
  if (worst <= loss_tol && std::abs(aN.auc - a1.auc) <= auc_tol) {
    pass(r, obs);
  } else {
    fail(r, obs, c.diagnosis.empty() ? "the ranks do not train the model one process trains: gradients summed instead of "
                                       "averaged, a rank skipping the sync, or batches that are not one global batch"
                                     : c.diagnosis);
  }
}

// ---------------------------------------------------------------- utilization

void check_utilization(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto reps = reports(the_run(c, ctx));
  double worst = 1.0;
  int worst_rank = 0;
  for (size_t k = 0; k < reps.size(); ++k) {
    const double wall = field<double>(reps[k], "phases.wall", static_cast<int>(k));
    const double busy = wall > 0 ? field<double>(reps[k], "phases.compute", static_cast<int>(k)) / wall : 0;
    if (busy < worst) worst = busy, worst_rank = static_cast<int>(k);
  }
  r.figure = worst;
  const double min_busy = num(c, "min_busy", 0.5);
  const std::string obs = fmt::format("busy fraction (compute / wall from the phase timers) {:.1f}% on rank {} (lowest), "
                                      "required >= {:.0f}%",
                                      100 * worst, worst_rank, 100 * min_busy);
  if (worst >= min_busy) {
    pass(r, obs);
  } else {
    fail(r, obs, c.diagnosis.empty() ? "the device idles: waiting for data (no prefetch) or for communication" : c.diagnosis);
  }
}

// ---------------------------------------------------------------- scaling

/// Unique samples per second of a run: the distinct samples the ranks saw (from the digests, so a
/// run without a sampler counts one copy) over the slowest rank's training time.
double unique_rate(const RunOutcome& run, uint64_t n) {
  const auto reps = reports(run);
  const auto epochs = epochs_of(reps);
  double wall = 0;
  for (size_t k = 0; k < reps.size(); ++k) wall = std::max(wall, field<double>(reps[k], "phases.wall", static_cast<int>(k)));
  uint64_t unique = 0;
  const uint64_t full = SampleLedger::range_set_digest(0, n);
  for (const auto& ep : epochs) {
    uint64_t digest = 0, samples = 0, max_one = 0;
    bool replicated = true;
    for (size_t k = 0; k < ep.set.size(); ++k) {
      digest += ep.set[k], samples += ep.samples[k], max_one = std::max(max_one, ep.samples[k]);
      replicated = replicated && ep.set[k] == ep.set[0];
    }
    if (digest == full) {
      unique += n;
    } else if (replicated) {
      unique += max_one;  // every rank saw the same samples: one copy is unique
    } else {
      unique += std::min<uint64_t>(samples, n);
    }
  }
  return wall > 0 ? static_cast<double>(unique) / wall : 0;
}

void check_scaling(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (c.runs.size() != 2) throw ConfigError(fmt::format("{}: scaling needs runs = [one_rank, n_ranks]", where(ctx, c)));
  if (!runs_usable(c, ctx, r)) return;
  const auto& one = the_run(c, ctx, 0);
  const auto& many = the_run(c, ctx, 1);
  const double r1 = unique_rate(one, train_size(ctx, ctx.spec.run(c.runs[0])));
  const double rN = unique_rate(many, train_size(ctx, ctx.spec.run(c.runs[1])));
  const double eff = r1 > 0 ? rN / (r1 * many.ranks) : 0;
  r.figure = eff;
  const auto [ref, source] = reference_figure(c, ctx);
  const double rel = num(c, "min_relative", 0.8);
  const std::string obs = fmt::format("unique samples/s: {:.0f} on 1 rank, {:.0f} on {} ranks -> efficiency {:.3f}; "
                                      "reference {:.3f} from {}; required >= {:.0f}% of it",
                                      r1, rN, many.ranks, eff, ref, source, 100 * rel);
  if (eff >= ref * rel) {
    pass(r, obs);
  } else {
    fail(r, obs, c.diagnosis.empty() ? "more ranks do not process more unique samples: ranks repeating each other's work "
                                       "(no sampler), or communication that dominates the step"
                                     : c.diagnosis);
  }
}

// ---------------------------------------------------------------- comm_budget

void check_comm_budget(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto reps = reports(the_run(c, ctx));
  const std::string op = text(c, "op", "allreduce");
  const double max_calls = num(c, "max_calls_per_step", 1e18), max_bytes = num(c, "max_bytes_per_step", 1e18);
  const double min_bytes = num(c, "min_bytes_per_step", 0);
  std::string obs;
  for (size_t k = 0; k < reps.size(); ++k) {
    const double steps = std::max(1.0, field<double>(reps[k], "phases.steps", static_cast<int>(k)));
    const auto ops = reps[k].value("comm", json::object()).value("ops", json::object());
    const auto s = ops.value(op, json::object());
    const double calls = s.value("calls", 0.0) / steps, bytes = s.value("bytes", 0.0) / steps;
    if (k == 0) obs = fmt::format("rank 0: {:.1f} {} call(s) and {:.2f} MB per step", calls, op, bytes / 1e6);
    if (calls > max_calls || bytes > max_bytes) {
      fail(r, fmt::format("rank {}: {:.1f} {} call(s), {:.2f} MB per step; budget {} calls, {:.2f} MB", k, calls, op,
                          bytes / 1e6, max_calls, max_bytes / 1e6),
           c.diagnosis.empty() ? "more communication than the exercise needs" : c.diagnosis);
      return;
    }
    if (bytes < min_bytes) {
      fail(r, fmt::format("rank {}: {:.2f} MB of {} per step, less than the {:.2f} MB the gradients take", k, bytes / 1e6, op,
                          min_bytes / 1e6),
           c.diagnosis.empty() ? "not every gradient is synchronised" : c.diagnosis);
      return;
    }
  }
  pass(r, obs);
}

// ---------------------------------------------------------------- output

void check_output(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& run = the_run(c, ctx);
  std::ifstream in(fs::path(run.dir) / "output.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string out = ss.str();
  std::vector<std::string> patterns;
  if (c.params.contains("regex")) patterns = c.params["regex"].get<std::vector<std::string>>();
  for (const auto& p : patterns) {
    std::regex re;
    try {
      re = std::regex(p);
    } catch (const std::regex_error& e) {
      throw ConfigError(fmt::format("{}: bad regex '{}': {}", where(ctx, c), p, e.what()));
    }
    if (!std::regex_search(out, re)) {
      fail(r, fmt::format("the output of run '{}' has no line matching /{}/", c.runs[0], p),
           c.diagnosis.empty() ? "the program does not print the figure the lab asks for" : c.diagnosis);
      return;
    }
  }
  pass(r, fmt::format("the output shows all {} required line(s)", patterns.size()));
}

}  // namespace

const std::vector<std::pair<std::string, CheckFn>>& check_registry() {
  static const std::vector<std::pair<std::string, CheckFn>> kinds = {
      {"unit_tests", check_unit_tests},   {"run_ok", check_run_ok},         {"phases", check_phases},
      {"auc", check_auc},                 {"consistency", check_consistency}, {"coverage", check_coverage},
      {"parity", check_parity},           {"utilization", check_utilization}, {"scaling", check_scaling},
      {"comm_budget", check_comm_budget}, {"output", check_output},
  };
  return kinds;
}

namespace {

/// The plug-in of `spec`'s kind; a ConfigError naming the spec line and the known kinds if none.
const CheckFn& find_kind(const LabSpec& lab, const CheckSpec& spec) {
  for (const auto& [name, fn] : check_registry()) {
    if (name == spec.kind) return fn;
  }
  std::string known;
  for (const auto& [name, fn] : check_registry()) known += (known.empty() ? "" : ", ") + name;
  throw ConfigError(fmt::format("{}:{}: unknown check kind '{}' (known: {})", lab.path, spec.line, spec.kind, known));
}

}  // namespace

void validate_check(const LabSpec& lab, const CheckSpec& spec) { find_kind(lab, spec); }

CheckResult result_of(const CheckSpec& spec) {
  CheckResult r;
  r.name = spec.name;
  r.kind = spec.kind;
  r.exercise = spec.exercise;
  r.visibility = spec.visibility;
  r.max_score = spec.points;
  return r;
}

CheckResult run_check(const CheckSpec& spec, GradeContext& ctx) {
  CheckResult r = result_of(spec);
  const CheckFn& fn = find_kind(ctx.spec, spec);
  try {
    fn(spec, ctx, r);
  } catch (const ConfigError&) {
    throw;  // a spec problem is the instructor's to fix: stop loudly
  } catch (const std::exception& e) {
    // Anything else comes from what the student's program left behind (garbage report, missing
    // model): a failed check with the reason, never a pass and never a grader crash.
    fail(r, e.what(), "the run's outputs are missing or malformed");
  }
  r.score = r.status == Status::kPassed ? r.max_score : 0.0;
  return r;
}

}  // namespace ddplab::grader

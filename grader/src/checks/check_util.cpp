// The helpers every check kind shares (check_util.h). The only check source that includes
// LibTorch: the saved model's evaluation and the runtime's sample digests live here.
#include "check_util.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include <torch/torch.h>

#include "ddplab/data/shard.h"
#include "ddplab/deepfm.h"
#include "ddplab/evaluate.h"
#include "ddplab/report.h"

namespace fs = std::filesystem;

namespace ddplab::grader::checks {
namespace {

/// The first line of an error message (c10 appends a C++ backtrace).
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

std::string where(const GradeContext& ctx, const CheckSpec& c) {
  return fmt::format("{}:{} ({})", ctx.spec.path, c.line, c.name);
}

void fail(CheckResult& r, std::string observed, std::string diagnosis, std::string details) {
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

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

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

std::string out_of_step_line(const std::string& log) {
  const auto at = log.find("collectives out of step at #");
  if (at == std::string::npos) return "";
  const auto end = log.find_first_of("(\n", at);
  std::string s = log.substr(at, end == std::string::npos ? std::string::npos : end - at);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

namespace {

/// The first rank's own error message ("rank 1: ..."), preferring one that is not a collective
/// timeout (a peer's timeout is the consequence, a rank's own error the cause); "" if none.
std::string rank_error(const RunOutcome& run, bool allow_timeout) {
  for (size_t k = 0; k < run.rank.size(); ++k) {
    const auto& rep = run.rank[k].report;
    if (rep && rep->is_object() && rep->value("status", "") == "error") {
      const std::string message = first_line(rep->value("message", "error")), own = fmt::format("rank {}: ", k);
      if (!allow_timeout && message.find("did not complete within") != std::string::npos) continue;
      return message.rfind(own, 0) == 0 ? message : own + message;  // not "rank 1: rank 1: ..."
    }
  }
  return "";
}

}  // namespace

std::string failure_cause(const RunOutcome& run) {
  std::string cause = rank_error(run, false);
  if (cause.empty()) cause = rank_error(run, true);
  return cause.empty() ? run.summary : cause;
}

std::string failure_diagnosis(const RunOutcome& run, const GradeContext& ctx) {
  const std::string& log = run.log_tail;
  if (log.find("bad_alloc") != std::string::npos || log.find("can't allocate memory") != std::string::npos ||
      log.find("Cannot allocate memory") != std::string::npos) {
    return fmt::format("ran out of memory (the grader allows {:.0f} MiB per rank)", ctx.spec.memory_limit_mb);
  }
  if (const std::string step = out_of_step_line(log); !step.empty()) {
    return "the ranks called different collectives (a rank skipped one or called another in its place): " + step;
  }
  if (!stall_line(log).empty()) {
    return "a collective timed out (a rank skipped it or called a different one): " + stall_line(log);
  }
  // LibTorch's words for an operation on a default-constructed torch::Tensor, in its messages and
  // the kit's ("Undefined tensor is not allowed", "expected a defined Tensor", "an undefined tensor").
  static const std::regex undefined_re("[Uu]ndefined [Tt]ensor|not a defined [Tt]ensor|expected a defined [Tt]ensor");
  if (std::regex_search(log, undefined_re) || std::regex_search(failure_cause(run), undefined_re)) {
    return "a rank used an undefined torch::Tensor: one that was never assigned (a value not read back from a file, "
           "not returned, or moved from)";
  }
  if (run.summary.find("SIG") != std::string::npos) {
    return "a rank crashed: an out-of-bounds access, a null or undefined tensor, or an uncaught signal";
  }
  return "the program failed: see the log below";
}

bool runs_usable(const CheckSpec& c, GradeContext& ctx, CheckResult& r, bool need_ok) {
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
      r.diagnosis =
          fmt::format("exercise {} still throws NotImplemented: implement its STUDENT CODE region", c.exercise);
      return false;
    }
    if (run.timed_out) {
      const std::string stall = stall_line(run.log_tail);
      fail(r, fmt::format("run '{}' ({} ranks) timed out: {}", name, run.ranks, run.summary),
           stall.empty()
               ? "the program hangs or loops: a rank waits in a collective its peers never enter, or a loop never ends"
               : "a collective did not complete: " + stall,
           run.log_tail);
      return false;
    }
    if (run.expect_failure) {
      // Meant to stop with an error: a stub reached first is still "not attempted", a finished
      // run is the failure, and an error of its own makes it usable (its reports may be missing:
      // fail-fast stops the peers of the failing rank).
      if (run.exit_code == kExitNotAttempted || !run.not_attempted.empty()) {
        r.status = Status::kNotAttempted;
        r.observed = fmt::format("run '{}' stopped at exercise(s) not attempted: {}", name, join(run.not_attempted));
        r.diagnosis = "implement the exercises listed";
        return false;
      }
      if (run.exit_code == 0) {
        fail(r, fmt::format("run '{}' was expected to stop with an error but finished", name),
             c.diagnosis_given ? c.diagnosis
                               : "the program should have stopped with an error here: the failure this run provokes "
                                 "went undetected",
             run.log_tail);
        return false;
      }
      if (run.rank.empty()) {
        fail(r, fmt::format("run '{}': no rank's outcome was recorded", name), "the run did not start", run.log_tail);
        return false;
      }
      continue;
    }
    if (run.exit_code == kExitNotAttempted) {
      if (need_ok || c.exercise.empty()) {
        r.status = Status::kNotAttempted;
        r.observed = fmt::format("run '{}' stopped at exercise(s) not attempted: {}", name, join(run.not_attempted));
        r.diagnosis = "implement the exercises listed";
        return false;
      }
    } else if (run.exit_code != 0) {
      std::string diagnosis = failure_diagnosis(run, ctx);
      const bool stalled = diagnosis.rfind("a collective timed out", 0) == 0;
      const std::string own = rank_error(run, false);  // a rank that failed on its own, not by timing out
      if (stalled && !own.empty()) {
        diagnosis = "a rank stopped with the error above, and its peers then timed out waiting for it: " +
                    stall_line(run.log_tail);
      }
      fail(r,
           fmt::format("run '{}' failed: {}", name,
                       stalled && own.empty() ? "a collective timed out" : failure_cause(run)),
           diagnosis, run.log_tail);
      return false;
    }
    if (run.rank.empty()) {
      fail(r, fmt::format("run '{}': no rank's outcome was recorded", name), "the run did not start", run.log_tail);
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

const RunOutcome& the_run(const CheckSpec& c, const GradeContext& ctx, size_t i) { return ctx.runs.at(c.runs.at(i)); }

std::vector<json> reports(const RunOutcome& run) {
  std::vector<json> out;
  for (const auto& r : run.rank) {
    if (!r.report) throw Error(fmt::format("run '{}': {}", run.name, r.report_error));
    out.push_back(*r.report);
  }
  return out;
}

const json* find_field(const json& node, const std::string& path) {
  const json* j = &node;
  std::istringstream in(path);
  std::string key;
  while (std::getline(in, key, '.')) {
    if (j->is_array()) {
      const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
      if (!digits || std::stoul(key) >= j->size()) return nullptr;
      j = &(*j)[std::stoul(key)];
    } else if (j->is_object()) {
      const auto it = j->find(key);
      if (it == j->end()) return nullptr;
      j = &*it;
    } else {
      return nullptr;
    }
  }
  return j;
}

const json& field_node(const json& rep, const std::string& path, int rank) {
  const json* j = find_field(rep, path);
  if (j == nullptr) throw Error(fmt::format("rank {}'s report has no {}", rank, path));
  return *j;
}

uint64_t train_size(const GradeContext& ctx, const std::string& run_name) {
  const auto& args = ctx.runs.at(run_name).args;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--train-samples") return std::stoull(args[i + 1]);
  }
  return data::read_metadata(ctx.runs.at(run_name).data_dir).train_count;
}

uint64_t eval_count(int64_t eval_samples, const std::string& data_dir) {
  const uint64_t all = data::read_metadata(data_dir).test_count;
  return eval_samples > 0 ? std::min(all, static_cast<uint64_t>(eval_samples)) : all;
}

ModelScore evaluate_saved(const std::string& path, const std::string& data_dir, uint64_t count) {
  if (path.empty() || !fs::exists(path)) throw Error("the run saved no model (rank 0 must write --save-model)");
  DeepFM model;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    model->load(archive);
  } catch (const std::exception& e) {
    throw Error(fmt::format("the saved model {} cannot be loaded as the course's DeepFM: {}", path, e.what()));
  }
  const data::Dataset test(data_dir, data::Split::kTest);
  torch::NoGradGuard ng;
  const auto e = evaluate_model(model, test, std::min<uint64_t>(count, test.size()), 4096, torch::kCPU);
  return {e.auc, e.samples};
}

namespace {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// Every tensor of `archive` and of the archives nested in it, with dotted names. Attributes that
/// are neither (a module's `training` flag, say) are skipped.
void collect_tensors(torch::serialize::InputArchive& archive, const std::string& prefix, NamedTensors& out) {
  for (const auto& key : archive.keys()) {
    c10::IValue value;
    if (!archive.try_read(key, value)) continue;
    if (value.isTensor()) {
      out.emplace_back(prefix + key, value.toTensor());
    } else if (value.isObject()) {
      torch::serialize::InputArchive child;
      if (archive.try_read(key, child)) collect_tensors(child, prefix + key + ".", out);
    }
  }
}

NamedTensors load_tensors(const std::string& path) {
  if (path.empty() || !fs::exists(path)) throw Error(fmt::format("no saved model at {}", path));
  NamedTensors out;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    collect_tensors(archive, "", out);
  } catch (const std::exception& e) {
    throw Error(fmt::format("the saved model {} cannot be read: {}", path, first_line(e.what())));
  }
  return out;
}

}  // namespace

ModelDiff compare_saved_models(const std::string& oracle, const std::string& candidate) {
  const NamedTensors a = load_tensors(oracle), b = load_tensors(candidate);
  ModelDiff d;
  const auto find = [](const NamedTensors& t, const std::string& name) {
    return std::find_if(t.begin(), t.end(), [&](const auto& e) { return e.first == name; });
  };
  for (const auto& [name, t] : b) {
    if (find(a, name) == a.end()) d.only_candidate.push_back(name);
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, ta] : a) {
    const auto it = find(b, name);
    if (it == b.end()) {
      d.only_oracle.push_back(name);
      continue;
    }
    const torch::Tensor& tb = it->second;
    TensorDiff t;
    t.name = name;
    t.oracle_shape = ta.sizes().vec();
    t.candidate_shape = tb.sizes().vec();
    t.numel = static_cast<uint64_t>(ta.numel());
    try {
      const torch::Tensor x = ta.to(torch::kCPU, torch::kDouble), y = tb.to(torch::kCPU, torch::kDouble);
      t.oracle_norm = x.norm().item<double>();
      t.candidate_norm = y.norm().item<double>();
      if (t.same_shape() && t.numel > 0) t.max_abs_diff = (y - x).abs().max().item<double>();
    } catch (const std::exception& e) {
      throw Error(fmt::format("tensor {} of the saved models cannot be compared: {}", name, first_line(e.what())));
    }
    d.tensors.push_back(std::move(t));
  }
  return d;
}

std::pair<double, std::string> reference_figure(const CheckSpec& c, const GradeContext& ctx) {
  if (auto v = ctx.calibration.get(ctx.spec.id, c.id)) return {*v, "the reference solution on this machine"};
  const auto it = c.params.find("reference");
  if (it == c.params.end() || !it->is_number()) {
    throw ConfigError(
        fmt::format("{}: no calibration on this machine and no 'reference' value in the spec", where(ctx, c)));
  }
  return {it->get<double>(), "the spec's reference value (uncalibrated machine)"};
}

std::vector<EpochView> epochs_of(const std::vector<json>& reps) {
  size_t n_epochs = SIZE_MAX;
  for (size_t k = 0; k < reps.size(); ++k) {
    const json& epochs = reps[k].is_object() && reps[k].contains("epochs") ? reps[k]["epochs"] : json::array();
    if (!epochs.is_array()) throw Error(fmt::format("rank {}'s report: epochs has the wrong type", k));
    n_epochs = std::min(n_epochs, epochs.size());
  }
  std::vector<EpochView> out(n_epochs == SIZE_MAX ? 0 : n_epochs);
  for (size_t e = 0; e < out.size(); ++e) {
    for (size_t k = 0; k < reps.size(); ++k) {
      const int rank = static_cast<int>(k);
      const std::string base = fmt::format("epochs.{}.", e);
      out[e].set.push_back(parse_hex64(field<std::string>(reps[k], base + "set_digest", rank), base + "set_digest"));
      out[e].order.push_back(
          parse_hex64(field<std::string>(reps[k], base + "order_digest", rank), base + "order_digest"));
      out[e].samples.push_back(field<uint64_t>(reps[k], base + "samples", rank));
      out[e].steps.push_back(field<uint64_t>(reps[k], base + "steps", rank));
      append_seen(reps[k]["epochs"][e], fmt::format("rank {}'s report: {}seen", rank, base), out[e].seen);
    }
  }
  return out;
}

bool phase_timers_consistent(const std::vector<json>& reps, CheckResult& r) {
  for (size_t k = 0; k < reps.size(); ++k) {
    const int rank = static_cast<int>(k);
    const double wall = field<double>(reps[k], "phases.wall", rank);
    double timed = 0;
    for (const char* p : {"forward", "backward", "optimizer", "comm", "data_wait"}) {
      const json& phases = reps[k].at("phases");
      if (phases.contains(p) && phases[p].is_number()) timed += phases[p].get<double>();
    }
    if (timed > wall * 1.02 + 0.005) {
      fail(r,
           fmt::format("rank {}: the timed phases add up to {:.3f} s, more than the run's wall time {:.3f} s "
                       "(busy fraction {:.0f}%)",
                       k, timed, wall, wall > 0 ? 100 * field<double>(reps[k], "phases.compute", rank) / wall : 0.0),
           "timer scopes overlap (a scope opened inside another, or one part of the step timed twice), so the "
           "phase times and the busy fraction are not measurements: give each part of the step exactly one "
           "timer.scope");
      return false;
    }
  }
  return true;
}

uint64_t range_digest(uint64_t n) { return SampleLedger::range_set_digest(0, n); }
uint64_t index_digest(uint64_t index) { return SampleLedger::hash(index); }

UniqueRate unique_rate(const RunOutcome& run, uint64_t n) {
  const auto reps = reports(run);
  const auto epochs = epochs_of(reps);
  double wall = 0;
  for (size_t k = 0; k < reps.size(); ++k) {
    wall = std::max(wall, field<double>(reps[k], "phases.wall", static_cast<int>(k)));
  }
  UniqueRate u;
  for (const auto& ep : epochs) {
    const EpochUnique e = epoch_unique_samples(ep.set, ep.samples, n, ep.seen);
    u.unique += e.unique;
    u.exact = u.exact && e.exact;
    u.replicated = u.replicated || e.replicated;
    for (uint64_t s : ep.samples) u.processed += s;
  }
  u.rate = wall > 0 ? static_cast<double>(u.unique) / wall : 0;
  return u;
}

}  // namespace ddplab::grader::checks

namespace ddplab::grader::checks {

std::string runs_save_models(const CheckSpec& c, const LabSpec& lab) {
  for (const auto& name : c.runs) {
    if (!lab.run(name).save_model) {
      return fmt::format("run '{}' must save its model for the grader to evaluate (save_model = true)", name);
    }
  }
  return "";
}

}  // namespace ddplab::grader::checks

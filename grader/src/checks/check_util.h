// What every check kind shares: judging whether the runs it reads are usable (and why not),
// reading report fields, the per-epoch sample digests, the grader's own evaluation of a saved
// model, calibrated reference figures, and setting the result. Free of LibTorch headers, so the
// kind files compile without the precompiled header.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ddplab/error.h"
#include "ddplab/grader/checks.h"

namespace ddplab::grader::checks {

using nlohmann::json;

/// "grade.toml:52 (check name)", for ConfigErrors raised while grading.
std::string where(const GradeContext& ctx, const CheckSpec& c);

void fail(CheckResult& r, std::string observed, std::string diagnosis, std::string details = "");
void pass(CheckResult& r, std::string observed);
std::string join(const std::vector<std::string>& v, const char* sep = ", ");
/// An integer with thousands separators: "1,286,404".
std::string grouped(uint64_t n);

/// The runtime's stall diagnosis (dist/process_group.h) a rank printed when a collective timed
/// out ("rank 0 ... allreduce #12 ... did not complete within ..."), or "".
std::string stall_line(const std::string& log);

/// The mpi backend's check that every rank entered the same collective (dist/mpi_backend.h):
/// "collectives out of step at #13: rank 0 allreduce float[2678304]; rank 1 allgather long[2]", or "".
std::string out_of_step_line(const std::string& log);

/// Checks that the runs a check reads completed well enough to be judged, and explains why not
/// (sets r). `need_ok`: the check needs a complete run (no exercise may be missing). A run with
/// expect_failure is usable when it exited non-zero on its own (not timed out, no exercise not
/// attempted), its reports then optional; finishing (exit 0) fails the check.
bool runs_usable(const CheckSpec& c, GradeContext& ctx, CheckResult& r, bool need_ok = false);

/// Why a run that exited non-zero failed: the first rank reporting status error ("rank 1: <the
/// first line of its message>"), else the launcher's summary.
std::string failure_cause(const RunOutcome& run);

/// The likely cause of a run that exited non-zero, from its log and summary: out of memory, a
/// collective that timed out (with the stall line), a crash, or "see the log".
std::string failure_diagnosis(const RunOutcome& run, const GradeContext& ctx);

/// The i-th run the check reads.
const RunOutcome& the_run(const CheckSpec& c, const GradeContext& ctx, size_t i = 0);
/// The ranks' reports of a usable run; throws Error naming a rank that wrote none (possible only
/// in a run with expect_failure).
std::vector<json> reports(const RunOutcome& run);

/// The phase timers are trusted only when they are consistent: on every rank the timed phases
/// (forward, backward, optimizer, comm, data_wait) add up to at most the run's wall time (2 % and
/// 5 ms of slack for the clock reads). Otherwise fails `r` naming the rank and the two figures,
/// with the overlapping-scopes diagnosis, and returns false.
bool phase_timers_consistent(const std::vector<json>& reps, CheckResult& r);

/// The node at a dotted path into `node` ("phases.wall", "epochs.0.samples": object keys and array
/// indices), or nullptr where there is none.
const json* find_field(const json& node, const std::string& path);
/// A report field the grader needs ("phases.wall", "epochs.0.samples"); a missing or mistyped one
/// throws Error (the check then fails: the outputs are malformed).
const json& field_node(const json& rep, const std::string& path, int rank);
template <typename T>
T field(const json& rep, const std::string& path, int rank) {
  const json& j = field_node(rep, path, rank);
  try {
    return j.get<T>();
  } catch (const std::exception&) {
    throw Error(fmt::format("rank {}'s report: {} has the wrong type", rank, path));
  }
}

/// Training samples of a run: its --train-samples if given, else the data set's.
uint64_t train_size(const GradeContext& ctx, const std::string& run_name);
/// Test samples to evaluate on: `eval_samples` (0: all) capped to those of the data set in `data_dir`.
uint64_t eval_count(int64_t eval_samples, const std::string& data_dir);

/// The grader's own test metrics of a saved model (never the report's).
struct ModelScore {
  double auc = 0;
  uint64_t samples = 0;
};
/// Loads `path` as the course's DeepFM and evaluates it on `count` test samples; throws Error if
/// the run saved no model or it cannot be loaded.
ModelScore evaluate_saved(const std::string& path, const std::string& data_dir, uint64_t count);

/// One tensor of two saved models, compared element by element.
struct TensorDiff {
  std::string name;  ///< dotted, as named_parameters() gives it ("mlp.0.weight")
  std::vector<int64_t> oracle_shape, candidate_shape;
  uint64_t numel = 0;
  double max_abs_diff = 0;  ///< max |candidate - oracle| (NaN if a value is NaN; 0 if the shapes differ)
  double oracle_norm = 0, candidate_norm = 0;  ///< L2 norms
  bool same_shape() const { return oracle_shape == candidate_shape; }
};
/// Two saved models compared key by key.
struct ModelDiff {
  std::vector<std::string> only_oracle, only_candidate;  ///< keys one file lacks
  std::vector<TensorDiff> tensors;                       ///< the keys both hold, in the oracle's order
};
/// Reads every tensor of two archives saved with torch::serialize::OutputArchive (a module's
/// save(): its nested archives give dotted keys), whatever model wrote them, and compares them.
/// Throws Error if a file is missing or is not such an archive.
ModelDiff compare_saved_models(const std::string& oracle, const std::string& candidate);

/// A figure relative to the reference: calibrated on this machine if available (keyed by the
/// check's id), else the spec's `reference` parameter; with where it came from.
std::pair<double, std::string> reference_figure(const CheckSpec& c, const GradeContext& ctx);

/// One epoch of a run as the ranks' reports give it: per rank, the sample-set digest, the order
/// digest, the samples and the steps.
struct EpochView {
  std::vector<uint64_t> set, order, samples, steps;
  /// The bitmaps of the sample indices the ranks saw (SampleLedger::seen), of the ranks whose
  /// report carries one; epoch_unique_samples counts with them only when every rank's does.
  std::vector<std::vector<uint64_t>> seen;
};
/// The epochs every rank completed.
std::vector<EpochView> epochs_of(const std::vector<json>& reps);
/// The set digest of [0, n), and of one index, as the ranks' ledgers compute them.
uint64_t range_digest(uint64_t n);
uint64_t index_digest(uint64_t index);

/// Unique samples per second of a run of `n` training samples: the distinct samples the ranks saw
/// (exactly, from the ranks' bitmaps where the reports carry them; else from the digests, so a run
/// without a sampler counts one copy) over the slowest rank's time; with the counts behind it.
struct UniqueRate {
  double rate = 0;
  uint64_t unique = 0, processed = 0;
  bool exact = true;
  bool replicated = false;  ///< in some epoch every rank saw the same samples (no sampler)
};
UniqueRate unique_rate(const RunOutcome& run, uint64_t n);

}  // namespace ddplab::grader::checks

namespace ddplab::grader::checks {

// The descriptors, each defined at the end of its kind's file and listed in registry.cpp.
extern const CheckKind kUnitTests, kRunOk, kPhases, kUtilization, kAuc, kConsistency, kCoverage, kParity, kScaling,
    kCommBudget, kOutput, kSameModel, kGradSync, kExposedComm, kDataWait, kSameOrder, kCost, kVerdict;

/// A rule for CheckKind::rules: every run the check reads saves its model (save_model = true).
std::string runs_save_models(const CheckSpec& c, const LabSpec& lab);

}  // namespace ddplab::grader::checks

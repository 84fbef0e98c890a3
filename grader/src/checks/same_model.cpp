// Check kind `same_model`: the candidate run trains the oracle's model, parameter for parameter.
// Both runs save their models; the grader reads every tensor of both files (whatever model wrote
// them: DeepFM, or DeepFM with extra parameters) and compares them element by element.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "check_util.h"

namespace fs = std::filesystem;

namespace ddplab::grader::checks {
namespace {

const char* kStructure =
    "the two runs saved different models (parameter names or shapes differ): the candidate must train the oracle's "
    "model";

std::string shape_text(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

/// ||candidate|| / ||oracle|| of one tensor, as text.
std::string norm_ratio(const TensorDiff& t) {
  if (t.oracle_norm > 0) return fmt::format("{:.6g}", t.candidate_norm / t.oracle_norm);
  return t.candidate_norm > 0 ? "inf (the oracle's is 0)" : "1 (both 0)";
}

/// NaN sorts above every number: a NaN parameter is the worst difference.
bool worse(const TensorDiff& a, const TensorDiff& b) {
  if (std::isnan(a.max_abs_diff)) return !std::isnan(b.max_abs_diff);
  return !std::isnan(b.max_abs_diff) && a.max_abs_diff > b.max_abs_diff;
}

void check_same_model(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& oracle = the_run(c, ctx, 0);
  const auto& candidate = the_run(c, ctx, 1);
  for (const RunOutcome* run : {&oracle, &candidate}) {
    if (run->model.empty() || !fs::exists(run->model)) {
      throw Error(fmt::format("run '{}' saved no model (rank 0 must write --save-model)", run->name));
    }
  }
  const double tol = c.number("tolerance");
  const ModelDiff d = compare_saved_models(oracle.model, candidate.model);
  const std::string both = fmt::format("(oracle: run '{}', candidate: run '{}')", oracle.name, candidate.name);
  if (!d.only_oracle.empty()) {
    fail(r,
         fmt::format("the candidate's model lacks parameter '{}' of the oracle's{} {}", d.only_oracle[0],
                     d.only_oracle.size() > 1 ? fmt::format(" (and {} more)", d.only_oracle.size() - 1) : "", both),
         kStructure, "missing: " + join(d.only_oracle));
    return;
  }
  if (!d.only_candidate.empty()) {
    fail(r,
         fmt::format("the candidate's model has parameter '{}', which the oracle's lacks{} {}", d.only_candidate[0],
                     d.only_candidate.size() > 1 ? fmt::format(" (and {} more)", d.only_candidate.size() - 1) : "",
                     both),
         kStructure, "extra: " + join(d.only_candidate));
    return;
  }
  for (const auto& t : d.tensors) {
    if (!t.same_shape()) {
      fail(r,
           fmt::format("parameter '{}' has shape {} in the candidate's model, {} in the oracle's {}", t.name,
                       shape_text(t.candidate_shape), shape_text(t.oracle_shape), both),
           kStructure);
      return;
    }
  }
  if (d.tensors.empty()) throw Error(fmt::format("the saved models hold no tensors {}", both));
  std::vector<TensorDiff> sorted = d.tensors;
  std::stable_sort(sorted.begin(), sorted.end(), worse);
  const TensorDiff& worst = sorted.front();
  uint64_t elements = 0;
  for (const auto& t : d.tensors) elements += t.numel;
  const std::string obs =
      fmt::format("max |candidate - oracle| = {:.3g} in {} (tolerance {:.3g}) over {} tensors, {} elements {}",
                  worst.max_abs_diff, worst.name, tol, d.tensors.size(), grouped(elements), both);
  if (worst.max_abs_diff <= tol) {  // false for NaN
    pass(r, obs);
    return;
  }
  std::string details = "the tensors that differ most (max |candidate - oracle|, ||candidate|| / ||oracle||):\n";
  for (size_t i = 0; i < std::min<size_t>(5, sorted.size()); ++i) {
    details += fmt::format("  {} {}: {:.3g}, {}\n", sorted[i].name, shape_text(sorted[i].oracle_shape),
                           sorted[i].max_abs_diff, norm_ratio(sorted[i]));
  }
  fail(r, fmt::format("{}; ||candidate|| / ||oracle|| of {} = {}", obs, worst.name, norm_ratio(worst)), c.diagnosis,
       details);
}

}  // namespace

const CheckKind kSameModel =
    {"same_model",
     "both saved models hold the same tensors (names and shapes), and no element of the candidate's differs from "
     "the oracle's by more than `tolerance`",
     RunArity::kTwo,
     {{"tolerance", ParamType::kNumber, 1e-6, "largest allowed absolute difference of any element"}},
     "the candidate's parameters differ from the oracle's: its gradients are not the average of the ranks' gradients "
     "(summed, stale, or missing some parameters)",
     check_same_model,
     [](const CheckSpec& c, const LabSpec& lab) -> std::string {
       if (c.number("tolerance") < 0) return "tolerance must be >= 0";
       return runs_save_models(c, lab);
     },
     "oracle, candidate"};

}  // namespace ddplab::grader::checks

// Check kind `consistency`: the ranks' parameter digests agree at the start (rank 0's weights
// were broadcast) and/or at the end (gradients were synchronised every step).
#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

/// "; differing: mlp.6.bias, ..." from the per-tensor digests (params.final_by_name) when both
/// reports have them: which parameters a sync left out. Empty otherwise.
std::string differing_tensors(const json& a, const json& b) {
  const json* x = a.contains("params") ? &a["params"] : nullptr;
  const json* y = b.contains("params") ? &b["params"] : nullptr;
  if (x == nullptr || y == nullptr || !x->contains("final_by_name") || !y->contains("final_by_name")) return "";
  std::vector<std::string> names;
  size_t total = 0;
  for (const auto& [name, digest] : (*x)["final_by_name"].items()) {
    ++total;
    if (!(*y)["final_by_name"].contains(name) || (*y)["final_by_name"][name] != digest) names.push_back(name);
  }
  if (names.empty()) return "";
  const size_t shown = std::min<size_t>(names.size(), 4);
  std::vector<std::string> head(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown));
  return fmt::format("; {} of {} tensors differ: {}{}", names.size(), total, join(head),
                     names.size() > shown ? ", ..." : "");
}

void check_consistency(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto reps = reports(the_run(c, ctx));
  const std::string at = c.text("at");
  std::vector<std::string> init, fin;
  for (size_t k = 0; k < reps.size(); ++k) {
    init.push_back(field<std::string>(reps[k], "params.initial_digest", static_cast<int>(k)));
    fin.push_back(field<std::string>(reps[k], "params.final_digest", static_cast<int>(k)));
  }
  if (reps.size() < 2) {
    fail(r, fmt::format("run '{}' has {} rank(s): nothing to compare", c.runs[0], reps.size()),
         "the run did not start every rank");
    return;
  }
  for (size_t k = 1; k < reps.size(); ++k) {
    if ((at == "start" || at == "both") && init[k] != init[0]) {
      fail(r, fmt::format("parameters differ across ranks at the start: rank 0 {} vs rank {} {}", init[0], k, init[k]),
           c.text("diagnosis_start"));
      return;
    }
  }
  for (size_t k = 1; k < reps.size(); ++k) {
    if ((at == "end" || at == "both") && fin[k] != fin[0]) {
      fail(r,
           fmt::format("parameters differ across ranks after training: rank 0 {} vs rank {} {}{}", fin[0], k, fin[k],
                       differing_tensors(reps[0], reps[k])),
           c.text("diagnosis_end"));
      return;
    }
  }
  pass(r, fmt::format("all {} ranks hold identical parameters {} (start {}, end {})", reps.size(),
                      at == "both" ? "at the start and the end" : "at the " + at, init[0], fin[0]));
}

}  // namespace

const CheckKind kConsistency =
    {"consistency",
     "the ranks' parameter digests are equal (at the start, the end or both)",
     RunArity::kOne,
     {{"at", ParamType::kString, "both", "when the digests must agree", Presence::kDefault, {"start", "end", "both"}},
      {"diagnosis_start", ParamType::kString,
       "initial weights not broadcast from rank 0: every rank trains its own random model",
       "the likely cause when they differ at the start"},
      {"diagnosis_end", ParamType::kString, "gradients are not synchronised: each rank steps on its own gradients",
       "the likely cause when they differ after training"}},
     "",
     check_consistency,
     [](const CheckSpec& c, const LabSpec& lab) -> std::string {
       const RunSpec& run = lab.run(c.runs[0]);
       return run.ranks < 2 ? fmt::format("run '{}' has {} rank; consistency needs 2 or more", run.name, run.ranks)
                            : "";
     }};

}  // namespace ddplab::grader::checks

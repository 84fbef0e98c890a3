// Check kind `verdict`: a fact the lab program established and recorded in its report
// (RunReport::verdict: `verdicts.<id>` = {ok, said, figures}) holds on the ranks the check names.
// The grader reads the record, not the printed sentence, so rewording a line never moves a grade;
// `output` stays for what only the printed text shows (an error path's message).
#include <cmath>

#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

/// "global_batch=512" -> the dotted path and the JSON value (a number, true/false, "text", [..]).
std::pair<std::string, json> parse_expected(const std::string& entry) {
  const auto eq = entry.find('=');
  if (eq == std::string::npos || eq == 0) return {"", json()};
  try {
    return {entry.substr(0, eq), json::parse(entry.substr(eq + 1))};
  } catch (const std::exception&) {
    return {"", json()};
  }
}

/// Equal as figures: numbers within a relative 1e-6 (what a printed %g shows), the rest exactly.
bool same_figure(const json& got, const json& want) {
  if (got.is_number() && want.is_number()) {
    const double g = got.get<double>(), w = want.get<double>();
    return std::abs(g - w) <= 1e-6 * std::max(std::abs(w), 1e-300) || g == w;
  }
  if (got.is_array() && want.is_array()) {
    if (got.size() != want.size()) return false;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!same_figure(got[i], want[i])) return false;
    }
    return true;
  }
  return got == want;
}

void check_verdict(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& run = the_run(c, ctx);
  const std::string id = c.text("verdict");
  // rank = "0" reads rank 0's report alone: in a run meant to fail, the launcher's fail-fast may
  // stop the other ranks before they write theirs, while rank 0 recorded what the job found.
  std::vector<json> reps;
  if (c.text("rank") == "all" || run.rank.empty()) {
    reps = reports(run);
  } else if (!run.rank[0].report) {
    // The job stopped before rank 0 could record anything: what stopped it, and what the check
    // expected the program to have found instead (its diagnosis).
    fail(r,
         fmt::format("run '{}': {}{}", run.name, run.rank[0].report_error,
                     run.summary.empty() ? std::string() : "; the run: " + failure_cause(run)),
         c.diagnosis);
    return;
  } else {
    reps.push_back(*run.rank[0].report);
  }
  const size_t ranks = c.text("rank") == "all" ? reps.size() : std::min<size_t>(1, reps.size());
  std::string said;
  for (size_t k = 0; k < ranks; ++k) {
    const json& rep = reps[k];
    const auto v = rep.find("verdicts");
    if (v == rep.end() || !v->is_object() || !v->contains(id)) {
      fail(r,
           fmt::format("run '{}', rank {}: the report has no verdict '{}' (the program never established it)",
                       c.runs[0], k, id),
           c.diagnosis);
      return;
    }
    const json& one = (*v)[id];
    if (!one.is_object() || !one.contains("ok") || !one["ok"].is_boolean()) {
      throw Error(fmt::format("run '{}', rank {}'s report: verdicts.{} has no boolean 'ok'", c.runs[0], k, id));
    }
    const std::string text = one.value("said", std::string());
    if (!one["ok"].get<bool>()) {
      fail(r, fmt::format("run '{}', rank {}: {}", c.runs[0], k, text.empty() ? "verdict '" + id + "' is false" : text),
           c.diagnosis);
      return;
    }
    const json figures = one.value("figures", json::object());
    for (const auto& entry : c.texts("figures")) {
      const auto [path, want] = parse_expected(entry);
      const json* got = find_field(figures, path);
      if (got == nullptr || !same_figure(*got, want)) {
        fail(r,
             fmt::format("run '{}', rank {}: {} is {}, not {} ({})", c.runs[0], k, path,
                         got == nullptr ? "missing" : got->dump(), want.dump(), text),
             c.diagnosis);
        return;
      }
    }
    if (k == 0) said = text;
  }
  pass(r, ranks > 1 ? fmt::format("on all {} ranks: {}", ranks, said) : said);
}

}  // namespace

const CheckKind kVerdict =
    {"verdict",
     "the run's report records verdict `verdict` as ok (on rank 0, or on every rank), with the `figures` given",
     RunArity::kOne,
     {{"verdict", ParamType::kString, nullptr,
       "the verdict's id, as the lab program records it (`verdicts.<id>` in its report)", Presence::kRequired},
      {"rank", ParamType::kString, "all", "which ranks' reports must hold it as ok", Presence::kDefault, {"all", "0"}},
      {"figures", ParamType::kStringList, json::array(),
       "`path=value` entries: the verdict's figure at the dotted path must equal the JSON value (numbers within "
       "1e-6 relative)"},
      {"measured", ParamType::kBool, false,
       "the program's verdict rests on its own timing (a straggler named from phase times): a failure is measured "
       "again like a timing kind's, its run re-run after waiting for a quiet machine"}},
     "the program established the opposite of what the lab asks for",
     check_verdict,
     [](const CheckSpec& c, const LabSpec&) -> std::string {
       const std::string id = c.text("verdict");
       if (id.empty()) return "verdict must name an id";
       for (const auto& entry : c.texts("figures")) {
         if (parse_expected(entry).first.empty()) {
           return fmt::format("figures entry '{}': write path=value, the value in JSON (512, true, \"linear\", [3, 1])",
                              entry);
         }
       }
       for (char ch : id) {
         if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) {
           return fmt::format("verdict '{}': an id is lower-case letters, digits and '_'", id);
         }
       }
       return "";
     }};

}  // namespace ddplab::grader::checks

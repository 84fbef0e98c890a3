// The registered check kinds, and what the harness and the spec loader do with a kind: validate a
// [[check]] against its descriptor (filling in defaults) and run it. A new kind is one file
// ending with its descriptor, one line here, and one test in grader/tests/checks/.
#include <algorithm>

#include "check_util.h"

namespace ddplab::grader {

const char* param_type_name(ParamType t) {
  switch (t) {
    case ParamType::kNumber: return "number";
    case ParamType::kInteger: return "integer";
    case ParamType::kBool: return "bool";
    case ParamType::kString: return "string";
    case ParamType::kStringList: return "string list";
  }
  return "?";
}

const std::vector<const CheckKind*>& check_registry() {
  using namespace checks;
  static const std::vector<const CheckKind*> kinds = {&kUnitTests, &kRunOk,       &kPhases,   &kUtilization,
                                                      &kAuc,       &kConsistency, &kCoverage, &kParity,
                                                      &kScaling,   &kCommBudget,  &kOutput,   &kSameModel,
                                                      &kGradSync,  &kExposedComm, &kDataWait, &kSameOrder,
                                                      &kCost,      &kVerdict};
  return kinds;
}

const CheckKind* find_kind(const std::string& name) {
  for (const CheckKind* k : check_registry()) {
    if (k->name == name) return k;
  }
  return nullptr;
}

bool is_timing_kind(const std::string& kind) {
  const CheckKind* k = find_kind(kind);
  return k != nullptr && k->timing;
}

int measurement_threads(const CheckSpec& c, const LabSpec& spec) {
  int threads = 2;
  for (const auto& r : spec.runs) {
    if (std::find(c.runs.begin(), c.runs.end(), r.name) != c.runs.end()) threads = std::max(threads, r.ranks);
  }
  return threads;
}

std::vector<std::string> leaderboard_figures(const std::string& kind) {
  if (kind == "scaling") return {"efficiency", "unique_samples_per_s"};
  if (kind == "auc") return {"auc"};
  return {};
}

namespace {

bool has_type(const nlohmann::json& v, ParamType t) {
  switch (t) {
    case ParamType::kNumber: return v.is_number();
    case ParamType::kInteger: return v.is_number_integer();
    case ParamType::kBool: return v.is_boolean();
    case ParamType::kString: return v.is_string();
    case ParamType::kStringList:
      return v.is_array() && std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_string(); });
  }
  return false;
}

bool is_diagnosis_param(const std::string& name) { return name.rfind("diagnosis_", 0) == 0; }

}  // namespace

void validate_check(const LabSpec& lab, CheckSpec& c) {
  const CheckKind* kind = find_kind(c.kind);
  if (kind == nullptr) {
    std::vector<std::string> known;
    for (const CheckKind* k : check_registry()) known.push_back(k->name);
    throw ConfigError(fmt::format("{}:{}: check \"{}\": unknown check kind '{}' (known: {})", lab.path, c.line, c.name,
                                  c.kind, checks::join(known)));
  }
  // "file:line: check "name" (kind): ", at the parameter's own line where the spec wrote it.
  const auto at = [&](const std::string& key) {
    const auto it = c.param_lines.find(key);
    return fmt::format("{}:{}: check \"{}\" ({})", lab.path, it == c.param_lines.end() ? c.line : it->second, c.name,
                       c.kind);
  };
  std::vector<std::string> known;
  for (const auto& p : kind->params) known.push_back(p.name);
  for (const auto& [key, value] : c.params.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw ConfigError(
          fmt::format("{}: unknown parameter '{}'; known: {}", at(key), key,
                      known.empty() ? std::string("none (this kind takes no parameters)") : checks::join(known)));
    }
  }
  for (const auto& p : kind->params) {
    const auto it = c.params.find(p.name);
    if (it == c.params.end()) {
      if (p.presence == Presence::kRequired) {
        throw ConfigError(fmt::format("{}: missing required parameter '{}' ({}: {})", at(p.name), p.name,
                                      param_type_name(p.type), p.meaning));
      }
      if (p.presence == Presence::kDefault) {
        c.params[p.name] =
            is_diagnosis_param(p.name) && c.diagnosis_given ? nlohmann::json(c.diagnosis) : p.default_value;
      }
      continue;
    }
    if (!has_type(*it, p.type)) {
      throw ConfigError(fmt::format("{}: parameter '{}' must be a {}, not {}", at(p.name), p.name,
                                    param_type_name(p.type), it->dump()));
    }
    if (!p.choices.empty() &&
        std::find(p.choices.begin(), p.choices.end(), it->get<std::string>()) == p.choices.end()) {
      throw ConfigError(fmt::format("{}: parameter '{}' is '{}'; expected one of: {}", at(p.name), p.name,
                                    it->get<std::string>(), checks::join(p.choices)));
    }
  }
  if (!c.diagnosis_given) c.diagnosis = kind->diagnosis;
  const size_t n = c.runs.size();
  const std::string two_runs =
      kind->run_roles.empty() ? "needs runs = [one_rank, n_ranks]" : "needs runs = [" + kind->run_roles + "]";
  const char* runs_problem = nullptr;
  switch (kind->runs) {
    case RunArity::kNone: runs_problem = n != 0 ? "reads no run: remove 'run' / 'runs'" : nullptr; break;
    case RunArity::kOne: runs_problem = n != 1 ? "reads one run: run = \"name\"" : nullptr; break;
    case RunArity::kOneOrMore: runs_problem = n == 0 ? "needs 'run' or 'runs'" : nullptr; break;
    case RunArity::kTwo: runs_problem = n != 2 ? two_runs.c_str() : nullptr; break;
  }
  if (runs_problem) throw ConfigError(fmt::format("{}: {}", at("runs"), runs_problem));
  if (kind->rules) {
    const std::string problem = kind->rules(c, lab);
    if (!problem.empty()) throw ConfigError(fmt::format("{}: {}", at(""), problem));
  }
}

CheckResult result_of(const CheckSpec& spec) {
  CheckResult r;
  r.id = spec.id;
  r.name = spec.name;
  r.kind = spec.kind;
  r.exercise = spec.exercise;
  r.visibility = spec.visibility;
  r.max_score = spec.points;
  return r;
}

CheckResult run_check(const CheckSpec& spec, GradeContext& ctx) {
  CheckResult r = result_of(spec);
  const CheckKind* kind = find_kind(spec.kind);
  if (kind == nullptr) {
    throw ConfigError(fmt::format("{}:{}: unknown check kind '{}'", ctx.spec.path, spec.line, spec.kind));
  }
  try {
    kind->run(spec, ctx, r);
  } catch (const ConfigError&) {
    throw;  // a spec problem is the instructor's to fix: stop loudly
  } catch (const UndeclaredParameter&) {
    throw;  // a bug in the grader, never the student's fault
  } catch (const std::exception& e) {
    // Anything else comes from what the student's program left behind (garbage report, missing
    // model): a failed check with the reason, never a pass and never a grader crash.
    checks::fail(r, e.what(), "the run's outputs are missing or malformed");
  }
  r.score = r.status == Status::kPassed ? r.max_score : 0.0;
  return r;
}

}  // namespace ddplab::grader

// Exercise status: what a check's result says of its exercise — an exercise not begun is "not
// attempted" before anything runs, a call the spec forbids fails it, an edited exercise is never
// "not attempted" (it is half done, or waits on one it builds on), and a failure sends the
// student to an earlier exercise first.
#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/grader/checks.h"
#include "harness_parts.h"

namespace ddplab::grader {

namespace parts {

const ExerciseProgress* edited(const Progress& progress, const std::string& exercise) {
  const auto it = progress.find(exercise);
  return it != progress.end() && it->second.edited > 0 ? &it->second : nullptr;
}

bool untouched(const Progress& progress, const std::string& exercise) {
  const auto it = progress.find(exercise);
  return it != progress.end() && it->second.edited == 0 && !it->second.stubs.empty();
}

bool nothing_begun(const Progress& progress) {
  return !progress.empty() &&
         std::all_of(progress.begin(), progress.end(), [&](const auto& p) { return untouched(progress, p.first); });
}

bool not_begun_check(const Progress& progress, const CheckSpec& c) {
  return c.exercise.empty() ? nothing_begun(progress) : untouched(progress, c.exercise);
}

CheckResult not_begun(const CheckSpec& c) {
  CheckResult r = result_of(c);
  r.status = Status::kNotAttempted;
  if (c.exercise.empty()) {
    r.observed = "no exercise of the lab begun: every region is still the skeleton's stub, so nothing was run";
    r.diagnosis = "the lab's exercises still throw NotImplemented: implement their STUDENT CODE regions";
  } else {
    r.observed = fmt::format("exercise {} not begun: its regions are still the skeleton's stubs, so nothing was run",
                             c.exercise);
    r.diagnosis = fmt::format("exercise {} still throws NotImplemented: implement its STUDENT CODE region", c.exercise);
  }
  return r;
}

std::vector<RunSpec> runs_used_by(const std::vector<RunSpec>& runs, const std::vector<CheckSpec>& checks) {
  std::set<std::string> used;
  for (const auto& c : checks) used.insert(c.runs.begin(), c.runs.end());
  // A run kept needs the earlier runs its arguments name ({run:NAME}): latest first, so a chain is followed.
  for (auto r = runs.rbegin(); r != runs.rend(); ++r) {
    if (!used.count(r->name)) continue;
    for (const auto& other : runs) {
      for (const auto& a : r->args) {
        if (a.find("{run:" + other.name + "}") != std::string::npos) used.insert(other.name);
      }
    }
  }
  std::vector<RunSpec> kept;
  for (const auto& r : runs) {
    if (used.count(r.name)) kept.push_back(r);
  }
  return kept;
}

void add_once(std::vector<std::string>& list, const std::string& exercise) {
  if (std::find(list.begin(), list.end(), exercise) == list.end()) list.push_back(exercise);
}

void apply_forbidden(const std::vector<ForbiddenCall>& forbidden, CheckResult& r) {
  std::vector<std::string> calls, symbols;
  for (const auto& f : forbidden) {
    if (f.exercise != r.exercise || r.exercise.empty()) continue;
    if (std::find(calls.begin(), calls.end(), f.function) == calls.end()) calls.push_back(f.function);
    symbols.push_back(fmt::format("{}: undefined symbol `{}`", f.file, f.symbol));
  }
  if (calls.empty()) return;
  const std::string before =
      fmt::format("Without this rule the check would be: [{}] {}", status_name(r.status), r.observed);
  r.status = Status::kFailed;
  r.score = 0;
  r.observed =
      fmt::format("exercise {} calls {}, which the lab does not allow it to call", r.exercise, fmt::join(calls, ", "));
  r.diagnosis = fmt::format(
      "exercise {} asks you to write what {} does: implement it with what the contract in the lab's header allows",
      r.exercise, fmt::join(calls, ", "));
  r.details = fmt::format("{}\n{}", fmt::join(symbols, "\n"), before);
}

void settle_attempt(const CheckSpec& c, const Progress& progress, CheckResult& r) {
  if (r.status == Status::kNotAttempted && !r.exercise.empty() && edited(progress, r.exercise) != nullptr) {
    // Written, but it runs an exercise it builds on that is still a stub: that one comes first.
    for (const auto& ex : c.builds_on) {
      const ExerciseProgress* dep = edited(progress, ex);
      if (dep != nullptr && dep->stubs.empty()) continue;
      r.status = Status::kFailed;
      r.score = 0;
      r.diagnosis =
          fmt::format("this check also runs exercise {}, which still holds NotImplemented stubs: finish {} first", ex,
                      ex);
      r.blamed.push_back(ex);
      break;
    }
  }
  if (r.status == Status::kNotAttempted && !r.exercise.empty()) {
    if (const ExerciseProgress* p = edited(progress, r.exercise)) {
      // Half an exercise: some of its regions were written, and what it runs still reaches a stub.
      r.status = Status::kFailed;
      r.score = 0;
      r.diagnosis =
          p->stubs.empty()
              ? fmt::format("exercise {} was edited but its code still throws ddplab::NotImplemented", r.exercise)
              : fmt::format(
                    "exercise {} is half done: {} of its regions still hold the NotImplemented stub ({}); "
                    "the checks reach it",
                    r.exercise, p->stubs.size(), fmt::join(p->stubs, ", "));
    }
  }
}

}  // namespace parts

void blame_earlier_exercises(const LabSpec& spec, std::vector<CheckResult>& checks) {
  for (CheckResult& r : checks) {
    const auto c =
        std::find_if(spec.checks.begin(), spec.checks.end(), [&](const CheckSpec& x) { return x.id == r.id; });
    if (r.status != Status::kFailed || c == spec.checks.end()) continue;
    for (const auto& ex : c->builds_on) {
      if (std::find(r.blamed.begin(), r.blamed.end(), ex) != r.blamed.end()) break;  // said already
      // A failing check of the earlier exercise that does not itself run this check's exercise: one
      // that builds on it may fail because of this exercise, and the two would blame each other.
      const auto failed = std::find_if(checks.begin(), checks.end(), [&](const CheckResult& other) {
        if (other.exercise != ex || (other.status != Status::kFailed && other.status != Status::kNotAttempted)) {
          return false;
        }
        const auto spec_of =
            std::find_if(spec.checks.begin(), spec.checks.end(), [&](const CheckSpec& x) { return x.id == other.id; });
        return spec_of == spec.checks.end() ||
               std::find(spec_of->builds_on.begin(), spec_of->builds_on.end(), r.exercise) == spec_of->builds_on.end();
      });
      if (failed == checks.end()) continue;
      r.diagnosis = fmt::format(
          "this check also runs your {} code, and {}'s check '{}' fails too: fix exercise {} first, then this one; {}",
          ex, ex, failed->name, ex, r.diagnosis);
      r.blamed.push_back(ex);
      break;
    }
  }
}

}  // namespace ddplab::grader

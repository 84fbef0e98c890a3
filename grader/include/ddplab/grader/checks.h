// Check plug-ins: each kind of check is a small function from the spec's [[check]] and the
// harness's context (runs made, binaries, calibration) to a result. Adding a kind = one function
// plus one line in the registry (checks.cpp). The list of kinds and their parameters is in
// docs/instructor-guide.md.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ddplab/grader/grade.h"

namespace ddplab::grader {

/// Fills result.status, score, observed, diagnosis, details. A check that cannot judge because a
/// run it reads failed reports that failure (status failed, or not attempted when the run
/// stopped at a skeleton stub) — never a pass.
using CheckFn = std::function<void(const CheckSpec& spec, GradeContext& ctx, CheckResult& result)>;

/// The registered kinds, by name.
const std::vector<std::pair<std::string, CheckFn>>& check_registry();

/// A result for `spec` with its name, kind, exercise, visibility and max score filled in, not yet
/// judged (status failed, score 0).
CheckResult result_of(const CheckSpec& spec);

/// Runs one check (looks up its kind; an unknown kind is a ConfigError naming the spec line).
CheckResult run_check(const CheckSpec& spec, GradeContext& ctx);

/// Throws ConfigError for a check kind that does not exist or parameters it does not accept, so
/// a spec is validated before anything is built.
void validate_check(const LabSpec& lab, const CheckSpec& spec);

}  // namespace ddplab::grader

// A graded lab laid out on disk as grade_lab leaves it (<out>/<lab>/runs/<run>/rank<R>.json, the
// instructor guide's "Outputs"), for the tests of the HTML report's charts. No LibTorch headers.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddplab/grader/grade.h"

namespace ddplab::grader::testing {

/// A rank's run report with what the charts read: steps.loss (NaN written as null, as
/// nlohmann::json writes it) and phases in seconds over `steps` steps.
nlohmann::json chart_report(int rank, int world, const std::vector<double>& loss, double data_wait, double forward,
                            double backward, double comm, double optimizer);

/// Writes `report` as <lab_dir>/runs/<run>/rank<R>.json.
void write_run_report(const std::filesystem::path& lab_dir, const std::string& run, const nlohmann::json& report);

/// The scaling check's observation, in checks/scaling.cpp's words.
std::string scaling_observed(double r1, double rn, int n, double reference, double share);

/// Lab "lab09" in <dir>/lab09: run "one" (1 rank, 60 steps) and "two" (2 ranks, 30 steps each), a
/// passed check and a failed scaling check.
LabResult lab_with_runs(const std::filesystem::path& dir);

}  // namespace ddplab::grader::testing

// A harness stand-in for the per-kind check tests: a spec loaded from TOML text (so the kind's
// validation and defaults apply), runs made of synthetic in-memory reports, and the check run
// through run_check exactly as grade_lab runs it. No lab program, no LibTorch headers.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ddplab/grader/checks.h"
#include "ddplab/grader/grade.h"
#include "ddplab/grader/spec.h"
#include "scratch_dir.h"

namespace ddplab::grader::testing {

using nlohmann::json;

class CheckTest : public ::testing::Test {
 protected:
  void SetUp() override;

  /// Loads a spec of the [[run]] and [[check]] tables `body` (a [lab] table is added).
  void load(const std::string& body);
  /// A finished run with one report per rank (exit 0); `args` as the harness would record them,
  /// expect_failure as the loaded spec's run of that name has it.
  RunOutcome& add_run(const std::string& name, std::vector<json> reports,
                      std::vector<std::string> args = {"--train-samples", "1000"});
  /// Runs the check with id `id` against the runs added so far.
  CheckResult grade(const std::string& id);
  /// The ConfigError message load() gives for `body` ("" if none).
  std::string load_error(const std::string& body);
  std::string write(const std::string& name, const std::string& text);

  ddplab::testing::ScratchDir scratch_;
  const std::filesystem::path dir_ = scratch_.dir();
  LabSpec spec_;
  GradeOptions options_;
  LabBinaries bin_;
  Calibration calibration_;
  std::map<std::string, RunOutcome> runs_;
};

/// A rank's report with the sections the checks read, all plausible: status ok, phases
/// (forward/backward/optimizer/compute/wall/steps), equal parameter digests, one allreduce
/// per step of 1 MB, losses for 4 steps.
json good_report();

/// The epochs section of a rank that trained on `indices` (set digest as the runtime's ledger
/// computes it; `order` stands for the order digest, which checks only compare).
json epoch_of(const std::vector<uint64_t>& indices, uint64_t order);

/// "FAILED ..." when `r` does not have `status` and a diagnosis containing `diagnosis`.
::testing::AssertionResult has(const CheckResult& r, Status status, const std::string& diagnosis = "");

}  // namespace ddplab::grader::testing

namespace ddplab::grader::testing {

/// A tiny ctr data set (2,000 train, 1,000 test samples), generated once per test binary.
std::string tiny_data_set();
/// Saves a freshly initialised DeepFM (seeded) where a lab run's --save-model would; `by` is added
/// to the first element of parameter `nudge` (named as named_parameters() names it) if given.
void save_model(const std::string& path, uint64_t seed, const std::string& nudge = "", double by = 0);

/// A tensor of a synthetic saved model.
struct SavedTensor {
  std::string name;  ///< dotted: "extra.scale" is tensor "scale" of nested archive "extra"
  std::vector<int64_t> shape;
  std::vector<float> values;  ///< row-major, as many as the shape holds
};
/// Saves `tensors` as a module's save() would: one nested archive per dotted prefix.
void save_tensors(const std::string& path, const std::vector<SavedTensor>& tensors);

}  // namespace ddplab::grader::testing

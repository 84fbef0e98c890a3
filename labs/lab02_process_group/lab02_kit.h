// Lab 02's apparatus: joining the job through the student's reading of the environment (02.1),
// and the bill of an epoch - samples processed by all ranks against distinct samples - that puts a
// number on the work every rank repeats without a sampler. Read-only for students; unit-tested in
// tests/lab02_kit_test.cpp.
#pragma once

#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include "lab02.h"

#include "ddplab/lab.h"

namespace lab02 {

/// 02.1: joins the job with the student's reading of the environment, which must agree with the
/// launcher's. Until it exists every process is a world of its own (an in-memory group of 1): N
/// independent trainers. Returns the group and whether the job was joined.
std::pair<std::shared_ptr<ddplab::dist::ProcessGroup>, bool> join_with_student_environment(ddplab::LabRun& run);

/// The bill of one epoch from every rank's (samples, set digest): samples processed by all ranks,
/// the distinct ones (ranks' sets are identical without a sampler, disjoint with one, so the unique
/// count is the sum of the counts of the distinct digests) and the ranks that repeated rank 0's work.
struct Bill {
  int64_t epoch = 0;
  double seconds = 0;
  uint64_t processed = 0, unique = 0, distinct_sets = 0;
  int repeated = 0;
  int ranks = 0;
  nlohmann::json json() const;
  /// "processed 10000 samples, 5000 of them unique ...", the three lines the run prints.
  std::string describe() const;
};
Bill bill_of(const std::vector<std::vector<uint64_t>>& counts_and_digests, int64_t epoch, double seconds);
/// The same, gathered from every rank (collective), printed on rank 0, appended to the report's
/// lab02.epochs and recorded as the verdict `work_counted` (the last epoch's stands).
Bill epoch_bill(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const ddplab::EpochSummary& done);

/// The report's lab02 section: whether the job was joined (02.1) and gradients averaged (02.3).
void record_job(ddplab::LabRun& run, bool joined, bool averaging);

}  // namespace lab02

// Lab 03's apparatus around the sampler (sampler.h composes the student's four exercises into
// one): the driver's flags, the probes, and the lesson's numbers - each rank's click rate, and
// whether the ranks together saw every sample exactly once this epoch. Read-only for students;
// unit-tested in tests/lab03_kit_test.cpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sampler.h"

#include "ddplab/lab.h"

namespace lab03 {

/// The driver's own flags.
struct Flags {
  SamplerConfig sampler;
  std::string shard = "strided", tail = "pad", order = "natural";
  /// The optimizer: "fused" (the kit's one-pass Adam, with row-sparse embedding gradients on the
  /// CPU) or "torch" (torch::optim::Adam on dense gradients, the driver before issue 33). The same
  /// algorithm and the same numbers; the first makes the step's replicated part cheaper.
  std::string adam = "fused";
  /// The sampler's configuration with the parsed flags and `seed`.
  SamplerConfig config(uint64_t seed) const;
};
void add_flags(ddplab::LabFlags& f, Flags& flags);

/// Each exercise once on a tiny input, in id order (03.4 is otherwise used only with
/// --stratify), with the flags' shard mode and tail policy.
void add_probes(ddplab::LabProgram& program, const Flags& flags);

/// Each rank's share of clicks this epoch (03.4's lesson), gathered, printed on rank 0 and returned
/// for the report. Collective.
nlohmann::json click_rates(ddplab::dist::Communicator& comm, const ddplab::LabRun& run, int64_t epoch,
                           const std::vector<uint64_t>& mine);

/// Whether the ranks' samples of one epoch were every sample exactly once: the ranks' set digests
/// must add up to the digest of [0, n), plus the padded samples (seen twice), minus the dropped
/// ones (never seen).
struct Coverage {
  uint64_t processed = 0;
  bool complete = false;  ///< every rank took its whole share (no --max-steps cut)
  bool covered = false;
};
/// From every rank's (samples, set digest) of the epoch, the sampler's padded and dropped
/// indices and its samples per rank, for a training set of n samples.
Coverage coverage_of(const std::vector<std::vector<uint64_t>>& counts_and_digests, const std::vector<uint64_t>& padded,
                     const std::vector<uint64_t>& dropped, uint64_t samples_per_rank, uint64_t n);
/// The same gathered from every rank (collective), printed on rank 0, recorded as the verdict
/// `every_sample_once` for a complete epoch, and appended with the epoch's click `rates` to the
/// report's sampler.epochs (the last epoch's rates and padding also at the top, for a quick look).
void epoch_coverage(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const ddplab::EpochSummary& done,
                    const DistributedSampler& sampler, uint64_t n, const nlohmann::json& rates);

/// The report's sampler section: the sampler's settings and the base order.
void record_sampler(ddplab::LabRun& run, const DistributedSampler& sampler, const std::string& order);

}  // namespace lab03

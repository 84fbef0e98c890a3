// Agreement across ranks: gather a few numbers from every rank, and say which ranks differ from
// rank 0. Drivers use it to prove, as a printed fact, that every rank holds the same parameters
// or the same number of samples, and to name the ranks that do not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddplab/dist/communicator.h"

namespace ddplab::dist {

/// Every rank's `mine`, in rank order. Collective: every rank calls it with the same length.
std::vector<std::vector<uint64_t>> allgather_u64(Communicator& comm, const std::vector<uint64_t>& mine);

/// Every rank's `mine` as doubles, bit for bit, in rank order. Collective, as allgather_u64.
std::vector<std::vector<double>> allgather_f64(Communicator& comm, const std::vector<double>& mine);
/// Every rank's one value `x`, in rank order. Collective.
std::vector<double> allgather_f64(Communicator& comm, double x);

/// "rank 0 12 %, rank 1 30 %": one entry per rank, each value through `format` (an fmt
/// format string with one placeholder, e.g. "{:.0f} %").
std::string per_rank(const std::vector<double>& values, const std::string& format);

/// One value per rank, and which ranks disagree with rank 0.
struct Agreement {
  std::vector<uint64_t> values;  ///< by rank
  std::vector<int> differ;       ///< ranks whose value is not rank 0's (empty: all agree)
  bool same() const noexcept { return differ.empty(); }
  /// "identical on all 4 rank(s)" or "DIFFERENT: ranks 1, 3 differ from rank 0".
  std::string describe() const;
};

/// Gathers `value` from every rank and compares it with rank 0's. Collective.
Agreement compare_across_ranks(Communicator& comm, uint64_t value);

/// Throws ddplab::Error naming the first rank that disagrees with rank 0 on `value`:
/// "<what> differ across ranks (V0 on rank 0, VR on rank R): <consequence>". Collective.
void require_same_across_ranks(Communicator& comm, uint64_t value, const std::string& what,
                               const std::string& consequence);

/// Whether every rank holds bit-identical parameters and buffers (their parameter_digest()s
/// agree). Collective. `digest`, if given, receives this rank's digest (16 hex digits).
Agreement compare_parameters(Communicator& comm, const torch::nn::Module& model, std::string* digest = nullptr);

}  // namespace ddplab::dist

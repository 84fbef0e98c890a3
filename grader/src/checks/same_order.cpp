// Check kind `same_order`: a candidate run visits the oracle's samples in the oracle's order — on
// every rank, in every epoch, the same number of samples with the same order digest. Lab 08 runs
// the synchronous loader as the oracle and the prefetching loader with 1, 2 and 4 workers.
#include <algorithm>

#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

void check_same_order(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r, /*need_ok=*/true)) return;
  const auto oracle = epochs_of(reports(the_run(c, ctx, 0)));
  const auto cand = epochs_of(reports(the_run(c, ctx, 1)));
  if (oracle.empty()) {
    fail(r, fmt::format("the oracle run '{}' reports no complete epoch", c.runs[0]), "the oracle must finish an epoch");
    return;
  }
  if (cand.size() != oracle.size()) {
    fail(r, fmt::format("'{}' completed {} epoch(s), '{}' {}", c.runs[1], cand.size(), c.runs[0], oracle.size()),
         "the candidate's loader ended an epoch early or late: it must hand out every batch, then report the end");
    return;
  }
  for (size_t e = 0; e < oracle.size(); ++e) {
    for (size_t k = 0; k < oracle[e].order.size(); ++k) {
      if (cand[e].samples[k] != oracle[e].samples[k]) {
        fail(r,
             fmt::format("epoch {}, rank {}: {} samples in '{}', {} in '{}'", e, k, cand[e].samples[k], c.runs[1],
                         oracle[e].samples[k], c.runs[0]),
             "the candidate's loader handed out another number of samples: every batch exactly once");
        return;
      }
      if (cand[e].order[k] != oracle[e].order[k]) {
        fail(r,
             fmt::format("epoch {}, rank {}: the order digest is {:016x} in '{}', {:016x} in '{}' (same {} samples)", e,
                         k, cand[e].order[k], c.runs[1], oracle[e].order[k], c.runs[0], oracle[e].samples[k]),
             c.diagnosis);
        return;
      }
    }
  }
  pass(r, fmt::format("{} epoch(s) x {} rank(s): the same samples in the same order as '{}'", oracle.size(),
                      oracle.front().order.size(), c.runs[0]));
}

}  // namespace

const CheckKind kSameOrder =
    {"same_order",
     "on every rank and in every epoch the candidate trained on the oracle's samples in the oracle's order (counts "
     "and order digests equal)",
     RunArity::kTwo,
     {},
     "the batches come out in another order than the synchronous loader's: hand them out by batch number, not in the "
     "order the workers finish them",
     check_same_order,
     [](const CheckSpec& c, const LabSpec& lab) -> std::string {
       if (lab.run(c.runs[0]).ranks != lab.run(c.runs[1]).ranks) {
         return fmt::format("runs '{}' and '{}' must have the same number of ranks", c.runs[0], c.runs[1]);
       }
       return "";
     },
     "oracle, candidate"};

}  // namespace ddplab::grader::checks

// Check kind `coverage`: recomputes from the ranks' per-epoch sample digests that together they
// saw every sample exactly once (partitioned, up to the sampler's documented padding and dropped
// tail) or each saw all of them (replicated), with equal step counts and a new order each epoch.
#include <algorithm>

#include "check_util.h"

namespace ddplab::grader::checks {
namespace {

/// Indices a sampler reports as padded (repeated) or dropped in epoch `epoch` (report section
/// sampler.epochs[e], else sampler); at most world - 1 each. The grader checks them against the
/// digests, so a lying list cannot make a wrong epoch add up.
std::vector<uint64_t> listed(const json& rep, const char* key, size_t world, uint64_t n, size_t epoch) {
  std::vector<uint64_t> out;
  const auto s = rep.find("sampler");
  if (s == rep.end()) return out;
  const json* src = &*s;
  if (s->contains("epochs") && (*s)["epochs"].is_array() && epoch < (*s)["epochs"].size()) src = &(*s)["epochs"][epoch];
  if (!src->is_object() || !src->contains(key)) return out;
  const json& list = (*src)[key];
  const auto bad = [&] {
    return Error(
        fmt::format("report: sampler.{} is not a list of at most {} sample indices below {}", key, world - 1, n));
  };
  if (!list.is_array()) throw bad();
  for (const auto& v : list) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= n || out.size() >= world) throw bad();
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

/// Every rank's sampler.epochs[epoch].order_digest, or nothing when a report lacks it.
std::vector<std::string> order_digests(const std::vector<json>& reps, size_t epoch) {
  std::vector<std::string> out;
  for (const auto& rep : reps) {
    const json* s = rep.contains("sampler") ? &rep["sampler"] : nullptr;
    if (s == nullptr || !s->contains("epochs") || !(*s)["epochs"].is_array() || epoch >= (*s)["epochs"].size())
      return {};
    const json& e = (*s)["epochs"][epoch];
    if (!e.is_object() || !e.contains("order_digest") || !e["order_digest"].is_string()) return {};
    out.push_back(e["order_digest"].get<std::string>());
  }
  return out;
}

/// The sampler's tail policy as its report names it ("pad", "drop"), or "".
std::string sampler_tail(const json& rep) {
  if (!rep.contains("sampler") || !rep["sampler"].is_object()) return "";
  return rep["sampler"].value("tail", "");
}

void check_coverage(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& run = the_run(c, ctx);
  const auto reps = reports(run);
  const size_t world = reps.size();
  const uint64_t n = train_size(ctx, c.runs[0]);
  const std::string expect = c.text("expect");
  const bool check_order = c.flag("check_order");
  const bool order_only = c.flag("order_only");
  const auto epochs = epochs_of(reps);
  const auto min_epochs = static_cast<size_t>(c.integer("min_epochs"));
  if (epochs.size() < min_epochs) {
    fail(r, fmt::format("{} complete epoch(s) reported, {} needed", epochs.size(), min_epochs),
         c.text("diagnosis_epochs"));
    return;
  }
  const uint64_t full = range_digest(n);
  for (size_t e = 0; e < epochs.size() && !order_only; ++e) {
    const auto& ep = epochs[e];
    for (size_t k = 1; k < world; ++k) {
      if (ep.steps[k] != ep.steps[0]) {
        fail(r, fmt::format("epoch {}: rank {} took {} steps, rank 0 took {}", e, k, ep.steps[k], ep.steps[0]),
             c.text("diagnosis_uneven"));
        return;
      }
    }
    if (expect == "replicated") {
      for (size_t k = 0; k < world; ++k) {
        if (ep.set[k] != full || ep.samples[k] != n) {
          fail(r, fmt::format("epoch {}: rank {} saw {} samples, not the whole data set of {}", e, k, ep.samples[k], n),
               c.text("diagnosis_replicated"));
          return;
        }
      }
      continue;
    }
    // Partitioned: the shards are cut from one order per epoch. Ranks that shuffled differently
    // (reported sampler.epochs[e].order_digest) cannot cover the data set whatever their shards
    // do: blame the order, not the sharding.
    if (const auto digests = order_digests(reps, e); !digests.empty()) {
      for (size_t k = 1; k < world; ++k) {
        if (digests[k] != digests[0]) {
          fail(
              r,
              fmt::format("epoch {}: rank {} shuffled the epoch into another order than rank 0 (order digest {} vs {})",
                          e, k, digests[k], digests[0]),
              c.text("diagnosis_orders_differ"));
          return;
        }
      }
    }
    // A padding sampler drops nothing (reported sampler.tail "pad").
    const auto padded = listed(reps[0], "padded_indices", world, n, e);
    const auto dropped = listed(reps[0], "dropped_indices", world, n, e);
    if (sampler_tail(reps[0]) == "pad" && !dropped.empty()) {
      fail(r, fmt::format("epoch {}: the sampler dropped {} sample(s) with --tail pad", e, dropped.size()),
           c.text("diagnosis_dropped_in_pad"));
      return;
    }
    // Together the ranks see [0, n) exactly once, up to the documented padding.
    bool all_same = world > 1;
    for (size_t k = 1; k < world; ++k) all_same = all_same && ep.order[k] == ep.order[0];
    if (all_same) {
      fail(r, fmt::format("epoch {}: ranks 0 and 1 processed identical batches ({} samples each)", e, ep.samples[0]),
           c.text("diagnosis_identical"));
      return;
    }
    uint64_t expect_digest = full, expect_samples = n;
    for (auto i : padded) expect_digest += index_digest(i), ++expect_samples;
    for (auto i : dropped) expect_digest -= index_digest(i), --expect_samples;
    uint64_t digest = 0, samples = 0;
    for (size_t k = 0; k < world; ++k) digest += ep.set[k], samples += ep.samples[k];
    if (digest != expect_digest || samples != expect_samples) {
      const char* why = samples > expect_samples   ? "diagnosis_duplicates"
                        : samples < expect_samples ? "diagnosis_missing"
                                                   : "diagnosis_mixed";
      fail(r,
           fmt::format("epoch {}: the ranks saw {} samples in all, {} expected ({} + {} padded - {} dropped), and "
                       "their set digests do not add up to [0, {})",
                       e, samples, expect_samples, n, padded.size(), dropped.size(), n),
           c.text(why));
      return;
    }
  }
  if (check_order && epochs.size() >= 2) {
    for (size_t k = 0; k < world; ++k) {
      if (epochs[0].order[k] == epochs[1].order[k]) {
        fail(r, fmt::format("rank {} visited its samples in the same order in epoch 0 and 1", k),
             c.text("diagnosis_order"));
        return;
      }
    }
  }
  if (order_only) {
    pass(r, fmt::format("every rank visited its samples in a new order in each of {} epochs", epochs.size()));
  } else if (expect == "replicated") {
    pass(r, fmt::format(
                "each of the {} ranks processed all {} samples in every epoch: {} processed per epoch for {} unique",
                world, n, world * n, n));
  } else {
    pass(r,
         fmt::format("{} epoch(s): every sample of [0, {}) seen exactly once across {} ranks (+ documented padding), "
                     "equal step counts{}",
                     epochs.size(), n, world, check_order && epochs.size() >= 2 ? ", a new order each epoch" : ""));
  }
}

}  // namespace

const CheckKind kCoverage =
    {"coverage",
     "partitioned: per epoch the ranks' sample-set digests add up to [0, n) plus the padded and minus the dropped "
     "indices, with equal step counts and a new order each epoch; replicated: every rank saw all of [0, n)",
     RunArity::kOne,
     {{"expect",
       ParamType::kString,
       "partitioned",
       "how the ranks share the data set",
       Presence::kDefault,
       {"partitioned", "replicated"}},
      {"check_order", ParamType::kBool, true, "also require every rank's order in epoch 1 to differ from epoch 0's"},
      {"order_only", ParamType::kBool, false, "check only the new order each epoch (needs min_epochs >= 2)"},
      {"min_epochs", ParamType::kInteger, 1, "complete epochs the run must report"},
      {"diagnosis_epochs", ParamType::kString, "the run ended before its epochs were done",
       "the likely cause of fewer epochs than min_epochs"},
      {"diagnosis_uneven", ParamType::kString,
       "uneven shards: ranks take different step counts, so one waits at a collective for a peer that has finished "
       "(pad the tail or drop it)",
       "the likely cause of ranks taking different step counts"},
      {"diagnosis_replicated", ParamType::kString, "every rank must iterate the whole data set",
       "the likely cause of a rank missing samples (expect = replicated)"},
      {"diagnosis_identical", ParamType::kString,
       "no sampler: every rank iterates the whole data set in the same order, so N processes do the work of one",
       "the likely cause of every rank processing identical batches"},
      {"diagnosis_duplicates", ParamType::kString, "samples seen more than once across ranks: the shards overlap",
       "the likely cause of more samples than the data set (plus padding)"},
      {"diagnosis_missing", ParamType::kString,
       "samples never seen in the epoch: the shards do not cover the data set, or a tail was dropped without "
       "reporting it",
       "the likely cause of fewer samples than the data set (minus the dropped tail)"},
      {"diagnosis_mixed", ParamType::kString,
       "the right number of samples but not the right ones: some seen twice and others never",
       "the likely cause of the right count but the wrong samples"},
      {"diagnosis_orders_differ", ParamType::kString,
       "the ranks shuffled each epoch into different orders: every rank must compute the same order from (seed, epoch)",
       "the likely cause when the ranks' reported order digests differ"},
      {"diagnosis_dropped_in_pad", ParamType::kString,
       "samples were dropped although the tail policy is pad: pad repeats the start of the order, it never drops",
       "the likely cause of dropped samples reported by a padding sampler"},
      {"diagnosis_order", ParamType::kString,
       "same order in every epoch: set_epoch not called, or the shuffle ignores the epoch",
       "the likely cause of a rank visiting its samples in the same order in epochs 0 and 1"}},
     "",
     check_coverage,
     [](const CheckSpec& c, const LabSpec&) -> std::string {
       if (c.integer("min_epochs") < 1) return "min_epochs must be >= 1";
       if (c.flag("order_only") && c.integer("min_epochs") < 2) {
         return "order_only needs a run of 2 or more epochs (min_epochs = 2)";
       }
       return "";
     }};

}  // namespace ddplab::grader::checks

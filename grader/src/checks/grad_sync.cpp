// Check kind `grad_sync`: how a run synchronised its gradients, from each rank's report section
// `sync`: the buckets are the layout PyTorch DDP gives the reported parameters (recomputed by the
// grader, ddp_buckets.h), every synced step issued one collective per bucket, and every rank
// launched its buckets in bucket order, so that the ranks' collectives pair up.
#include <algorithm>

#include "check_util.h"
#include "ddp_buckets.h"

namespace ddplab::grader::checks {
namespace {

/// A bucket as a report gives it, or as the grader's layout names it.
struct NamedBucket {
  std::vector<std::string> params;
  uint64_t bytes = 0;
};

std::string bytes_list(const std::vector<uint64_t>& b) {
  std::vector<std::string> s;
  for (auto x : b) s.push_back(grouped(x));
  if (s.size() == 1) return s[0] + " bytes";
  if (s.size() <= 4) {
    const std::string last = s.back();
    s.pop_back();
    return join(s) + " and " + last + " bytes";
  }
  return fmt::format("{}, {}, ..., {} bytes", s[0], s[1], s.back());
}

/// "1,286,404 bytes: mlp.6.bias, mlp.6.weight, ..." (`all`: every name; else at most 6).
std::string describe(const NamedBucket& b, bool all = false) {
  std::vector<std::string> names = b.params;
  if (!all && names.size() > 6) {
    names.resize(6);
    names.push_back(fmt::format("... ({} parameters)", b.params.size()));
  }
  return fmt::format("{} bytes: {}", grouped(b.bytes), names.empty() ? "(none)" : join(names));
}

std::string listing(const std::vector<NamedBucket>& buckets) {
  std::string s;
  for (size_t i = 0; i < buckets.size(); ++i) s += fmt::format("  bucket {} ({})\n", i, describe(buckets[i], true));
  return s;
}

const json& array_at(const json& rep, const std::string& path, int rank) {
  const json& j = field_node(rep, path, rank);
  if (!j.is_array()) throw Error(fmt::format("rank {}'s report: {} has the wrong type", rank, path));
  return j;
}

std::vector<NamedBucket> reported_buckets(const json& rep, int k) {
  std::vector<NamedBucket> out;
  const size_t n = array_at(rep, "sync.buckets", k).size();
  for (size_t b = 0; b < n; ++b) {
    const std::string base = fmt::format("sync.buckets.{}.", b);
    out.push_back({field<std::vector<std::string>>(rep, base + "params", k), field<uint64_t>(rep, base + "bytes", k)});
  }
  return out;
}

/// The layout the grader expects for a rank's reported parameters.
struct Expected {
  std::vector<NamedBucket> buckets;
  std::string name;  ///< what the layout is called in the observation
  bool per_param = false;
};

Expected expected_buckets(const json& rep, int k) {
  std::vector<LayoutParam> params;
  const size_t n = array_at(rep, "sync.params", k).size();
  for (size_t i = 0; i < n; ++i) {
    const std::string base = fmt::format("sync.params.{}.", i);
    params.push_back({field<std::string>(rep, base + "name", k), field<uint64_t>(rep, base + "bytes", k),
                      field<std::string>(rep, base + "dtype", k), field<std::string>(rep, base + "device", k)});
  }
  const bool per_param = field<std::string>(rep, "sync.rung", k) == "per-param";
  const uint64_t first = per_param ? 0 : field<uint64_t>(rep, "sync.first_bucket_bytes", k);
  const uint64_t cap = per_param ? 0 : field<uint64_t>(rep, "sync.bucket_cap_bytes", k);
  const auto layout = per_param ? per_param_layout(params) : ddp_bucket_layout(params, first, cap);
  Expected out;
  for (const auto& b : layout) {
    NamedBucket e;
    for (size_t i : b.params) e.params.push_back(params[i].name);
    e.bytes = b.bytes;
    out.buckets.push_back(std::move(e));
  }
  out.per_param = per_param;
  out.name = per_param
                 ? "the per-parameter layout (one bucket per parameter, in registration order)"
                 : fmt::format("DDP's layout (first bucket {} bytes, then {} bytes)", grouped(first), grouped(cap));
  return out;
}

bool same_members(const NamedBucket& a, const NamedBucket& b) {
  auto x = a.params, y = b.params;
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  return x == y;
}

/// The first way rank k's buckets differ from the expected layout, or "".
std::string layout_problem(const std::vector<NamedBucket>& got, const std::vector<NamedBucket>& want,
                           const std::string& what, int k) {
  for (size_t b = 0; b < std::max(got.size(), want.size()); ++b) {
    if (b >= got.size()) {
      return fmt::format("rank {} reports {} bucket(s), {} has {}: bucket {} ({}) is missing", k, got.size(), what,
                         want.size(), b, describe(want[b]));
    }
    if (b >= want.size()) {
      return fmt::format("rank {} reports {} bucket(s), {} has {}: bucket {} ({}) is extra", k, got.size(), what,
                         want.size(), b, describe(got[b]));
    }
    if (!same_members(got[b], want[b])) {
      return fmt::format("rank {}: bucket {} holds {}; {} puts {} there", k, b, describe(got[b]), what,
                         describe(want[b]));
    }
    if (got[b].bytes != want[b].bytes) {
      return fmt::format("rank {}: bucket {} holds the expected parameters but reports {} bytes; they hold {}", k, b,
                         grouped(got[b].bytes), grouped(want[b].bytes));
    }
  }
  return "";
}

/// "a / b / c" of a report's list of byte counts, or "" if it is not one.
std::string byte_sequence(const json& j) {
  if (!j.is_array()) return "";
  std::vector<std::string> s;
  for (const auto& x : j) {
    if (!x.is_number_unsigned() && !x.is_number_integer()) return "";
    if (s.size() == 8) {
      s.push_back(fmt::format("... ({} in all)", j.size()));
      break;
    }
    s.push_back(grouped(x.get<uint64_t>()));
  }
  return join(s, " / ");
}

/// Rank k's order failure: where its launches first left the layout order, if it says.
std::string order_problem(const json& rep, int k) {
  const json& steps = field_node(rep, "sync.steps", k);
  const auto bad = steps.is_object() ? steps.find("first_bad_step") : steps.end();
  if (bad != steps.end() && bad->is_object() && bad->contains("step") && (*bad)["step"].is_number_integer()) {
    const std::string launched = byte_sequence(bad->value("launched", json())),
                      expected = byte_sequence(bad->value("expected", json()));
    if (!launched.empty() && !expected.empty()) {
      return fmt::format("rank {}, step {}: launched {} bytes; layout order {}", k, (*bad)["step"].get<int64_t>(),
                         launched, expected);
    }
  }
  return fmt::format("rank {} launched its buckets out of layout order", k);
}

void check_grad_sync(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto reps = reports(the_run(c, ctx));
  const int ranks = static_cast<int>(reps.size());
  std::vector<std::vector<NamedBucket>> got;
  for (int k = 0; k < ranks; ++k) {
    const json& sync = field_node(reps[k], "sync", k);
    if (!sync.is_object()) throw Error(fmt::format("rank {}'s report: sync has the wrong type", k));
    got.push_back(reported_buckets(reps[k], k));
  }
  std::vector<uint64_t> sizes;
  for (const auto& b : got[0]) sizes.push_back(b.bytes);
  std::vector<std::string> seen;
  if (c.flag("layout")) {
    bool per_param = false;
    for (int k = 0; k < ranks; ++k) {
      const Expected want = expected_buckets(reps[k], k);
      const std::string problem = layout_problem(got[k], want.buckets, want.name, k);
      if (!problem.empty()) {
        fail(r, problem, c.text("diagnosis_layout"),
             fmt::format("expected, {}:\n{}reported by rank {}:\n{}", want.name, listing(want.buckets), k,
                         listing(got[k])));
        return;
      }
      per_param = want.per_param;
    }
    seen.push_back(per_param ? fmt::format("{} bucket(s), one per parameter", got[0].size())
                             : fmt::format("{} bucket(s) ({}) as DDP lays them out", got[0].size(), bytes_list(sizes)));
  } else {
    seen.push_back(fmt::format("{} bucket(s) ({})", got[0].size(), sizes.empty() ? "none" : bytes_list(sizes)));
  }
  if (c.flag("one_per_bucket")) {
    for (int k = 0; k < ranks; ++k) {
      const auto synced = field<int64_t>(reps[k], "sync.steps.synced", k);
      if (synced < 1) {
        fail(r, fmt::format("rank {} reports no synced step: no collective to count", k),
             c.text("diagnosis_collectives"));
        return;
      }
      const auto lo = field<int64_t>(reps[k], "sync.steps.collectives.min", k);
      const auto hi = field<int64_t>(reps[k], "sync.steps.collectives.max", k);
      const auto n = static_cast<int64_t>(got[k].size());
      if (lo != n || hi != n) {
        fail(r,
             fmt::format("rank {}: {} collective(s) per synced step over {} synced steps, for {} bucket(s)", k,
                         lo == hi ? fmt::format("{}", lo) : fmt::format("{} to {}", lo, hi), synced, n),
             c.text("diagnosis_collectives"));
        return;
      }
    }
    seen.push_back("1 collective per bucket on every synced step");
  }
  if (c.flag("same_order")) {
    std::vector<std::string> digests;
    for (int k = 0; k < ranks; ++k) {
      if (!field<bool>(reps[k], "sync.steps.order_in_layout", k)) {
        fail(r, order_problem(reps[k], k), c.text("diagnosis_order"));
        return;
      }
      digests.push_back(field<std::string>(reps[k], "sync.order_digest", k));
    }
    for (int k = 1; k < ranks; ++k) {
      if (digests[k] != digests[0]) {
        fail(r,
             fmt::format("rank 0 and rank {} launched different sequences of collectives (order digests {} and {})", k,
                         digests[0], digests[k]),
             c.text("diagnosis_order"));
        return;
      }
    }
    seen.push_back(fmt::format("same launch order on {} rank(s)", ranks));
  }
  pass(r, join(seen));
}

}  // namespace

const CheckKind kGradSync =
    {"grad_sync",
     "each rank's reported buckets (report section `sync`) are the layout DDP gives its parameters, every synced step "
     "issues one collective per bucket, and every rank launches them in bucket order",
     RunArity::kOne,
     {{"layout", ParamType::kBool, true,
       "the buckets must be DDP's layout of the reported parameters (one per parameter for rung per-param)"},
      {"one_per_bucket", ParamType::kBool, true, "every synced step must issue exactly one collective per bucket"},
      {"same_order", ParamType::kBool, true,
       "every rank must launch its buckets in bucket order, the same sequence on every rank"},
      {"diagnosis_layout", ParamType::kString,
       "the buckets are not DDP's layout: walk the parameters from the last registered to the first, keep one open "
       "bucket per dtype and device, and close it once its bytes reach its limit (first_bucket_bytes for the first, "
       "bucket_cap_bytes after)",
       "the likely cause of buckets other than the expected layout"},
      {"diagnosis_collectives", ParamType::kString,
       "not one collective per bucket on every synced step: a bucket launched twice or never, or gradients reduced "
       "one by one",
       "the likely cause of more or fewer collectives than buckets"},
      {"diagnosis_order", ParamType::kString,
       "buckets must be launched in bucket order, 0, 1, 2, ..., on every rank: a bucket that is ready waits for its "
       "predecessors; launching in hook-firing order lets ranks issue different collectives at the same position",
       "the likely cause of a rank launching out of bucket order"}},
     "",
     check_grad_sync,
     [](const CheckSpec& c, const LabSpec&) -> std::string {
       return c.flag("layout") || c.flag("one_per_bucket") || c.flag("same_order")
                  ? ""
                  : "layout, one_per_bucket and same_order are all false: this check checks nothing";
     }};

}  // namespace ddplab::grader::checks

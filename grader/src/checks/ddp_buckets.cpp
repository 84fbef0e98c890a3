// DDP's bucket layout (ddp_buckets.h).
#include "ddp_buckets.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ddplab::grader::checks {

std::vector<LayoutBucket> ddp_bucket_layout(const std::vector<LayoutParam>& params, uint64_t first_bucket_bytes,
                                            uint64_t bucket_cap_bytes) {
  using Key = std::pair<std::string, std::string>;  // (dtype, device)
  struct Open {
    LayoutBucket bucket;
    uint64_t limit = 0;
    size_t first_seen = 0;  // walk position of the key's first parameter
  };
  std::map<Key, Open> open;
  std::vector<LayoutBucket> out;
  size_t position = 0;
  for (size_t i = params.size(); i-- > 0; ++position) {
    const LayoutParam& p = params[i];
    const Key key{p.dtype, p.device};
    auto it = open.find(key);
    if (it == open.end()) it = open.emplace(key, Open{{}, first_bucket_bytes, position}).first;
    Open& o = it->second;
    o.bucket.params.push_back(i);
    o.bucket.bytes += p.bytes;
    if (o.bucket.bytes >= o.limit) {
      out.push_back(std::move(o.bucket));
      o.bucket = LayoutBucket();
      o.limit = bucket_cap_bytes;
    }
  }
  // The buckets still open, in the order their keys were first seen (the sort below orders them
  // anyway: every bucket's first member is distinct).
  std::vector<const Open*> rest;
  for (const auto& [key, o] : open) {
    if (!o.bucket.params.empty()) rest.push_back(&o);
  }
  std::sort(rest.begin(), rest.end(), [](const Open* a, const Open* b) { return a->first_seen < b->first_seen; });
  for (const Open* o : rest) out.push_back(o->bucket);
  // Launch order: by the first member in the walk, i.e. the largest registration index, descending.
  std::stable_sort(out.begin(), out.end(),
                   [](const LayoutBucket& a, const LayoutBucket& b) { return a.params.front() > b.params.front(); });
  return out;
}

std::vector<LayoutBucket> per_param_layout(const std::vector<LayoutParam>& params) {
  std::vector<LayoutBucket> out;
  for (size_t i = 0; i < params.size(); ++i) out.push_back({{i}, params[i].bytes});
  return out;
}

}  // namespace ddplab::grader::checks

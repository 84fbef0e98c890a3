// Lab 11: your code goes between the BEGIN/END STUDENT CODE markers (contracts in lab11.h).
#include "lab11.h"

#include <algorithm>

#include <fmt/format.h>

#include "ddplab/error.h"

namespace lab11 {

uint64_t fingerprint(uint64_t running, const Call& call) {
  // BEGIN STUDENT CODE (11.1: the collective's fingerprint)
  // FNV-1a over every field the ranks must agree on, the running value first so that order counts.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (v >> (8 * byte)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(running);
  mix(static_cast<uint64_t>(call.op));
  mix(static_cast<uint64_t>(call.reduce));
  mix(static_cast<uint64_t>(call.dtype));
  mix(call.shape.size());
  for (int64_t d : call.shape) mix(static_cast<uint64_t>(d));
  return h;
  // END STUDENT CODE
}

void record(Ring& ring, const ddplab::flight::Entry& e) {
  // BEGIN STUDENT CODE (11.2: the flight recorder's ring)
  // Entry number k lives in slots[k % capacity]; an update of a seq still in the ring goes in place.
  const size_t cap = std::max<size_t>(ring.capacity, 1);
  if (ring.slots.size() < cap) ring.slots.resize(cap);
  for (int64_t k = std::max<int64_t>(0, ring.recorded - static_cast<int64_t>(cap)); k < ring.recorded; ++k) {
    auto& slot = ring.slots[static_cast<size_t>(k) % cap];
    if (slot.seq == e.seq) {
      slot = e;
      return;
    }
  }
  ring.slots[static_cast<size_t>(ring.recorded) % cap] = e;
  ++ring.recorded;
  // END STUDENT CODE
}

bool join_allreduce(ddplab::dist::Communicator& comm, torch::Tensor& flat, int64_t samples) {
  // BEGIN STUDENT CODE (11.3: the all-reduce of ranks that ran out of data)
  // One buffer: the gradient weighted by its samples, and the samples themselves in the last slot.
  auto buf = torch::cat(
      {flat.flatten() * static_cast<double>(samples), torch::full({1}, static_cast<double>(samples), flat.options())});
  comm.allreduce(buf);
  const double total = buf[-1].item<double>();
  if (total == 0) {
    flat.zero_();
    return false;
  }
  flat.copy_(buf.narrow(0, 0, flat.numel()).view_as(flat) / total);
  return true;
  // END STUDENT CODE
}

Straggler find_straggler(const std::vector<PhaseTimes>& ranks, int64_t samples_per_step, double threshold) {
  // BEGIN STUDENT CODE (11.4: the straggler and its phase)
  Straggler s;
  const int n = static_cast<int>(ranks.size());
  if (n < 2) return s;
  auto per_step = [](const PhaseTimes& t, double v) { return t.steps > 0 ? v / static_cast<double>(t.steps) : 0.0; };
  auto work = [&](const PhaseTimes& t) { return per_step(t, t.data_wait + t.compute); };
  auto median_of_others = [&](int skip, auto get) {
    std::vector<double> v;
    for (int r = 0; r < n; ++r) {
      if (r != skip) v.push_back(get(ranks[static_cast<size_t>(r)]));
    }
    std::sort(v.begin(), v.end());
    const size_t m = v.size();
    return m % 2 == 1 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
  };
  int slow = 0;
  for (int r = 1; r < n; ++r) {
    if (work(ranks[static_cast<size_t>(r)]) > work(ranks[static_cast<size_t>(slow)])) slow = r;
  }
  const PhaseTimes& t = ranks[static_cast<size_t>(slow)];
  const double others = median_of_others(slow, work);
  const double extra = work(t) - others;
  if (extra <= threshold * others) return s;
  s.rank = slow;
  const double data =
      per_step(t, t.data_wait) - median_of_others(slow, [&](const PhaseTimes& o) { return per_step(o, o.data_wait); });
  const double compute =
      per_step(t, t.compute) - median_of_others(slow, [&](const PhaseTimes& o) { return per_step(o, o.compute); });
  s.phase = data >= compute ? "data_wait" : "compute";
  s.excess_s = std::max(data, compute);
  double step = 0;
  for (const auto& r : ranks) step = std::max(step, per_step(r, r.data_wait + r.compute + r.comm));
  const double samples = static_cast<double>(samples_per_step);
  if (step > extra) s.cost_samples_s = samples / (step - extra) - samples / step;
  return s;
  // END STUDENT CODE
}

}  // namespace lab11

// Lab 03 (DistributedSampler): the functions the student implements in lab03_student.cpp, and the
// small sampler class built from them that the driver (main.cpp) and the tests use. The sampler
// is here, not in the student file, so that its contract is the same for everyone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ddplab/error.h"

namespace lab03 {

/// How a rank's share is laid out in the (tail-fitted) order of W ranks.
enum class ShardMode {
  kStrided,     ///< rank r takes order[r], order[r+W], order[r+2W], ... (PyTorch's DistributedSampler)
  kContiguous,  ///< rank r takes one block: order[r*m .. (r+1)*m), m = size / W ("split the file list")
};
/// What to do with the size % W samples that do not fill a last round across the W ranks.
enum class TailPolicy {
  kPad,   ///< repeat samples from the start of the order until the size is a multiple of W
  kDrop,  ///< drop the last size % W samples
};

/// Exercise 03.1: rank `rank`'s share of `order` among `world` ranks.
///
/// Contract: order.size() is a multiple of world (03.3 makes it so; otherwise throw
/// ddplab::Error). The W shares are disjoint as positions of `order`, cover it, and are equally
/// long (size / W). kStrided: share[j] = order[j*W + rank]: step k of N ranks at per-rank batch B
/// then takes exactly the k-th global batch of N*B of one process walking `order`.
/// kContiguous: share[j] = order[rank*m + j].
std::vector<uint64_t> shard(const std::vector<uint64_t>& order, int rank, int world, ShardMode mode);

/// Exercise 03.2: the order of the sample positions 0..n-1 for one epoch.
///
/// Contract: a permutation of [0, n) that depends only on (seed, epoch) — the same on every rank
/// and every run — and differs from epoch to epoch; with shuffle == false, 0, 1, ..., n-1.
std::vector<uint64_t> epoch_order(uint64_t n, uint64_t seed, int64_t epoch, bool shuffle);

/// Exercise 03.3: make the order's length a multiple of `world`, so every rank takes the same
/// number of samples (and of steps: no rank waits at a collective for peers that ran out).
///
/// Contract: kPad appends order[0], order[1], ... (from the start again if the order is shorter
/// than what is missing) until the size is a multiple of world — fewer than `world` samples, seen
/// twice this epoch; kDrop removes the last size % world samples. Already a multiple: unchanged.
std::vector<uint64_t> fit_tail(std::vector<uint64_t> order, int world, TailPolicy tail);

/// Exercise 03.4: reorder `order` (size a multiple of world) so that every rank's shard has the
/// same share of clicks, as nearly as counts allow.
///
/// Contract: returns the same multiset of indices such that shard(result, r, world, mode) for
/// r = 0..world-1:
///  - holds size/world samples, of which the positives (labels[index] != 0; `labels` is indexed
///    by sample index) number floor or ceil of P/world (P: positives in `order`), so each rank's
///    click rate is within 1/(size/world) of the global one: deal the positives round-robin to
///    ranks 0, 1, 2, ..., then the negatives continuing the same rotation;
///  - keeps the relative order of `order` within each class (a rank's positives appear in the
///    order they had in `order`, likewise its negatives);
///  - spreads its p positives evenly over its m samples, so each batch sees the rank's rate too:
///    its j-th sample (j = 0..m-1) is a positive exactly when floor((j+1)*p/m) > floor(j*p/m).
std::vector<uint64_t> stratify(const std::vector<uint64_t>& order, const std::vector<uint8_t>& labels, int world,
                               ShardMode mode);

/// The knobs of the sampler (the driver's flags).
struct SamplerConfig {
  bool shuffle = true;                    ///< --no-shuffle turns it off
  uint64_t seed = 0;                      ///< --seed: the same on every rank
  ShardMode mode = ShardMode::kStrided;   ///< --shard strided|contiguous
  TailPolicy tail = TailPolicy::kPad;     ///< --tail pad|drop
  bool stratify = false;                  ///< --stratify
};

ShardMode parse_shard_mode(const std::string& name);  ///< "strided"|"contiguous", else ConfigError
TailPolicy parse_tail_policy(const std::string& name);  ///< "pad"|"drop", else ConfigError
const char* shard_mode_name(ShardMode m);
const char* tail_policy_name(TailPolicy t);

/// A DistributedSampler like PyTorch's, built from the four exercises: per epoch
///   positions = epoch_order(n, seed, epoch, shuffle)            (03.2)
///   order     = base.empty() ? positions : base[positions]      (sample ids)
///   order     = fit_tail(order, world, tail)                     (03.3)
///   order     = stratify(order, labels, world, mode)             (03.4, when asked)
///   indices   = shard(order, rank, world, mode)                  (03.1)
/// `base` maps positions to sample ids (e.g. ids sorted by label, to simulate click logs grouped
/// by outcome); empty means position == id.
///
/// Without `on_missing` an exercise that throws NotImplemented propagates. With it, the sampler
/// reports the exercise and carries on without it, as the skeleton's driver needs: no 03.2 → the
/// natural order; no 03.3 → drop to a multiple of world; no 03.4 → no stratification; no 03.1 →
/// every rank takes the whole order (lab 02's behaviour).
class DistributedSampler {
 public:
  using OnMissing = std::function<void(const ddplab::NotImplemented&)>;

  DistributedSampler(uint64_t n, int rank, int world, SamplerConfig config, std::vector<uint64_t> base = {},
                     std::vector<uint8_t> labels = {}, OnMissing on_missing = nullptr)
      : n_(n), rank_(rank), world_(world), config_(config), base_(std::move(base)), labels_(std::move(labels)),
        on_missing_(std::move(on_missing)) {
    if (world_ < 1 || rank_ < 0 || rank_ >= world_) throw ddplab::Error("DistributedSampler: rank outside 0..world-1");
    if (!base_.empty() && base_.size() != n_) throw ddplab::Error("DistributedSampler: base order must hold n ids");
    if (config_.stratify && labels_.empty()) throw ddplab::Error("DistributedSampler: stratify needs the labels");
    set_epoch(0);
  }

  /// Computes this epoch's indices; call at the start of every epoch (forgetting it is the bug
  /// of the same order every epoch).
  void set_epoch(int64_t epoch) {
    epoch_ = epoch;
    std::vector<uint64_t> order;
    attempt([&] { order = epoch_order(n_, config_.seed, epoch, config_.shuffle); },
            [&] {
              order.resize(n_);
              for (uint64_t i = 0; i < n_; ++i) order[i] = i;
            });
    if (!base_.empty()) {
      for (auto& p : order) p = base_.at(p);
    }
    const size_t before = order.size();
    std::vector<uint64_t> fitted;
    attempt([&] { fitted = fit_tail(order, world_, config_.tail); },
            [&] { fitted.assign(order.begin(), order.end() - static_cast<std::ptrdiff_t>(before % static_cast<size_t>(world_))); });
    padded_.clear();
    dropped_.clear();
    if (fitted.size() >= before) {
      padded_.assign(fitted.begin() + static_cast<std::ptrdiff_t>(before), fitted.end());
    } else {
      dropped_.assign(order.begin() + static_cast<std::ptrdiff_t>(fitted.size()), order.end());
    }
    if (config_.stratify) {
      attempt([&] { fitted = stratify(fitted, labels_, world_, config_.mode); }, [] {});
    }
    attempt([&] { indices_ = shard(fitted, rank_, world_, config_.mode); }, [&] { indices_ = fitted; });
  }

  int64_t epoch() const noexcept { return epoch_; }
  /// This rank's sample ids for the epoch, in visiting order.
  const std::vector<uint64_t>& indices() const noexcept { return indices_; }
  /// Samples this rank takes per epoch.
  uint64_t num_samples() const noexcept { return indices_.size(); }
  /// Samples added by kPad this epoch (seen twice), and which.
  uint64_t padding() const noexcept { return padded_.size(); }
  const std::vector<uint64_t>& padded_indices() const noexcept { return padded_; }
  /// Samples removed by kDrop this epoch (not seen), and which.
  uint64_t dropped() const noexcept { return dropped_.size(); }
  const std::vector<uint64_t>& dropped_indices() const noexcept { return dropped_; }
  const SamplerConfig& config() const noexcept { return config_; }

 private:
  template <typename Do, typename Fallback>
  void attempt(Do&& run, Fallback&& fallback) {
    if (!on_missing_) {
      run();
      return;
    }
    try {
      run();
    } catch (const ddplab::NotImplemented& e) {
      on_missing_(e);
      fallback();
    }
  }

  uint64_t n_;
  int rank_, world_;
  SamplerConfig config_;
  std::vector<uint64_t> base_;
  std::vector<uint8_t> labels_;
  OnMissing on_missing_;
  int64_t epoch_ = 0;
  std::vector<uint64_t> indices_, padded_, dropped_;
};

inline ShardMode parse_shard_mode(const std::string& name) {
  if (name == "strided") return ShardMode::kStrided;
  if (name == "contiguous") return ShardMode::kContiguous;
  throw ddplab::ConfigError("--shard '" + name + "': expected strided or contiguous");
}
inline TailPolicy parse_tail_policy(const std::string& name) {
  if (name == "pad") return TailPolicy::kPad;
  if (name == "drop") return TailPolicy::kDrop;
  throw ddplab::ConfigError("--tail '" + name + "': expected pad or drop");
}
inline const char* shard_mode_name(ShardMode m) { return m == ShardMode::kStrided ? "strided" : "contiguous"; }
inline const char* tail_policy_name(TailPolicy t) { return t == TailPolicy::kPad ? "pad" : "drop"; }

}  // namespace lab03

// Lab 03: the DistributedSampler built from the four exercises of lab03.h, as the driver
// (main.cpp) and the tests use it. It is here, not in the student file, so that its contract is
// the same for everyone; read it to see how your functions compose into one epoch's indices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddplab/data/loader.h"
#include "ddplab/data/shard.h"
#include "lab03.h"

namespace lab03 {

/// The knobs of the sampler (the driver's flags).
struct SamplerConfig {
  bool shuffle = true;                   ///< --no-shuffle turns it off
  uint64_t seed = 0;                     ///< --seed: the same on every rank
  ShardMode mode = ShardMode::kStrided;  ///< --shard strided|contiguous
  TailPolicy tail = TailPolicy::kPad;    ///< --tail pad|drop
  bool stratify = false;                 ///< --stratify
};

ShardMode parse_shard_mode(const std::string& name);    ///< "strided"|"contiguous", else ConfigError
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
      : n_(n),
        rank_(rank),
        world_(world),
        config_(config),
        base_(std::move(base)),
        labels_(std::move(labels)),
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
            [&] { order = ddplab::data::sequential_order(n_); });
    if (!base_.empty()) {
      for (auto& p : order) p = base_.at(p);
    }
    order_digest_ = ddplab::data::fnv1a64(order.data(), order.size() * sizeof(uint64_t));
    const size_t before = order.size();
    std::vector<uint64_t> fitted;
    attempt([&] { fitted = fit_tail(order, world_, config_.tail); },
            [&] {
              fitted.assign(order.begin(),
                            order.end() - static_cast<std::ptrdiff_t>(before % static_cast<size_t>(world_)));
            });
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
  /// FNV-1a of the epoch's whole order (before the tail and the shards): the same on every rank
  /// exactly when the ranks share one order, which sharding needs (the grader compares them).
  uint64_t order_digest() const noexcept { return order_digest_; }
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
  /// "shard strided, tail pad (1 padded, 0 dropped), shuffle on, stratify off; 2501 samples x 2 rank(s)".
  std::string describe() const {
    return fmt::format("shard {}, tail {} ({} padded, {} dropped), shuffle {}, stratify {}; {} samples x {} rank(s)",
                       shard_mode_name(config_.mode), tail_policy_name(config_.tail), padding(), dropped(),
                       config_.shuffle ? "on" : "off", config_.stratify ? "on" : "off", num_samples(), world_);
  }
  /// The sampler's settings and this epoch's sizes, for the run report.
  nlohmann::json to_json() const {
    return {{"shard", shard_mode_name(config_.mode)},
            {"tail", tail_policy_name(config_.tail)},
            {"shuffle", config_.shuffle},
            {"stratify", config_.stratify},
            {"num_samples", num_samples()},
            {"padded", padding()},
            {"dropped", dropped()}};
  }

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
  uint64_t order_digest_ = 0;
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

/// 1 for each of the first `n` samples of `ds` that is a click, else 0.
inline std::vector<uint8_t> click_labels(const ddplab::data::Dataset& ds, uint64_t n) {
  std::vector<uint8_t> labels(n);
  for (uint64_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(ds[i].label != 0);
  return labels;
}

/// Sample ids grouped by outcome, as click logs often are: every non-click, then every click,
/// each group in id order.
inline std::vector<uint64_t> label_sorted_order(const std::vector<uint8_t>& labels) {
  std::vector<uint64_t> order = ddplab::data::sequential_order(labels.size());
  std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return labels[a] < labels[b]; });
  return order;
}

}  // namespace lab03

// Lab 04 (when gradients travel): the gradient synchronisations the student builds in
// lab04_student.cpp, from buckets reduced after backward (04.1) to buckets launched from autograd
// hooks while backward still runs (04.2), and parameters a step does not use (04.3). Both classes
// plug into the runtime's GradSync interface (ddplab/dist/grad_sync.h): the driver, the tests and
// the grader run them exactly like the runtime's own per-parameter sync, which is their oracle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/function.h>
#include <torch/torch.h>

#include "ddplab/dist/communicator.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/error.h"
#include "ddplab/torch_compat.h"

namespace lab04 {

/// The owning pointer to an autograd node (a parameter's AccumulateGrad, an Edge's function):
/// std::shared_ptr<Node> in LibTorch 1.13, c10::intrusive_ptr<Node> in 2.x. Either way it has
/// get() and ->, and compares with nullptr.
using NodePtr = ddplab::compat::NodePtr;

using ddplab::dist::Bucket;
using ddplab::dist::Communicator;

/// Bucket size caps, PyTorch DDP's defaults: a small first bucket (1 MiB) so that the first
/// collective can start early in backward, then buckets of up to 25 MiB (--bucket-cap-mb), few
/// enough that the per-collective latency is paid a few times per step, not once per tensor.
struct BucketCaps {
  int64_t first_bytes = int64_t{1} << 20;  ///< the limit of bucket 0
  int64_t cap_bytes = int64_t{25} << 20;   ///< the limit of every later bucket
};

/// Bytes of a tensor's elements (numel x element size): a bucket's share of a collective.
inline int64_t tensor_bytes(const torch::Tensor& t) {
  return static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
}

/// Exercise 04.1a: the bucket layout PyTorch DDP gives `params` (c10d's
/// compute_bucket_assignment_by_size, over the parameters in gradient-ready order).
///
/// Contract:
///  - Walk the parameters in REVERSE order (backward produces the last-registered parameters'
///    gradients first). Keep one open bucket per (dtype, device): a parameter joins the open
///    bucket of its own dtype and device, whose size grows by tensor_bytes(p).
///  - Each (dtype, device) has its own current limit, first `caps.first_bytes`; when an open
///    bucket's size reaches its limit (size >= limit) it is closed, and from then on that dtype and
///    device's limit is `caps.cap_bytes`. So a bucket may exceed its limit by its last tensor, and
///    a tensor larger than the limit closes its bucket at once.
///  - At the end the buckets still open are closed. The buckets are returned in the order of their
///    first parameter in the reverse walk (the bucket holding the last-registered parameter first).
///  - Each Bucket lists its parameter indices (into `params`) in the order they were added, with
///    numel and bytes their sums. Caps below 1 byte: throw ddplab::ConfigError.
std::vector<Bucket> assign_buckets(const std::vector<torch::Tensor>& params, const BucketCaps& caps = {});

/// Exercise 04.3a: the parameters a backward from `root` will not reach.
///
/// Contract: walk the autograd graph from root.grad_fn() through Node::next_edges() (each Edge's
/// `function`; an edge without one leads nowhere), visiting each node once (graphs share nodes:
/// without a visited set the walk can be exponential); return, in increasing order, every index i
/// whose accumulators[i] (a parameter's AccumulateGrad node) was not reached. A root without a
/// grad_fn reaches nothing.
std::vector<size_t> unreached_parameters(const torch::Tensor& root, const std::vector<NodePtr>& accumulators);

/// Exercise 04.1b: after backward, one blocking allreduce per bucket.
///
/// Contract of reduce() (called by GradSync::finish() under NoGradGuard on a synced step): for
/// each bucket in order, copy its parameters' gradients into the bucket's flat buffer (a
/// parameter with no gradient contributes zeros), allreduce the buffer once (comm_.allreduce),
/// divide it by the world size, and copy each slice back into its parameter's .grad() (creating
/// the gradient where it is undefined). Exactly one collective per bucket; after it every
/// gradient is the mean over ranks, as the per-parameter oracle computes it.
class BucketedSync final : public ddplab::dist::GradSync {
 public:
  /// The layout is assign_buckets(params, caps); one flat buffer per bucket is allocated here
  /// (zeros, its first parameter's dtype and device), once: a step allocates no model-sized memory.
  BucketedSync(Communicator& comm, const std::vector<torch::Tensor>& params, const BucketCaps& caps = {});
  /// The same with a layout of your choosing (every parameter in exactly one bucket, one dtype and
  /// device per bucket), e.g. ddplab::dist::assign_buckets's: tests this class apart from 04.1a.
  BucketedSync(Communicator& comm, const std::vector<torch::Tensor>& params, std::vector<Bucket> layout);

 private:
  void reduce() override;
  std::vector<torch::Tensor> flat_;  ///< bucket -> its flat buffer of buckets_[b].numel elements
};

/// Exercises 04.2 and 04.3: buckets launched from autograd hooks while backward still runs.
///
/// 04.2, the constructor: for each parameter i, take its gradient accumulator (the AccumulateGrad
/// node that writes .grad(): torch::autograd::impl::grad_accumulator(params_[i])), keep it in
/// `accumulators_` (the tensor holds it only weakly) and add a post hook that calls on_ready(i)
/// (add_post_hook with a torch::autograd::utils::LambdaPostHook, keeping the key it returns in
/// `hook_keys_`). A post hook runs AFTER the gradient was added into .grad(): what the bucket
/// needs, also after no_sync() micro-steps. (A Tensor::register_hook hook runs before.)
/// The destructor (given) removes the hooks.
///
/// 04.2, a synced step: arm() resets the per-step state (nothing ready, no bucket launched);
/// on_ready(i) copies parameter i's gradient into its slot of its bucket's buffer and marks it
/// ready (ready_[i] = true, one less in missing_ of its bucket); when bucket `next_` has all its
/// parameters ready it is launched
/// (pending_[b] = comm_.allreduce_async(flat_[b])), then the next one if it is complete too, and
/// so on: buckets are launched in bucket order on every rank, a complete bucket waiting for its
/// predecessors (collectives are matched across ranks by the order they are issued). reduce()
/// waits for every bucket in order, divides it by the world size and copies it back into the
/// gradients. The step must issue exactly one collective per bucket. on_ready() does nothing when
/// the step is not armed (a backward inside no_sync(), or outside a step); it may run on the
/// autograd engine's thread: hold `mu_`.
///
/// 04.3, parameters this step does not use (find_unused): a parameter that no path from the loss
/// reaches never gets a gradient, so its hook never fires and its bucket would never be launched.
/// With find_unused, arm() finds them (unreached_parameters from backward_root(), the loss), lists
/// them in unused_ and marks each ready with a zero gradient (its slot zeroed), launching the
/// buckets that completes, before backward starts, as DDP's find_unused_parameters does.
/// Without find_unused, a bucket with an unused parameter stays unlaunched and reduce() stops with
/// the error of bucket_not_launched() (given) instead of waiting forever.
class OverlapSync final : public ddplab::dist::GradSync {
 public:
  OverlapSync(Communicator& comm, const std::vector<torch::Tensor>& params, const BucketCaps& caps = {},
              bool find_unused = false);
  /// The same with a layout of your choosing (as BucketedSync's): tests 04.2 apart from 04.1a.
  OverlapSync(Communicator& comm, const std::vector<torch::Tensor>& params, std::vector<Bucket> layout,
              bool find_unused = false);
  ~OverlapSync() override;

  bool finds_unused() const noexcept { return find_unused_; }
  /// Parameters arm() marked unused in the last synced step (04.3), in index order.
  const std::vector<size_t>& last_unused() const noexcept { return unused_; }

 private:
  void arm() override;
  void reduce() override;
  /// The hook's body: parameter i's gradient is in .grad().
  void on_ready(size_t i);
  /// Parameter i's slice of its bucket's flat buffer (flat_[bucket_of_[i]] from offset_[i]).
  torch::Tensor slot(size_t i) { return flat_[bucket_of_[i]].narrow(0, offset_[i], params_[i].numel()); }
  /// The error reduce() raises for bucket b, never launched: names the bucket and the parameters
  /// of it that are not ready (given).
  ddplab::Error bucket_not_launched(size_t b) const;

  bool find_unused_;
  std::vector<torch::Tensor> flat_;        ///< bucket -> flat buffer
  std::vector<size_t> bucket_of_;          ///< parameter -> its bucket
  std::vector<int64_t> offset_;            ///< parameter -> first element of its slot
  std::vector<NodePtr> accumulators_;      ///< parameter -> AccumulateGrad
  std::vector<std::uintptr_t> hook_keys_;  ///< parameter -> its post hook
  std::mutex mu_;
  bool armed_ = false;                                           ///< a synced step is open
  std::vector<bool> ready_;                                      ///< parameter -> packed this step
  std::vector<size_t> missing_;                                  ///< bucket -> parameters not yet ready
  std::vector<std::shared_ptr<ddplab::dist::Pending>> pending_;  ///< bucket -> its collective, once launched
  size_t next_ = 0;                                              ///< the first bucket not yet launched
  std::vector<size_t> unused_;                                   ///< 04.3: marked unused this step
};

// ---- given ----

/// Throws ddplab::ConfigError unless every one of `n` parameters is in exactly one bucket, no bucket
/// is empty, and each bucket's numel and bytes are its parameters' sums (a layout the syncs can use).
inline std::vector<Bucket> checked_layout(std::vector<Bucket> layout, const std::vector<torch::Tensor>& params) {
  std::vector<int> seen(params.size(), 0);
  for (size_t b = 0; b < layout.size(); ++b) {
    int64_t numel = 0, bytes = 0;
    if (layout[b].params.empty()) throw ddplab::ConfigError(fmt::format("bucket layout: bucket {} is empty", b));
    for (size_t i : layout[b].params) {
      if (i >= params.size() || seen[i]++ > 0) {
        throw ddplab::ConfigError(
            fmt::format("bucket layout: parameter {} in bucket {} is out of range or in two buckets", i, b));
      }
      numel += params[i].numel();
      bytes += tensor_bytes(params[i]);
    }
    if (numel != layout[b].numel || bytes != layout[b].bytes) {
      throw ddplab::ConfigError(
          fmt::format("bucket layout: bucket {} says {} elements and {} bytes, its parameters "
                      "have {} and {}",
                      b, layout[b].numel, layout[b].bytes, numel, bytes));
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (seen[i] == 0) throw ddplab::ConfigError(fmt::format("bucket layout: parameter {} is in no bucket", i));
  }
  return layout;
}

inline OverlapSync::~OverlapSync() {
  // The hooks point at this object, and the parameters (with their accumulators) outlive it.
  for (size_t i = 0; i < hook_keys_.size() && i < accumulators_.size(); ++i) {
    accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
}

inline ddplab::Error OverlapSync::bucket_not_launched(size_t b) const {
  std::vector<std::string> names;
  for (size_t i : buckets_[b].params) {
    if (!ready_[i]) names.push_back(fmt::format("#{} ({})", i, fmt::join(params_[i].sizes(), "x")));
  }
  if (names.empty()) {
    // Every parameter of it is ready: not an unused parameter, the launch bookkeeping missed it.
    return ddplab::Error(fmt::format(
        "bucket {} of {} ({} bytes) was never launched although every one of its parameters is ready in this "
        "step (next_ = {}, missing_[{}] = {}): the launch bookkeeping of exercise 04.2 missed it. arm() must reset "
        "missing_, pending_ and next_ for each step; each ready parameter takes one off its bucket's missing_; "
        "bucket next_ is launched once complete, then every complete bucket after it (a loop, not one)",
        b, buckets_.size(), buckets_[b].bytes, next_, b, missing_[b]));
  }
  return ddplab::Error(fmt::format(
      "bucket {} of {} ({} bytes) was never launched: parameter(s) {} received no gradient in this "
      "backward (not used by this step's forward on this rank), so the bucket never became ready. The other "
      "ranks wait in its allreduce. Mark unused parameters ready before backward (exercise 04.3, --find-unused), "
      "as DDP's find_unused_parameters does",
      b, buckets_.size(), buckets_[b].bytes, fmt::join(names, ", ")));
}

}  // namespace lab04

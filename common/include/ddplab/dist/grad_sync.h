// Gradient synchronisation for data-parallel training (lab 04): one interface, three strategies
// selected by --sync (per-param, bucketed, overlap), all of them talking only to a Communicator so
// that the same code runs on Gloo, NCCL or a fake in a test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddplab/dist/communicator.h"

namespace ddplab::dist {

/// The rungs of the ladder, from slow and obviously correct to fast:
/// - kPerParam: after backward, one blocking allreduce per parameter (the oracle in tests).
/// - kBucketed: after backward, one blocking allreduce per bucket of gradients.
/// - kOverlap:  each bucket's allreduce starts during backward, as soon as its gradients are ready.
/// - kSparse:   embedding tables exchange only the rows this step touched (allgather of row ids
///              and rows, summed locally); every other parameter goes through kBucketed. For
///              DeepFM at batch 512 that is ~1 MB per rank instead of 13.4 MB (gradient-sync.md).
///              From before_backward() on, the other parameters' gradients are views of its bucket
///              buffers (PyTorch DDP's gradient_as_bucket_view): backward adds into the buffers and
///              the average stays there, with no copy in or out; a gradient kept across steps is
///              overwritten by the next one (clone() it to keep it).
enum class SyncStrategy { kPerParam, kBucketed, kOverlap, kSparse };

/// "per-param", "bucketed" or "overlap"; anything else is a ConfigError naming --sync and the value.
SyncStrategy parse_sync_strategy(const std::string& name);
/// The name parse_sync_strategy accepts.
const char* sync_strategy_name(SyncStrategy s);

/// Bucket size caps, PyTorch DDP's defaults (references.md): a small first bucket so the first
/// collective starts early in the backward pass, then buckets of up to 25 MiB.
struct BucketOptions {
  int64_t first_bucket_bytes = int64_t{1} << 20;  ///< cap of bucket 0 (1 MiB)
  int64_t bucket_cap_bytes = int64_t{25} << 20;   ///< cap of every later bucket (25 MiB)
  /// kSparse: a 2-D parameter with at least this many rows is an embedding table, synced by rows.
  int64_t sparse_min_rows = 4096;
  /// kSparse: when the rows all ranks touched could exceed this fraction of the table (max rows
  /// touched on any rank x world size), the dense allreduce is cheaper and is used instead.
  double sparse_max_density = 0.5;
};

/// One bucket: the gradients reduced by one collective, packed into one flat buffer.
struct Bucket {
  std::vector<size_t> params;  ///< indices into the parameter list, in their order in the buffer
  int64_t numel = 0;           ///< elements of the flat buffer
  int64_t bytes = 0;           ///< bytes of the flat buffer (the collective's payload)
};

/// Assigns parameters to buckets: walking the parameters in REVERSE order (the order backward
/// produces their gradients), a parameter joins the current bucket unless that would take it over
/// its cap (first_bucket_bytes for bucket 0, bucket_cap_bytes after), or its dtype or device
/// differs (one flat buffer holds one dtype on one device); then it starts a new bucket. A
/// parameter larger than the cap gets a bucket of its own. Throws ConfigError for caps below 1.
std::vector<Bucket> assign_buckets(const std::vector<torch::Tensor>& params, const BucketOptions& opts = {});

/// One bucket per parameter, in parameter order: the per-param layout (kPerParam, and a GradSync
/// subclass whose reduce() handles one tensor at a time).
std::vector<Bucket> one_bucket_per_param(const std::vector<torch::Tensor>& params);

/// The sparse rung's two local operations on an embedding table's gradient (also timed by
/// `ddplab forecast`): the rows that hold anything, as int64 ids (a row's absolute values sum to 0
/// exactly when all are 0; inf and NaN count as touched), and the average of the listed rows
/// (divided by `world`; a row may be listed more than once: every copy writes the same quotient,
/// read before any write). Only touched rows can be non-zero, so dividing them is dividing the table.
torch::Tensor touched_rows(const torch::Tensor& grad);
void average_rows_(torch::Tensor& grad, const torch::Tensor& rows, int world);

/// Communication of the last synced step (from before_backward() to the end of finish()), read
/// from the communicator's counters. Zero after an accumulation step inside no_sync().
struct SyncStepStats {
  int64_t collectives = 0;    ///< collectives issued (== buckets().size() for every strategy)
  int64_t bytes = 0;          ///< their payload bytes on this rank
  double wait_seconds = 0.0;  ///< time spent waiting inside the collectives
};

/// Synchronises gradients across ranks. Per training step:
///
///     sync.before_backward(loss);   // arms the gradient hooks (overlap); a no-op otherwise
///     loss.backward();
///     sync.finish();            // returns when every .grad() holds the average over ranks
///
/// Time spent in finish() is the step's exposed communication (the lab wraps it in Phase::kComm).
/// After finish() every parameter's gradient is defined: a parameter that got no gradient on this
/// rank contributes zeros, so all ranks hold the same average and stay in step.
///
/// Gradient accumulation: inside `auto guard = sync.no_sync();` before_backward() and finish()
/// communicate nothing and gradients just add up in .grad(); the next synced step reduces the
/// accumulated sum. A no_sync scope should cover whole micro-steps: a step already armed by
/// before_backward() is still completed by finish().
///
/// Every rank must construct the same GradSync over the same parameters (same shapes, same order)
/// and run the same sequence of synced steps. Not thread-safe; the parameters must outlive it.
class GradSync {
 public:
  /// RAII scope of gradient accumulation (see above). Scopes may nest.
  class NoSync {
   public:
    explicit NoSync(GradSync& sync);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    GradSync& sync_;
    bool previous_;
  };

  virtual ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  SyncStrategy strategy() const noexcept { return strategy_; }
  /// `loss`: the tensor whose backward() follows (optional). A strategy that looks for parameters
  /// the step will not reach (DDP's find_unused_parameters, lab 04's exercise 04.3) walks the
  /// autograd graph from it; it is held only until finish().
  void before_backward(const torch::Tensor& loss = torch::Tensor());
  void finish();
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }
  /// False inside a no_sync() scope.
  bool syncing() const noexcept { return enabled_; }

  /// One entry per collective of a synced step, in the order they are issued. Per-param: one
  /// bucket per parameter, in parameters() order.
  const std::vector<Bucket>& buckets() const noexcept { return buckets_; }
  const std::vector<torch::Tensor>& params() const noexcept { return params_; }
  const SyncStepStats& last_step() const noexcept { return last_; }

 protected:
  GradSync(SyncStrategy strategy, Communicator& comm, std::vector<torch::Tensor> params, std::vector<Bucket> buckets);
  /// Called by before_backward() on a synced step.
  virtual void arm() {}
  /// The `loss` given to before_backward() for the step now open (undefined if none was given).
  const torch::Tensor& backward_root() const noexcept { return root_; }
  /// Reduces and averages every gradient; called by finish() on a synced step.
  virtual void reduce() = 0;

  Communicator& comm_;
  std::vector<torch::Tensor> params_;
  std::vector<Bucket> buckets_;

 private:
  SyncStrategy strategy_;
  bool enabled_ = true;     // false inside no_sync()
  bool step_open_ = false;  // before_backward() ran on a synced step and finish() has not yet
  torch::Tensor root_;      // before_backward()'s loss, until finish()
  CommStats start_;
  SyncStepStats last_;
};

/// A GradSync whose reduction is `reduce`, e.g. a hand-written loop of all-reduces (lab 02's
/// exercise 02.3): the step calls it inside finish(), and its collectives are counted like any
/// strategy's. Reported as per-param, with one bucket per parameter.
std::unique_ptr<GradSync> make_function_sync(Communicator& comm, const std::vector<torch::Tensor>& params,
                                             std::function<void()> reduce);

/// Creates the strategy over `params` (e.g. module.parameters(); each must require grad).
std::unique_ptr<GradSync> make_grad_sync(SyncStrategy strategy, Communicator& comm,
                                         const std::vector<torch::Tensor>& params, const BucketOptions& opts = {});

}  // namespace ddplab::dist

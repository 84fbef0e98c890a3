// Lab 04 exercises: gradient buckets as PyTorch DDP lays them out, reduced after backward (04.1)
// or launched from autograd hooks while backward still runs (04.2), and parameters a step does
// not use (04.3). Contracts: lab04.h.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <algorithm>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "lab04.h"

namespace lab04 {

std::vector<Bucket> assign_buckets(const std::vector<torch::Tensor>& params, const BucketCaps& caps) {
  // BEGIN STUDENT CODE (04.1: DDP's bucket layout)
  throw ddplab::NotImplemented("04.1", "assign_buckets: DDP's layout, walking the parameters in reverse");
  // END STUDENT CODE
}

std::vector<size_t> unreached_parameters(const torch::Tensor& root, const std::vector<NodePtr>& accumulators) {
  // BEGIN STUDENT CODE (04.3: the parameters a backward will not reach)
  throw ddplab::NotImplemented("04.3", "unreached_parameters: walk the graph from root.grad_fn()");
  // END STUDENT CODE
}

BucketedSync::BucketedSync(Communicator& comm, const std::vector<torch::Tensor>& params, const BucketCaps& caps)
    : BucketedSync(comm, params, assign_buckets(params, caps)) {}

BucketedSync::BucketedSync(Communicator& comm, const std::vector<torch::Tensor>& params, std::vector<Bucket> layout)
    : GradSync(ddplab::dist::SyncStrategy::kBucketed, comm, params, checked_layout(std::move(layout), params)) {
  for (const Bucket& b : buckets_) {
    const torch::Tensor& first = params_[b.params.front()];
    flat_.push_back(torch::zeros({b.numel}, first.options().requires_grad(false)));
  }
}

void BucketedSync::reduce() {
  // BEGIN STUDENT CODE (04.1: one allreduce per bucket)
  throw ddplab::NotImplemented("04.1", "BucketedSync::reduce: flatten, one allreduce per bucket, average, unflatten");
  // END STUDENT CODE
}

OverlapSync::OverlapSync(Communicator& comm, const std::vector<torch::Tensor>& params, const BucketCaps& caps,
                         bool find_unused)
    : OverlapSync(comm, params, assign_buckets(params, caps), find_unused) {}

OverlapSync::OverlapSync(Communicator& comm, const std::vector<torch::Tensor>& params, std::vector<Bucket> layout,
                         bool find_unused)
    : GradSync(ddplab::dist::SyncStrategy::kOverlap, comm, params, checked_layout(std::move(layout), params)),
      find_unused_(find_unused),
      bucket_of_(params_.size()),
      offset_(params_.size()),
      ready_(params_.size(), false),
      missing_(buckets_.size(), 0),
      pending_(buckets_.size()) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const torch::Tensor& first = params_[buckets_[b].params.front()];
    flat_.push_back(torch::zeros({buckets_[b].numel}, first.options().requires_grad(false)));
    int64_t offset = 0;
    for (size_t i : buckets_[b].params) {
      bucket_of_[i] = b;
      offset_[i] = offset;
      offset += params_[i].numel();
    }
  }
  // BEGIN STUDENT CODE (04.2: a hook after each gradient's accumulation)
  throw ddplab::NotImplemented("04.2", "OverlapSync: a post hook on each parameter's gradient accumulator");
  // END STUDENT CODE
}

void OverlapSync::arm() {
  std::lock_guard<std::mutex> lock(mu_);
  // BEGIN STUDENT CODE (04.2: a new step)
  throw ddplab::NotImplemented("04.2", "OverlapSync::arm: reset the step's state");
  // END STUDENT CODE
  if (!find_unused_) return;
  DDPLAB_CHECK(backward_root().defined(), "find_unused needs the loss: call before_backward(loss)");
  // BEGIN STUDENT CODE (04.3: mark the parameters this step does not reach)
  throw ddplab::NotImplemented("04.3", "OverlapSync::arm: mark the unreached parameters ready");
  // END STUDENT CODE
}

void OverlapSync::on_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  DDPLAB_CHECK(!armed_ || params_[i].grad().defined(),
               fmt::format("parameter {} has no gradient when its ready hook runs: the hook runs before the "
                           "gradient's accumulation into .grad() (a tensor hook?); use a post hook on its gradient "
                           "accumulator (04.2)",
                           i));
  DDPLAB_CHECK(!armed_ || !pending_[bucket_of_[i]],
               fmt::format("parameter {}'s gradient arrived after its bucket {} was launched: the bucket's allreduce "
                           "started before all its gradients were packed, and reads (or has summed) a slot still to "
                           "be written; launch a bucket when its last gradient is in (04.2)",
                           i, bucket_of_[i]));
  // BEGIN STUDENT CODE (04.2: pack a ready gradient, launch the complete buckets in order)
  throw ddplab::NotImplemented("04.2", "OverlapSync::on_ready: pack, then launch complete buckets in order");
  // END STUDENT CODE
}

void OverlapSync::reduce() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!pending_[b]) throw bucket_not_launched(b);
    // BEGIN STUDENT CODE (04.2: wait, average, unflatten)
    throw ddplab::NotImplemented("04.2", "OverlapSync::reduce: wait for bucket b, average, unflatten");
    // END STUDENT CODE
  }
}

}  // namespace lab04

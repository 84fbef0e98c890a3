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
  if (caps.first_bytes < 1 || caps.cap_bytes < 1) {
    throw ddplab::ConfigError(fmt::format("bucket caps must be at least 1 byte (first bucket {}, later buckets {})",
                                          caps.first_bytes, caps.cap_bytes));
  }
  struct Open {
    Bucket bucket;
    int64_t limit = 0;
    size_t first_seen = 0;  // position of its first parameter in the reverse walk
  };
  // One open bucket per (dtype, device), in the order the key was first seen.
  std::vector<std::pair<std::string, Open>> open;
  std::vector<std::pair<size_t, Bucket>> done;  // (first position in the walk, bucket)
  size_t pos = 0;
  for (size_t k = params.size(); k-- > 0; ++pos) {
    const torch::Tensor& p = params[k];
    const std::string key = fmt::format("{}/{}", c10::toString(p.scalar_type()), p.device().str());
    auto it = std::find_if(open.begin(), open.end(), [&](const auto& o) { return o.first == key; });
    if (it == open.end()) {
      open.push_back({key, Open{Bucket{}, caps.first_bytes, 0}});
      it = std::prev(open.end());
    }
    Open& o = it->second;
    if (o.bucket.params.empty()) o.first_seen = pos;
    o.bucket.params.push_back(k);
    o.bucket.numel += p.numel();
    o.bucket.bytes += tensor_bytes(p);
    if (o.bucket.bytes >= o.limit) {
      done.emplace_back(o.first_seen, std::move(o.bucket));
      o.bucket = Bucket{};
      o.limit = caps.cap_bytes;
    }
  }
  for (auto& [key, o] : open) {
    if (!o.bucket.params.empty()) done.emplace_back(o.first_seen, std::move(o.bucket));
  }
  std::stable_sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Bucket> out;
  for (auto& d : done) out.push_back(std::move(d.second));
  return out;
  // END STUDENT CODE
}

std::vector<size_t> unreached_parameters(const torch::Tensor& root, const std::vector<NodePtr>& accumulators) {
  // BEGIN STUDENT CODE (04.3: the parameters a backward will not reach)
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<const torch::autograd::Node*> todo;
  if (root.defined() && root.grad_fn()) todo.push_back(root.grad_fn().get());
  while (!todo.empty()) {
    const torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    for (const torch::autograd::Edge& e : n->next_edges()) {
      if (e.function && !seen.count(e.function.get())) todo.push_back(e.function.get());
    }
  }
  std::vector<size_t> out;
  for (size_t i = 0; i < accumulators.size(); ++i) {
    if (!seen.count(accumulators[i].get())) out.push_back(i);
  }
  return out;
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
  for (size_t b = 0; b < buckets_.size(); ++b) {
    torch::Tensor& flat = flat_[b];
    int64_t offset = 0;
    for (size_t i : buckets_[b].params) {  // flatten
      const torch::Tensor& g = params_[i].grad();
      torch::Tensor dst = flat.narrow(0, offset, params_[i].numel());
      if (g.defined()) {
        dst.view(g.sizes()).copy_(g);
      } else {
        dst.zero_();  // unused on this rank: contributes nothing to the sum
      }
      offset += params_[i].numel();
    }
    comm_.allreduce(flat);
    flat.div_(comm_.size());
    offset = 0;
    for (size_t i : buckets_[b].params) {  // unflatten
      const torch::Tensor& p = params_[i];
      torch::Tensor& g = p.mutable_grad();
      if (!g.defined()) g = torch::empty_like(p);
      g.copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
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
  for (size_t i = 0; i < params_.size(); ++i) {
    NodePtr acc = torch::autograd::impl::grad_accumulator(params_[i]);
    DDPLAB_CHECK(acc != nullptr, fmt::format("parameter {} has no gradient accumulator (not a leaf?)", i));
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_ready(i);
          return outputs;
        })));
    accumulators_.push_back(std::move(acc));
  }
  // END STUDENT CODE
}

void OverlapSync::arm() {
  std::lock_guard<std::mutex> lock(mu_);
  // BEGIN STUDENT CODE (04.2: a new step)
  std::fill(ready_.begin(), ready_.end(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    missing_[b] = buckets_[b].params.size();
    pending_[b].reset();
  }
  next_ = 0;
  unused_.clear();
  armed_ = true;
  // END STUDENT CODE
  if (!find_unused_) return;
  DDPLAB_CHECK(backward_root().defined(), "find_unused needs the loss: call before_backward(loss)");
  // BEGIN STUDENT CODE (04.3: mark the parameters this step does not reach)
  unused_ = unreached_parameters(backward_root(), accumulators_);
  for (size_t i : unused_) {
    ready_[i] = true;
    slot(i).zero_();
    --missing_[bucket_of_[i]];
  }
  while (next_ < buckets_.size() && missing_[next_] == 0) {
    pending_[next_] = comm_.allreduce_async(flat_[next_]);
    ++next_;
  }
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
  if (!armed_) return;
  DDPLAB_CHECK(!ready_[i], fmt::format("parameter {} received a gradient twice in one synced step", i));
  ready_[i] = true;
  const torch::Tensor& g = params_[i].grad();
  slot(i).view(g.sizes()).copy_(g);
  --missing_[bucket_of_[i]];
  while (next_ < buckets_.size() && missing_[next_] == 0) {
    pending_[next_] = comm_.allreduce_async(flat_[next_]);
    ++next_;
  }
  // END STUDENT CODE
}

void OverlapSync::reduce() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!pending_[b]) throw bucket_not_launched(b);
    // BEGIN STUDENT CODE (04.2: wait, average, unflatten)
    pending_[b]->wait();
    flat_[b].div_(comm_.size());
    for (size_t i : buckets_[b].params) {
      const torch::Tensor& p = params_[i];
      torch::Tensor& g = p.mutable_grad();
      if (!g.defined()) g = torch::empty_like(p);
      g.copy_(slot(i).view(p.sizes()));
    }
    // END STUDENT CODE
  }
}

}  // namespace lab04

// The gradient synchronisation ladder: per-parameter allreduce (the oracle), bucketed allreduce
// after backward, and bucketed allreduce overlapped with backward through autograd hooks. Each
// rung only talks to the Communicator interface.
#include "ddplab/dist/grad_sync.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "ddplab/error.h"
#include "ddplab/memory.h"
#include "ddplab/fused_adam.h"
#include "ddplab/torch_compat.h"

namespace ddplab::dist {
namespace {

void check_dense(const torch::Tensor& grad, size_t index) {
  DDPLAB_CHECK(grad.layout() == torch::kStrided,
               fmt::format("grad sync: parameter {} has a sparse gradient; only dense gradients are supported "
                           "(build torch::nn::Embedding without sparse=true)",
                           index));
}

/// Sum over ranks -> average. One helper so every strategy rounds the same way.
void average_(torch::Tensor& t, int world) { t.div_(world); }

}  // namespace

SyncStrategy parse_sync_strategy(const std::string& name) {
  if (name == "per-param") return SyncStrategy::kPerParam;
  if (name == "bucketed") return SyncStrategy::kBucketed;
  if (name == "overlap") return SyncStrategy::kOverlap;
  if (name == "sparse") return SyncStrategy::kSparse;
  throw ConfigError(fmt::format("--sync '{}': unknown strategy (choose per-param, bucketed, overlap or sparse)", name));
}

const char* sync_strategy_name(SyncStrategy s) {
  switch (s) {
    case SyncStrategy::kPerParam: return "per-param";
    case SyncStrategy::kBucketed: return "bucketed";
    case SyncStrategy::kOverlap: return "overlap";
    case SyncStrategy::kSparse: return "sparse";
  }
  return "unknown";
}

std::vector<Bucket> assign_buckets(const std::vector<torch::Tensor>& params, const BucketOptions& opts) {
  if (opts.first_bucket_bytes < 1 || opts.bucket_cap_bytes < 1) {
    throw ConfigError(fmt::format("bucket caps must be at least 1 byte (first bucket {}, later buckets {})",
                                  opts.first_bucket_bytes, opts.bucket_cap_bytes));
  }
  // Reverse order because backward produces gradients roughly in reverse of the order the forward
  // pass used the parameters, which for most models is the order they were registered. Bucket 0
  // then fills first and its collective can start while the rest of backward still runs; it is
  // small (1 MiB) so that it fills, and goes out, early. Later buckets are large because each
  // collective pays a fixed latency: fewer, bigger messages use the link better.
  // (PyTorch's reducer differs in two details: it assigns over parameters() in forward order and
  // reverses the list of buckets afterwards, so its small bucket holds the first-registered
  // parameters and goes out LAST, to shorten the tail after backward; and it closes a bucket once
  // it reaches the cap, so a bucket may overshoot by one tensor. Here a bucket never exceeds its
  // cap unless it holds a single parameter, a rule a student can check by hand.)
  std::vector<Bucket> buckets;
  Bucket current;
  torch::Dtype dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  auto cap = [&] { return buckets.empty() ? opts.first_bucket_bytes : opts.bucket_cap_bytes; };
  for (size_t k = params.size(); k-- > 0;) {
    const torch::Tensor& p = params[k];
    const int64_t bytes = memory::bytes_of(p);
    const bool fits = current.bytes + bytes <= cap() && p.scalar_type() == dtype && p.device() == device;
    if (!current.params.empty() && !fits) {
      buckets.push_back(std::move(current));
      current = Bucket();
    }
    if (current.params.empty()) {
      dtype = p.scalar_type();
      device = p.device();
    }
    current.params.push_back(k);
    current.numel += p.numel();
    current.bytes += bytes;
  }
  if (!current.params.empty()) buckets.push_back(std::move(current));
  return buckets;
}

// ---------------------------------------------------------------------------------------------
// GradSync: the step protocol and no_sync, shared by all strategies.

GradSync::NoSync::NoSync(GradSync& sync) : sync_(sync), previous_(sync.enabled_) { sync_.enabled_ = false; }
GradSync::NoSync::~NoSync() { sync_.enabled_ = previous_; }

GradSync::GradSync(SyncStrategy strategy, Communicator& comm, std::vector<torch::Tensor> params,
                   std::vector<Bucket> buckets)
    : comm_(comm), params_(std::move(params)), buckets_(std::move(buckets)), strategy_(strategy) {}

GradSync::~GradSync() = default;

void GradSync::before_backward(const torch::Tensor& loss) {
  if (!enabled_) return;
  DDPLAB_CHECK(!step_open_, "grad sync: before_backward() called twice without finish() in between");
  step_open_ = true;
  start_ = comm_.stats();
  root_ = loss;
  try {
    arm();
  } catch (...) {  // the step never opened: the next before_backward() must not say "twice"
    step_open_ = false;
    root_ = torch::Tensor();
    throw;
  }
}

void GradSync::finish() {
  if (!step_open_) {
    if (!enabled_) {  // an accumulation micro-step: gradients stay local
      last_ = SyncStepStats();
      return;
    }
    start_ = comm_.stats();  // before_backward() was skipped: count from here
  }
  step_open_ = false;
  {
    torch::NoGradGuard no_grad;
    reduce();
  }
  root_ = torch::Tensor();  // the graph is freed by backward; do not keep its root alive
  const CommStats& now = comm_.stats();
  last_.collectives = now.total_calls() - start_.total_calls();
  last_.bytes = now.total_bytes() - start_.total_bytes();
  last_.wait_seconds = now.total_seconds() - start_.total_seconds();
}

torch::Tensor touched_rows(const torch::Tensor& grad) {
  // A sum of non-negative numbers is at least its largest term. 3x faster than g.ne(0).any(1) on
  // DeepFM's table (2.0 vs 6.5 ms, LibTorch 1.13, one thread of the 2-core VM).
  return grad.abs().sum(1).nonzero().squeeze(1);
}

void average_rows_(torch::Tensor& grad, const torch::Tensor& rows, int world) {
  // Listing each row once would cost torch::_unique: 0.8 ms for 8k rows here.
  grad.index_copy_(0, rows, grad.index_select(0, rows).div_(world));
}

std::vector<Bucket> one_bucket_per_param(const std::vector<torch::Tensor>& params) {
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < params.size(); ++i)
    buckets.push_back(Bucket{{i}, params[i].numel(), memory::bytes_of(params[i])});
  return buckets;
}

namespace {

// ---------------------------------------------------------------------------------------------
// per-param: the slow, obviously correct reference. One blocking collective per tensor, so a
// model with many small tensors pays the per-collective latency many times.

class PerParamSync final : public GradSync {
 public:
  PerParamSync(Communicator& comm, const std::vector<torch::Tensor>& params)
      : GradSync(SyncStrategy::kPerParam, comm, params, one_bucket_per_param(params)) {}

 private:
  void reduce() override {
    for (size_t i = 0; i < params_.size(); ++i) {
      const torch::Tensor& p = params_[i];
      torch::Tensor& g = p.mutable_grad();
      if (!g.defined()) g = torch::zeros_like(p);  // unused here: contribute zeros
      check_dense(g, i);
      // Transports want contiguous memory; a gradient normally has its parameter's (contiguous) layout.
      torch::Tensor t = g.is_contiguous() ? g : g.contiguous();
      comm_.allreduce(t);
      average_(t, comm_.size());
      if (!t.is_same(g)) g.copy_(t);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// bucketed: gradients live in one flat buffer per bucket (each gradient a view of its slot, made
// before backward; one replaced or dropped since is copied in), so a step issues one collective
// per bucket instead of one per tensor, and copies nothing in or out. The buffers are allocated
// once: a training step should not allocate model-sized memory.

class BucketedSync : public GradSync {
 public:
  BucketedSync(SyncStrategy strategy, Communicator& comm, const std::vector<torch::Tensor>& params,
               const BucketOptions& opts)
      : GradSync(strategy, comm, params, assign_buckets(params, opts)),
        dropped_(params_.size(), false),
        bucket_of_(params_.size()),
        offset_(params_.size()) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const torch::Tensor& first = params_[buckets_[b].params.front()];
      buffers_.push_back(
          torch::zeros({buckets_[b].numel}, torch::TensorOptions().dtype(first.scalar_type()).device(first.device())));
      int64_t offset = 0;
      for (size_t i : buckets_[b].params) {
        bucket_of_[i] = b;
        offset_[i] = offset;
        offset += params_[i].numel();
      }
    }
  }

  /// Makes the gradients views of their places in their buckets' buffers (PyTorch DDP's
  /// gradient_as_bucket_view), to be called before backward. A gradient that exists (zeroed in
  /// place by torch's zero_grad in 1.13, or holding micro-steps accumulated outside the sync) is
  /// copied into its slot once and replaced by the slot: backward then adds into the buffer itself
  /// (AccumulateGrad adds in place into a gradient that exists), and neither pack() nor unpack()
  /// copies it. A gradient the optimizer dropped (set to none: 2.x's zero_grad, the one-pass Adam)
  /// is left to backward, which writes a new tensor without zeroing or adding; pack() copies that
  /// one in and puts the slot in its place, so only unpack()'s copy is saved (zeroing the slot
  /// beforehand would cost a memset and an extra add pass for DeepFM's 10.7 MB table gradient,
  /// measured: a step's forward +0.8 ms). A gradient that is not the slot at pack() time (replaced
  /// by other code) is packed by copy; so is one that is not a dense gradient of the parameter's
  /// shape (pack() says what is wrong).
  void install_views() {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (is_view(i)) continue;
      const torch::Tensor& p = params_[i];
      const torch::Tensor& g = p.grad();
      dropped_[i] = !g.defined();
      if (!g.defined() || g.is_sparse() || g.sizes() != p.sizes()) continue;
      torch::Tensor view = view_of(i);
      view.copy_(g);
      p.mutable_grad() = view;
    }
  }

 protected:
  /// True when parameter i's gradient is its slot in the bucket buffer (install_views()).
  bool is_view(size_t i) {
    const torch::Tensor& g = params_[i].grad();
    return g.defined() && !g.is_sparse() && g.data_ptr() == slot(i).data_ptr() && g.numel() == params_[i].numel() &&
           g.is_contiguous();
  }

  /// Parameter i's gradient in its place in its bucket's buffer: copied there (zeros if it has
  /// none), and the slot made the gradient where backward created it this step (or none came), so
  /// that unpack() leaves the average in place.
  void pack(size_t i) {
    if (is_view(i)) return;  // backward wrote it there
    const bool adopt = dropped_[i];
    dropped_[i] = false;  // this step's: a finish() without before_backward() adopts nothing
    const torch::Tensor& p = params_[i];
    const torch::Tensor& g = p.grad();
    torch::Tensor dst = slot(i);
    if (!g.defined()) {
      dst.zero_();
      p.mutable_grad() = view_of(i);
      return;
    }
    check_dense(g, i);
    dst.view(g.sizes()).copy_(g);
    if (adopt) p.mutable_grad() = view_of(i);
  }

  /// Averages bucket b's reduced buffer and copies it back into the gradients.
  void unpack(size_t b) {
    average_(buffers_[b], comm_.size());
    for (size_t i : buckets_[b].params) {
      if (is_view(i)) continue;  // the average is in place
      const torch::Tensor& p = params_[i];
      const torch::Tensor src = slot(i).view(p.sizes());
      torch::Tensor& g = p.mutable_grad();
      if (!g.defined()) g = torch::empty_like(p);
      g.copy_(src);
    }
  }

  torch::Tensor slot(size_t i) { return buffers_[bucket_of_[i]].narrow(0, offset_[i], params_[i].numel()); }

  /// Slot i's memory under a tensor of its own with the parameter's shape, not an autograd view of
  /// the buffer: torch's zero_grad() (1.13) detaches every gradient in place, and a view refuses
  /// detach_(). The deleter holds the buffer, so the gradient stays valid as long as anyone holds it.
  torch::Tensor view_of(size_t i) {
    const torch::Tensor s = slot(i);
    return torch::from_blob(
        s.data_ptr(), params_[i].sizes(), [buffer = buffers_[bucket_of_[i]]](void*) {}, s.options());
  }

  /// Before backward: the gradients become their slots (install_views()), as PyTorch DDP's
  /// gradient_as_bucket_view, so neither rung copies a gradient in or out.
  void arm() override { install_views(); }

  std::vector<torch::Tensor> buffers_;  // one flat buffer per bucket
  std::vector<bool> dropped_;           // parameter -> had no gradient when the step was armed
  std::vector<size_t> bucket_of_;       // parameter -> bucket
  std::vector<int64_t> offset_;         // parameter -> first element in its bucket's buffer

 private:
  void reduce() override {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      for (size_t i : buckets_[b].params) pack(i);
      comm_.allreduce(buffers_[b]);
      unpack(b);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// overlap: a bucket's collective starts during backward, the moment its last gradient is ready,
// and runs while backward computes the gradients of earlier layers. finish() then only waits for
// what compute did not hide (typically the last buckets: the embeddings, whose gradients come
// last).
//
// Which hook. A tensor hook (Tensor::register_hook) sees the gradient of THIS backward pass
// before AccumulateGrad adds it into .grad(). After no_sync() micro-steps .grad() already holds
// earlier micro-batches' gradients, so packing the hook's value would drop them. Instead, like
// PyTorch's reducer, we attach a post hook to each parameter's AccumulateGrad node (a leaf has no
// grad_fn; impl::grad_accumulator returns the node that writes .grad()): it runs after the
// accumulation, so .grad() is the complete local sum. The variable holds that node only weakly
// and a new one would be created (without our hook) once the last graph using it is gone, so we
// keep a strong reference for as long as the hooks must fire. (LibTorch 2.1+ has
// Tensor::register_post_accumulate_grad_hook for this; 1.13 does not.)
//
// Order. Collectives are matched across ranks by the order they are issued, and gradients may
// become ready in a different order on different ranks. So bucket k is launched only after
// buckets 0..k-1, on every rank: a ready bucket waits for its predecessors. A parameter that got
// no gradient in this step never fires its hook; finish() packs it (as zeros) and launches every
// bucket still waiting, in order, so an unused parameter delays its bucket but never deadlocks.

class OverlapSync final : public BucketedSync {
 public:
  OverlapSync(Communicator& comm, const std::vector<torch::Tensor>& params, const BucketOptions& opts)
      : BucketedSync(SyncStrategy::kOverlap, comm, params, opts),
        ready_(params_.size(), false),
        remaining_(buckets_.size(), 0),
        pending_(buckets_.size()) {
    for (size_t i = 0; i < params_.size(); ++i) {
      ddplab::compat::NodePtr acc = torch::autograd::impl::grad_accumulator(params_[i]);
      DDPLAB_CHECK(acc != nullptr, fmt::format("grad sync: parameter {} has no gradient accumulator", i));
      hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(*this, i)));
      accumulators_.push_back(std::move(acc));
    }
  }

  ~OverlapSync() override {
    // The hooks point at this object; the parameters (and their accumulators) may outlive it.
    for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  }

 private:
  struct ReadyHook final : torch::autograd::FunctionPostHook {
    ReadyHook(OverlapSync& sync, size_t index) : sync_(sync), index_(index) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list& /*inputs*/) override {
      sync_.on_ready(index_);
      return outputs;
    }
    OverlapSync& sync_;
    size_t index_;
  };

  void arm() override {
    install_views();  // before the hooks are armed: backward then adds into the buckets
    std::lock_guard<std::mutex> lock(mu_);
    reset();
    armed_ = true;
  }

  void reset() {
    std::fill(ready_.begin(), ready_.end(), false);
    for (size_t b = 0; b < buckets_.size(); ++b) remaining_[b] = buckets_[b].params.size();
    next_ = 0;
  }

  // Runs inside backward (on the autograd engine's thread for the parameters' device), once per
  // parameter, after its gradient was accumulated. Unarmed (no_sync, or a backward outside a
  // step) it does nothing.
  void on_ready(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!armed_) return;
    DDPLAB_CHECK(!ready_[i],
                 fmt::format("grad sync (overlap): parameter {} received a gradient twice in one synced step; its "
                             "bucket was already sent. Run extra backward passes inside no_sync()",
                             i));
    mark_ready(i);
    launch_ready_buckets();
  }

  void mark_ready(size_t i) {
    ready_[i] = true;
    pack(i);
    --remaining_[bucket_of_[i]];
  }

  void launch_ready_buckets() {
    while (next_ < buckets_.size() && remaining_[next_] == 0) {
      pending_[next_] = comm_.allreduce_async(buffers_[next_]);
      ++next_;
    }
  }

  void reduce() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!armed_) reset();  // finish() without before_backward(): nothing was packed yet
    armed_ = false;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) mark_ready(i);  // no gradient in this backward (or hooks were not armed)
    }
    launch_ready_buckets();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      std::shared_ptr<Pending> p = std::move(pending_[b]);
      p->wait();
      unpack(b);
    }
  }

  std::vector<ddplab::compat::NodePtr> accumulators_;  // keeps the hooked nodes alive
  std::vector<std::uintptr_t> hook_keys_;
  std::mutex mu_;  // hooks may run on an autograd device thread
  bool armed_ = false;
  std::vector<bool> ready_;        // parameter -> gradient packed this step
  std::vector<size_t> remaining_;  // bucket -> parameters not yet packed
  std::vector<std::shared_ptr<Pending>> pending_;
  size_t next_ = 0;  // first bucket not yet launched
};

// ---------------------------------------------------------------------------------------------
// sparse: an embedding table's gradient is zero except in the rows the batch looked up (DeepFM at
// batch 512: at most 13,312 of 167,394 rows). Allreducing the whole table moves ~12x more bytes
// than the rows that changed. Instead each rank allgathers (row ids, rows) of the rows it touched,
// padded to the largest count, and every rank adds all ranks' rows into a zeroed gradient in rank
// order — the same sum as the allreduce (exactly so at 2 ranks; at more ranks up to the order of
// float additions), and the same bits on every rank. Other parameters go through one bucketed
// sync. When the touched rows could cover more than sparse_max_density of the table, the rows
// would cost more than the table: that table is allreduced densely (decided from the global
// maximum, so every rank takes the same path).

class SparseSync final : public GradSync {
 public:
  SparseSync(Communicator& comm, const std::vector<torch::Tensor>& params, const BucketOptions& opts)
      : GradSync(SyncStrategy::kSparse, comm, params, layout(params, opts)), opts_(opts) {
    std::vector<torch::Tensor> dense;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (is_table(params_[i], opts)) {
        tables_.push_back(i);
      } else {
        dense.push_back(params_[i]);
      }
    }
    if (!dense.empty()) dense_ = std::make_unique<BucketedSync>(SyncStrategy::kBucketed, comm, dense, opts);
    local_.resize(tables_.size());
    global_.resize(tables_.size());
  }

 private:
  static bool is_table(const torch::Tensor& p, const BucketOptions& o) {
    return p.dim() == 2 && p.size(0) >= o.sparse_min_rows;
  }

  /// The collectives of a step: the dense buckets, then one entry per table.
  static std::vector<Bucket> layout(const std::vector<torch::Tensor>& params, const BucketOptions& opts) {
    std::vector<torch::Tensor> dense;
    std::vector<size_t> dense_index;
    std::vector<Bucket> tables;
    for (size_t i = 0; i < params.size(); ++i) {
      if (is_table(params[i], opts)) {
        tables.push_back(Bucket{{i}, params[i].numel(), memory::bytes_of(params[i])});
      } else {
        dense.push_back(params[i]);
        dense_index.push_back(i);
      }
    }
    std::vector<Bucket> out = dense.empty() ? std::vector<Bucket>() : assign_buckets(dense, opts);
    for (auto& b : out) {
      for (auto& i : b.params) i = dense_index[i];
    }
    out.insert(out.end(), tables.begin(), tables.end());
    return out;
  }

  void arm() override {
    if (dense_) dense_->install_views();
  }

  void reduce() override {
    if (dense_) {
      dense_->finish();  // its views were installed by arm(): a step of its own would install them again
    }
    const int world = comm_.size();
    if (!tables_.empty() && params_[tables_.front()].grad().defined() && params_[tables_.front()].grad().is_sparse()) {
      if (world > 1) reduce_row_sparse(world);
      return;
    }
    if (world == 1) {
      // Alone, the local gradient is the average: finding rows would cost ~7 ms a step for nothing.
      for (size_t i : tables_) {
        if (!params_[i].grad().defined()) params_[i].mutable_grad() = torch::zeros_like(params_[i]);
      }
      return;
    }
    for (size_t i : tables_) {
      const torch::Tensor& p = params_[i];
      torch::Tensor& g = p.mutable_grad();
      if (!g.defined()) g = torch::zeros_like(p);
      check_dense(g, i);
      const torch::Tensor rows = touched_rows(g);
      const int64_t k = rows.size(0);
      torch::Tensor count = torch::tensor({k}, torch::TensorOptions().dtype(torch::kInt64).device(g.device()));
      std::vector<torch::Tensor> counts(static_cast<size_t>(world));
      for (auto& c : counts) c = torch::empty_like(count);
      comm_.allgather(counts, count);
      std::vector<int64_t> k_of(static_cast<size_t>(world));
      int64_t max_k = 0;
      for (int r = 0; r < world; ++r) {
        k_of[static_cast<size_t>(r)] = counts[static_cast<size_t>(r)].item<int64_t>();
        max_k = std::max(max_k, k_of[static_cast<size_t>(r)]);
      }
      if (static_cast<double>(max_k) * world > opts_.sparse_max_density * static_cast<double>(p.size(0))) {
        torch::Tensor t = g.is_contiguous() ? g : g.contiguous();
        comm_.allreduce(t);
        average_(t, world);
        if (!t.is_same(g)) g.copy_(t);
        continue;
      }
      if (max_k == 0) continue;  // no rank touched the table: its gradient stays zero
      torch::Tensor ids = torch::zeros({max_k}, rows.options());
      torch::Tensor vals = torch::zeros({max_k, p.size(1)}, g.options());
      ids.narrow(0, 0, k).copy_(rows);
      vals.narrow(0, 0, k).copy_(g.index_select(0, rows));
      std::vector<torch::Tensor> all_ids(static_cast<size_t>(world)), all_vals(static_cast<size_t>(world));
      for (auto& t : all_ids) t = torch::empty_like(ids);
      for (auto& t : all_vals) t = torch::empty_like(vals);
      comm_.allgather(all_ids, ids);
      comm_.allgather(all_vals, vals);
      g.index_fill_(0, rows, 0.0);  // the other rows are zero already: no 10 MB memset
      std::vector<torch::Tensor> touched;
      for (int r = 0; r < world; ++r) {
        const int64_t kr = k_of[static_cast<size_t>(r)];
        if (kr == 0) continue;
        touched.push_back(all_ids[static_cast<size_t>(r)].narrow(0, 0, kr));
        g.index_add_(0, touched.back(), all_vals[static_cast<size_t>(r)].narrow(0, 0, kr));
      }
      average_rows_(g, torch::cat(touched), world);
    }
  }

  // Row-sparse table gradients (DeepFMOptions::sparse_gradients): the rows are already listed, so
  // no search of the table. Each rank sums its repeated rows (in order, as the dense backward's
  // index_add_ does), then all tables travel in two collectives — one allgather of the per-table
  // row counts, one of every table's (row ids, rows) packed into one float buffer (ids bit-cast,
  // each table padded to its largest count) — and every rank adds all ranks' rows in rank order
  // and divides by the world size: the dense path's sum and average, never a 10.7 MB table. The
  // result is a row-sparse gradient listing each row once. A table whose rows could cover more
  // than sparse_max_density of it is densified and allreduced, as on the dense path.
  void reduce_row_sparse(int world) {
    const size_t n_tables = tables_.size();
    torch::Tensor counts = torch::zeros({static_cast<int64_t>(n_tables)}, torch::kInt64);
    for (size_t t = 0; t < n_tables; ++t) {
      const torch::Tensor& p = params_[tables_[t]];
      torch::Tensor& g = p.mutable_grad();
      DDPLAB_CHECK(g.defined() && g.is_sparse() && g.sparse_dim() == 1 && g.dense_dim() == 1 && g.device().is_cpu() &&
                       g.scalar_type() == torch::kFloat,
                   fmt::format("grad sync: table {} needs a row-sparse float CPU gradient like the first table's",
                               tables_[t]));
      DDPLAB_CHECK(p.size(0) <= std::numeric_limits<int32_t>::max(),
                   fmt::format("grad sync: table {} has more rows than a 32-bit row id names", tables_[t]));
      const torch::Tensor in_ids = g._indices().select(0, 0).contiguous();
      const torch::Tensor in_vals = g._values().contiguous();
      optim::RowAccumulator& acc = local_[t];
      acc.clear();
      acc.add(in_ids.data_ptr<int64_t>(), in_vals.data_ptr<float>(), in_ids.numel(), p.size(1), p.size(0),
              fmt::format("grad sync: table {}", tables_[t]));
      counts[static_cast<int64_t>(t)] = static_cast<int64_t>(acc.rows().size());
    }
    std::vector<torch::Tensor> all_counts(static_cast<size_t>(world));
    for (auto& c : all_counts) c = torch::empty_like(counts);
    comm_.allgather(all_counts, counts);
    std::vector<std::vector<int64_t>> k_of(static_cast<size_t>(world));  // [rank][table], read once
    for (int r = 0; r < world; ++r) {
      const auto c = all_counts[static_cast<size_t>(r)].accessor<int64_t, 1>();
      for (size_t t = 0; t < n_tables; ++t) k_of[static_cast<size_t>(r)].push_back(c[static_cast<int64_t>(t)]);
    }

    // Per table: the largest count, and whether its rows travel or the whole table does.
    std::vector<int64_t> max_k(n_tables, 0);
    std::vector<bool> dense(n_tables, false);
    int64_t packed = 0;
    for (size_t t = 0; t < n_tables; ++t) {
      for (int r = 0; r < world; ++r) max_k[t] = std::max(max_k[t], k_of[static_cast<size_t>(r)][t]);
      const torch::Tensor& p = params_[tables_[t]];
      dense[t] = static_cast<double>(max_k[t]) * world > opts_.sparse_max_density * static_cast<double>(p.size(0));
      if (!dense[t]) packed += max_k[t] * (1 + p.size(1));
    }
    for (size_t t = 0; t < n_tables; ++t) {
      if (!dense[t]) continue;
      const torch::Tensor& p = params_[tables_[t]];
      torch::Tensor g = p.grad().to_dense();
      comm_.allreduce(g);
      average_(g, world);
      p.mutable_grad() = g;
    }
    if (packed == 0) {
      for (size_t t = 0; t < n_tables; ++t) {
        if (!dense[t]) params_[tables_[t]].mutable_grad() = empty_rows(params_[tables_[t]]);
      }
      return;
    }
    // Packed straight from the accumulators: per table max_k 32-bit ids (their bits in floats),
    // then max_k rows; a table's padding past this rank's count is zeros.
    torch::Tensor send = torch::empty({packed}, torch::kFloat);
    float* out = send.data_ptr<float>();
    int64_t at = 0;
    for (size_t t = 0; t < n_tables; ++t) {
      if (dense[t]) continue;
      const optim::RowAccumulator& acc = local_[t];
      const int64_t w = params_[tables_[t]].size(1);
      const auto k = static_cast<int64_t>(acc.rows().size());
      auto* ids = reinterpret_cast<int32_t*>(out + at);
      for (int64_t i = 0; i < k; ++i) ids[i] = static_cast<int32_t>(acc.rows()[static_cast<size_t>(i)]);
      std::fill(ids + k, ids + max_k[t], 0);
      float* rows = out + at + max_k[t];
      std::copy(acc.sums().begin(), acc.sums().begin() + k * w, rows);
      std::fill(rows + k * w, rows + max_k[t] * w, 0.0f);
      at += max_k[t] * (1 + w);
    }
    std::vector<torch::Tensor> recv(static_cast<size_t>(world));
    for (auto& r : recv) r = torch::empty_like(send);
    comm_.allgather(recv, send);

    at = 0;
    for (size_t t = 0; t < n_tables; ++t) {
      if (dense[t]) continue;
      const torch::Tensor& p = params_[tables_[t]];
      const int64_t w = p.size(1);
      optim::RowAccumulator& acc = global_[t];
      acc.clear();
      for (int r = 0; r < world; ++r) {
        const int64_t k = k_of[static_cast<size_t>(r)][t];
        if (k == 0) continue;
        const float* part = recv[static_cast<size_t>(r)].data_ptr<float>() + at;
        acc.add(reinterpret_cast<const int32_t*>(part), part + max_k[t], k, w, p.size(0),
                fmt::format("grad sync: table {} from rank {}", tables_[t], r));
      }
      at += max_k[t] * (1 + w);
      const auto u = static_cast<int64_t>(acc.rows().size());
      torch::Tensor out_ids = torch::empty({1, u}, torch::kInt64);
      std::copy(acc.rows().begin(), acc.rows().end(), out_ids.data_ptr<int64_t>());
      // The average in the copy out of the accumulator: one pass (the division average_ does).
      const torch::Tensor out_vals =
          torch::div(torch::from_blob(acc.sums().data(), {u, w}, torch::kFloat), static_cast<int64_t>(world));
      p.mutable_grad() = torch::sparse_coo_tensor(out_ids, out_vals, p.sizes());
    }
  }

  static torch::Tensor empty_rows(const torch::Tensor& p) {
    return torch::sparse_coo_tensor(torch::zeros({1, 0}, torch::kInt64), torch::zeros({0, p.size(1)}, torch::kFloat),
                                    p.sizes());
  }

  BucketOptions opts_;
  std::vector<size_t> tables_;
  std::unique_ptr<BucketedSync> dense_;
  std::vector<optim::RowAccumulator> local_, global_;  ///< per table: this rank's rows, all ranks' rows
};

}  // namespace

namespace {

class FunctionSync final : public GradSync {
 public:
  FunctionSync(Communicator& comm, const std::vector<torch::Tensor>& params, std::function<void()> reduce)
      : GradSync(SyncStrategy::kPerParam, comm, params, one_bucket_per_param(params)), reduce_(std::move(reduce)) {}

 private:
  void reduce() override { reduce_(); }
  std::function<void()> reduce_;
};

}  // namespace

std::unique_ptr<GradSync> make_function_sync(Communicator& comm, const std::vector<torch::Tensor>& params,
                                             std::function<void()> reduce) {
  DDPLAB_CHECK(reduce != nullptr, "make_function_sync: no reduce function");
  return std::make_unique<FunctionSync>(comm, params, std::move(reduce));
}

std::unique_ptr<GradSync> make_grad_sync(SyncStrategy strategy, Communicator& comm,
                                         const std::vector<torch::Tensor>& params, const BucketOptions& opts) {
  for (size_t i = 0; i < params.size(); ++i) {
    DDPLAB_CHECK(params[i].defined() && params[i].requires_grad() && params[i].is_leaf(),
                 fmt::format("grad sync: parameter {} is not a leaf tensor that requires grad", i));
  }
  switch (strategy) {
    case SyncStrategy::kPerParam: return std::make_unique<PerParamSync>(comm, params);
    case SyncStrategy::kBucketed: return std::make_unique<BucketedSync>(SyncStrategy::kBucketed, comm, params, opts);
    case SyncStrategy::kOverlap: return std::make_unique<OverlapSync>(comm, params, opts);
    case SyncStrategy::kSparse: return std::make_unique<SparseSync>(comm, params, opts);
  }
  throw Error("grad sync: unknown strategy");
}

}  // namespace ddplab::dist

// Lab 07 exercises: the layer split over send/recv (07.1), the GPipe pipeline (07.2), table-wise
// sharding with all-to-all (07.3) and recomputation (07.4). Contracts: lab07.h.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "lab07.h"

#include "ddplab/error.h"

namespace lab07 {

using ddplab::dist::Communicator;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

double split_step(Communicator& comm, const StageFns& fns) {
  // BEGIN STUDENT CODE (07.1: one micro-batch across two stages)
  DDPLAB_CHECK(comm.size() == 2, fmt::format("the layer split needs 2 ranks, the job has {}", comm.size()));
  if (comm.rank() == 0) {
    const torch::Tensor x = fns.first_forward(0);
    comm.send(x.detach().contiguous(), 1, /*tag=*/0);
    torch::Tensor grad = torch::empty_like(x);
    comm.recv(grad, 1, /*tag=*/1);
    fns.first_backward(0, x, grad);
    return 0.0;
  }
  torch::Tensor x = torch::empty(fns.boundary_shape(0));
  comm.recv(x, 0, /*tag=*/0);
  x.requires_grad_(true);
  const torch::Tensor loss = fns.last_forward(0, x);
  fns.last_backward(0, loss);
  comm.send(x.grad().contiguous(), 0, /*tag=*/1);
  return loss.item<double>();
  // END STUDENT CODE
}

double pipeline_step(Communicator& comm, const StageFns& fns, int64_t micro_batches) {
  // BEGIN STUDENT CODE (07.2: the GPipe schedule of m micro-batches)
  DDPLAB_CHECK(comm.size() == 2, fmt::format("the pipeline needs 2 ranks, the job has {}", comm.size()));
  DDPLAB_CHECK(micro_batches >= 1, fmt::format("{} micro-batches", micro_batches));
  const int64_t m = micro_batches;
  if (comm.rank() == 0) {
    std::vector<torch::Tensor> xs;
    for (int64_t i = 0; i < m; ++i) {
      xs.push_back(fns.first_forward(i));
      comm.send(xs.back().detach().contiguous(), 1, /*tag=*/0);
    }
    for (int64_t i = 0; i < m; ++i) {
      torch::Tensor grad = torch::empty_like(xs[static_cast<size_t>(i)]);
      comm.recv(grad, 1, /*tag=*/1);
      fns.first_backward(i, xs[static_cast<size_t>(i)], grad);
    }
    return 0.0;
  }
  int64_t total = 0;
  for (int64_t i = 0; i < m; ++i) total += fns.samples(i);
  std::vector<torch::Tensor> xs, losses;
  double loss_sum = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    torch::Tensor x = torch::empty(fns.boundary_shape(i));
    comm.recv(x, 0, /*tag=*/0);
    x.requires_grad_(true);
    const double share = static_cast<double>(fns.samples(i)) / static_cast<double>(total);
    losses.push_back(fns.last_forward(i, x) * share);
    loss_sum += losses.back().item<double>();
    xs.push_back(x);
  }
  for (int64_t i = 0; i < m; ++i) {
    fns.last_backward(i, losses[static_cast<size_t>(i)]);
    comm.send(xs[static_cast<size_t>(i)].grad().contiguous(), 0, /*tag=*/1);
  }
  return loss_sum;
  // END STUDENT CODE
}

TablePlan plan_tables(const std::vector<int64_t>& rows, int world) {
  // BEGIN STUDENT CODE (07.3: tables to ranks, balanced by rows)
  DDPLAB_CHECK(world >= 1, fmt::format("a plan for {} ranks", world));
  std::vector<int64_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return rows[static_cast<size_t>(a)] > rows[static_cast<size_t>(b)]; });
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  TablePlan plan;
  plan.owner.assign(rows.size(), 0);
  for (int64_t f : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equals: the lower rank
    plan.owner[static_cast<size_t>(f)] = static_cast<int>(least - load.begin());
    *least += rows[static_cast<size_t>(f)];
  }
  return plan;
  // END STUDENT CODE
}

namespace {

/// The sharded lookup as an autograd function of the shard: forward and backward are 07.3's.
struct ShardedLookupFn : public torch::autograd::Function<ShardedLookupFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor shard, Communicator* comm, const ShardLayout* layout,
                               torch::Tensor all_rows) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    ctx->saved_data["layout"] = reinterpret_cast<int64_t>(layout);
    ctx->saved_data["shard_rows"] = shard.size(0);
    // BEGIN STUDENT CODE (07.3: look up this rank's tables, all-to-all them to the samples' ranks)
    const ShardLayout& l = *layout;
    const int64_t W = l.world, b = l.per_rank_batch, w = l.width;
    const auto& mine = l.fields[static_cast<size_t>(l.rank)];
    const int64_t F_me = static_cast<int64_t>(mine.size());
    // This rank's fields for all W x b samples, as rows of the shard: [W x b, F_me].
    std::vector<int64_t> shift;
    for (int64_t f : mine)
      shift.push_back(l.shard_offset[static_cast<size_t>(f)] - l.global_offset[static_cast<size_t>(f)]);
    const torch::Tensor cols = torch::tensor(mine, torch::kLong);
    const torch::Tensor local = all_rows.index_select(1, cols) + torch::tensor(shift, torch::kLong);
    ctx->saved_data["local"] = local;
    // Sample-major, so rank j's samples are one contiguous chunk of b x F_me rows.
    const torch::Tensor values = shard.index_select(0, local.flatten());  // [W x b x F_me, w]
    std::vector<int64_t> in_splits(static_cast<size_t>(W), b * F_me), out_splits;
    int64_t received = 0;
    for (int64_t r = 0; r < W; ++r) {
      out_splits.push_back(b * static_cast<int64_t>(l.fields[static_cast<size_t>(r)].size()));
      received += out_splits.back();
    }
    torch::Tensor got = torch::empty({received, w}, shard.options());
    comm->all_to_all(got, values, out_splits, in_splits);
    // Rank r's piece is [b, F_r, w]: put its columns at its fields.
    torch::Tensor out = torch::empty({b, ddplab::data::kNumSparse, w}, shard.options());
    int64_t at = 0;
    for (int64_t r = 0; r < W; ++r) {
      const auto& fr = l.fields[static_cast<size_t>(r)];
      const int64_t n = b * static_cast<int64_t>(fr.size());
      out.index_copy_(1, torch::tensor(fr, torch::kLong),
                      got.slice(0, at, at + n).view({b, static_cast<int64_t>(fr.size()), w}));
      at += n;
    }
    return out;
    // END STUDENT CODE
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    [[maybe_unused]] auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    [[maybe_unused]] const ShardLayout& l = *reinterpret_cast<const ShardLayout*>(ctx->saved_data["layout"].toInt());
    [[maybe_unused]] const int64_t shard_rows = ctx->saved_data["shard_rows"].toInt();
    torch::Tensor grad_shard;
    // BEGIN STUDENT CODE (07.3: the gradients back to the owners, summed per row)
    const int64_t W = l.world, b = l.per_rank_batch, w = l.width;
    const torch::Tensor local = ctx->saved_data["local"].toTensor();
    const torch::Tensor g = grads[0].contiguous();  // [b, 26, w]: this rank's samples, every field
    std::vector<torch::Tensor> pieces;
    std::vector<int64_t> in_splits, out_splits;
    const int64_t F_me = static_cast<int64_t>(l.fields[static_cast<size_t>(l.rank)].size());
    for (int64_t r = 0; r < W; ++r) {
      const auto& fr = l.fields[static_cast<size_t>(r)];
      pieces.push_back(g.index_select(1, torch::tensor(fr, torch::kLong)).reshape({-1, w}));
      in_splits.push_back(b * static_cast<int64_t>(fr.size()));
      out_splits.push_back(b * F_me);
    }
    const torch::Tensor send = torch::cat(pieces);
    torch::Tensor back = torch::empty({W * b * F_me, w}, g.options());
    comm->all_to_all(back, send, out_splits, in_splits);
    grad_shard = torch::zeros({shard_rows, w}, g.options());
    grad_shard.index_add_(0, local.flatten(), back);  // a row used by several samples gets their sum
    grad_shard.div_(static_cast<double>(W));
    // END STUDENT CODE
    return {grad_shard, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

/// The MLP with recomputation as an autograd function of its input: forward and backward are 07.4's.
struct RecomputeFn : public torch::autograd::Function<RecomputeFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::nn::SequentialImpl* mlp) {
    ctx->saved_data["mlp"] = reinterpret_cast<int64_t>(mlp);
    ctx->saved_data["autocast"] = ddplab::amp::autocast_enabled(x.device().type());
    // BEGIN STUDENT CODE (07.4: forward, keeping only the input)
    ctx->save_for_backward({x});
    return mlp->forward(x);  // autograd functions run forward without recording a graph
    // END STUDENT CODE
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    [[maybe_unused]] auto* mlp = reinterpret_cast<torch::nn::SequentialImpl*>(ctx->saved_data["mlp"].toInt());
    [[maybe_unused]] const bool autocast = ctx->saved_data["autocast"].toBool();  // the forward's state
    torch::Tensor grad_x;
    // BEGIN STUDENT CODE (07.4: backward, recomputing the forward)
    const torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    {
      torch::AutoGradMode enable(true);
      AutocastAs cast(x.device().type(), autocast);  // as the forward ran
      const torch::Tensor y = mlp->forward(x);
      torch::autograd::backward({y}, {grads[0]});
    }
    grad_x = x.grad();
    // END STUDENT CODE
    return {grad_x, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sharded_lookup(Communicator& comm, const ShardLayout& layout, const torch::Tensor& shard,
                             const torch::Tensor& all_rows) {
  return ShardedLookupFn::apply(shard, &comm, &layout, all_rows);
}

torch::Tensor recompute(torch::nn::Sequential& mlp, const torch::Tensor& x) { return RecomputeFn::apply(x, mlp.get()); }

}  // namespace lab07

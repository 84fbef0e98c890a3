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
  throw ddplab::NotImplemented("07.1", "split_step: send the boundary forward, its gradient back");
  // END STUDENT CODE
}

double pipeline_step(Communicator& comm, const StageFns& fns, int64_t micro_batches) {
  // BEGIN STUDENT CODE (07.2: the GPipe schedule of m micro-batches)
  throw ddplab::NotImplemented("07.2", "pipeline_step: all forwards, then the backwards, losses weighted");
  // END STUDENT CODE
}

TablePlan plan_tables(const std::vector<int64_t>& rows, int world) {
  // BEGIN STUDENT CODE (07.3: tables to ranks, balanced by rows)
  throw ddplab::NotImplemented("07.3", "plan_tables: largest table first, to the rank with the fewest rows");
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
    throw ddplab::NotImplemented("07.3",
                                 "the sharded lookup's forward: this rank's fields for the global batch, all-to-all");
    // END STUDENT CODE
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    [[maybe_unused]] auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    [[maybe_unused]] const ShardLayout& l = *reinterpret_cast<const ShardLayout*>(ctx->saved_data["layout"].toInt());
    [[maybe_unused]] const int64_t shard_rows = ctx->saved_data["shard_rows"].toInt();
    torch::Tensor grad_shard;
    // BEGIN STUDENT CODE (07.3: the gradients back to the owners, summed per row)
    throw ddplab::NotImplemented("07.3", "the lookup's backward: reverse all-to-all, index_add on the owner");
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
    throw ddplab::NotImplemented("07.4", "recompute's forward: save only the input");
    // END STUDENT CODE
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    [[maybe_unused]] auto* mlp = reinterpret_cast<torch::nn::SequentialImpl*>(ctx->saved_data["mlp"].toInt());
    [[maybe_unused]] const bool autocast = ctx->saved_data["autocast"].toBool();  // the forward's state
    torch::Tensor grad_x;
    // BEGIN STUDENT CODE (07.4: backward, recomputing the forward)
    throw ddplab::NotImplemented("07.4",
                                 "recompute's backward: the forward again with gradients, then backward through it");
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

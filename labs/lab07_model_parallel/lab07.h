// Lab 07: the model-parallel trap. The student's functions: a two-stage layer split of DeepFM
// (07.1), the same split as a GPipe pipeline of micro-batches (07.2), table-wise sharding of the
// embedding tables with all-to-all (07.3), and recomputation of the MLP's activations in backward
// (07.4). The model pieces the stages are made of are given here (stage0_boundary, stage1_logit).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "ddplab/amp.h"
#include "ddplab/data/schema.h"
#include "ddplab/deepfm.h"
#include "ddplab/dist/communicator.h"

namespace lab07 {

// ---- the model split in two (given) ----

/// What stage 0 sends stage 1 for each sample: the MLP's input (26 x D field embeddings, then the
/// 13 dense features) and, in the last column, stage 0's part of the logit (first-order terms plus
/// the FM term). 26 x D + 14 floats: 430 at D = 16.
inline int64_t boundary_width(const ddplab::DeepFMOptions& opts) {
  return ddplab::data::kNumSparse * opts.embedding_dim + ddplab::data::kNumDense + 1;
}
/// Stage 0 (embeddings, first-order terms, FM) of one batch: [b, boundary_width], part of the
/// autograd graph of the embedding tables and dense_linear.
inline torch::Tensor stage0_boundary(ddplab::DeepFMImpl& model, const torch::Tensor& dense, const torch::Tensor& rows) {
  const torch::Tensor e = model.embedding->forward(rows);  // [b, 26, D]
  const torch::Tensor wide = model.first_order->forward(rows).sum({1, 2}) +
                             model.dense_linear->forward(dense).squeeze(1) + ddplab::DeepFMImpl::fm_interaction(e);
  return torch::cat({e.flatten(1), dense, wide.unsqueeze(1)}, 1);
}
/// Stage 1 (the MLP) from the boundary tensor: the logits [b], x[:, -1] + mlp(x[:, :-1]), added in
/// the order DeepFM::forward adds them, so the split model computes the same numbers.
inline torch::Tensor stage1_logit(ddplab::DeepFMImpl& model, const torch::Tensor& x) {
  const int64_t w = x.size(1);
  return x.select(1, w - 1) + model.mlp->forward(x.slice(1, 0, w - 1)).squeeze(1);
}

// ---- 07.1 and 07.2: a two-stage pipeline over send/recv ----

/// One rank's stage of a two-stage model split, as functions of the micro-batch index i
/// (0 .. m-1; m = 1 for 07.1). Rank 0 runs stage 0, rank 1 stage 1.
struct StageFns {
  /// Stage 0: micro-batch i's boundary tensor, part of a graph (its backward reaches stage 0's
  /// parameters).
  std::function<torch::Tensor(int64_t i)> first_forward;
  /// Stage 0: backpropagates `grad`, the gradient of the loss with respect to micro-batch i's
  /// boundary tensor x (what first_forward(i) returned), through stage 0.
  std::function<void(int64_t i, const torch::Tensor& x, const torch::Tensor& grad)> first_backward;
  /// Stage 1: the shape of micro-batch i's boundary tensor, to receive it into.
  std::function<std::vector<int64_t>(int64_t i)> boundary_shape;
  /// Stage 1: micro-batch i's mean loss from its boundary tensor x (a leaf that requires grad).
  std::function<torch::Tensor(int64_t i, const torch::Tensor& x)> last_forward;
  /// Stage 1: backpropagates `loss` (micro-batch i's loss, as it enters the batch's loss) through
  /// stage 1, down to the boundary tensor's .grad().
  std::function<void(int64_t i, const torch::Tensor& loss)> last_backward;
  /// Stage 1: the samples in micro-batch i (the batch's loss is the mean over all of them).
  std::function<int64_t(int64_t i)> samples;
};

/// 07.1. One training step of the layer split, one micro-batch: stage 0 sends its boundary tensor
/// to rank 1 (tag 0) and receives its gradient back (tag 1), then backpropagates it; stage 1
/// receives the boundary tensor, computes the loss, backpropagates to the boundary and sends its
/// gradient to rank 0. Every send must meet its recv: a rank that waits for what its peer has not
/// sent yet stalls the job (a named timeout, not a hang). Needs exactly 2 ranks. Returns the batch's loss on rank 1 and
/// 0 on rank 0. Gradients accumulate into the parameters' .grad; the caller zeroes them and steps.
double split_step(ddplab::dist::Communicator& comm, const StageFns& fns);

/// 07.2. The same step as a GPipe schedule of m micro-batches: stage 0 runs and sends the forward
/// of every micro-batch before it waits for the first gradient; stage 1 runs each forward as its
/// input arrives and, after the last forward, the backwards, sending each gradient as soon as it is
/// computed. Each micro-batch's loss is weighted by its share of the batch's samples, so the
/// gradients are those of one step on the whole batch. Returns the batch's mean loss on rank 1 and
/// 0 on rank 0.
double pipeline_step(ddplab::dist::Communicator& comm, const StageFns& fns, int64_t micro_batches);

// ---- 07.3: table-wise sharding ----

/// Which rank owns each of the 26 embedding tables (fields).
struct TablePlan {
  std::vector<int> owner;  ///< owner[f] for field f = 0 .. 25
  /// The fields rank r owns, ascending.
  std::vector<int64_t> fields_of(int rank) const {
    std::vector<int64_t> f;
    for (size_t i = 0; i < owner.size(); ++i) {
      if (owner[i] == rank) f.push_back(static_cast<int64_t>(i));
    }
    return f;
  }
};

/// 07.3a. Assigns the tables to `world` ranks balanced by rows: fields in decreasing order of
/// their rows (ties: the lower field first), each to the rank with the fewest rows so far (ties:
/// the lower rank). `rows[f]` is table f's row count.
TablePlan plan_tables(const std::vector<int64_t>& rows, int world);

/// Where a rank's shard sits: the fields it owns, their first global row, and their first row in
/// the rank's shard (the shard holds its fields' rows one table after another, in field order).
struct ShardLayout {
  int rank = 0, world = 1;
  int64_t per_rank_batch = 0;                ///< b: every rank's batch (whole global batches)
  int64_t width = 0;                         ///< columns of a row: D embedding values and the first-order weight
  std::vector<std::vector<int64_t>> fields;  ///< fields[r]: the fields rank r owns
  std::vector<int64_t> global_offset;        ///< per field: its first global row
  std::vector<int64_t> shard_offset;         ///< per field: its first row in its owner's shard
  std::vector<int64_t> shard_rows;           ///< per rank: the rows of its shard
};
inline ShardLayout make_shard_layout(const TablePlan& plan, int rank, int world, int64_t per_rank_batch,
                                     int64_t width) {
  namespace data = ddplab::data;
  ShardLayout l;
  l.rank = rank;
  l.world = world;
  l.per_rank_batch = per_rank_batch;
  l.width = width;
  l.global_offset.assign(data::kNumSparse, 0);
  l.shard_offset.assign(data::kNumSparse, 0);
  l.shard_rows.assign(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    l.fields.push_back(plan.fields_of(r));
    for (int64_t f : l.fields.back()) {
      l.global_offset[static_cast<size_t>(f)] = data::kOffset[static_cast<size_t>(f)];
      l.shard_offset[static_cast<size_t>(f)] = l.shard_rows[static_cast<size_t>(r)];
      l.shard_rows[static_cast<size_t>(r)] += data::kCardinality[static_cast<size_t>(f)];
    }
  }
  return l;
}

/// 07.3b. The sharded lookup of one step, differentiable with respect to `shard` (this rank's
/// [shard_rows[rank], width] table). `all_rows`: the global batch's rows, [world x b, 26] (rank r's
/// samples are rows [r x b, (r + 1) x b)), the same on every rank. Forward: look up this rank's
/// fields for all world x b samples and all-to-all them (uneven splits: rank r sends b x F_r x
/// width values to every rank), so that each rank gets [b, 26, width] for its own samples, fields
/// in field order. Backward: the gradient goes back the same way (the reverse all-to-all), and the
/// owner adds every sample's gradient to its row - a row used by several samples gets their sum -
/// divided by the world size, so that the shard's gradient is that of the mean loss over the
/// global batch, as data parallel's averaged all-reduce gives it.
torch::Tensor sharded_lookup(ddplab::dist::Communicator& comm, const ShardLayout& layout, const torch::Tensor& shard,
                             const torch::Tensor& all_rows);

// ---- 07.4: recomputation ----

/// Autocast on `device` switched to `enabled` (in the course's low precision: bfloat16 on CPU,
/// float16 on CUDA) for the scope's lifetime, then restored (given: the kit's scope, amp.h; lab 05's
/// 05.1 builds the same). The driver's --autocast runs the forward in one; recompute's backward
/// needs one to run the forward again as the forward ran: AutocastAs cast(device, enabled).
using AutocastAs = ddplab::amp::AutocastGuard;

/// 07.4. The MLP with recomputation: forward keeps only its input x (no activations of the MLP
/// stay alive between forward and backward); backward runs the MLP's forward again on x with
/// gradients on and backpropagates the incoming gradient through it, so the MLP's parameters get
/// their gradients and x gets its own - under the autocast state the forward ran with (saved for
/// you; AutocastAs), since backward runs after the forward's autocast scope has ended. Gradients
/// equal those of mlp->forward(x). x must require grad (in DeepFM it comes from the embeddings): the
/// parameters are not inputs of the autograd function, so, as with PyTorch's reentrant checkpoint,
/// an input without a gradient gives an output without a graph.
torch::Tensor recompute(torch::nn::Sequential& mlp, const torch::Tensor& x);

}  // namespace lab07

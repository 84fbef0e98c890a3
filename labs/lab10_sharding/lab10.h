// Lab 10 (sharding what every rank repeats): the functions the student implements in
// lab10_student.cpp — the partition of the model's flat view over the ranks (10.1), the update of a
// rank's shard with Adam and the all-gather (10.2, ZeRO-1's and ZeRO-2's), ZeRO-2's gradient
// reduction by reduce-scatter (10.3) and the loading of a sharded checkpoint at any world size
// (10.4) — and the kit's pieces they work with (lab10_kit.cpp): the flat view, the two steps built
// from them, Adam's state of a shard, the shard files of a checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddplab/dist/communicator.h"

namespace lab10 {

/// A stretch of one parameter inside a shard: elements [offset, offset + numel) of parameter
/// `param`'s flattened values, which lie at [flat, flat + numel) of the flat view.
struct Piece {
  int64_t param = 0;   ///< index into the parameter list
  int64_t offset = 0;  ///< the stretch's first element within the parameter
  int64_t flat = 0;    ///< the same element's place in the flat view
  int64_t numel = 0;
  bool operator==(const Piece& o) const {
    return param == o.param && offset == o.offset && flat == o.flat && numel == o.numel;
  }
};

/// One rank's part of the flat view: elements [begin, end), and the pieces of the parameters they
/// hold, in flat order.
struct Shard {
  int64_t begin = 0, end = 0;
  std::vector<Piece> pieces;
  int64_t numel() const { return end - begin; }
};

/// The model's parameters laid end to end in registration order (the flat view), split over the
/// ranks.
struct Partition {
  int64_t total = 0;          ///< elements of the flat view: the parameters' numels summed
  int64_t align = 1;          ///< elements of one alignment unit
  std::vector<Shard> shards;  ///< one per rank, in rank order
  int world() const { return static_cast<int>(shards.size()); }
  /// Elements of the largest shard: every rank's chunk of a collective over the flat view (a
  /// shorter shard is padded with zeros to it).
  int64_t chunk() const;
};

/// What a rank keeps for its shard under ZeRO: its own copy of the shard's parameter values, the
/// one Adam updates, and that Adam (made at the shard's first step, 10.2).
struct ShardState {
  torch::Tensor param;                       ///< the shard's values: a leaf tensor of shard.numel() elements
  double lr = 1e-3;                          ///< Adam's learning rate
  std::unique_ptr<torch::optim::Adam> adam;  ///< over {param} alone, so its moments cover the shard only
};

// ---- The kit's pieces (lab10_kit.cpp) ----

/// `tensors` flattened and laid end to end in one new float tensor of `size` elements (at least
/// their total), zeros after them; an undefined tensor counts as zeros of its place's size, so it
/// needs `numels`. For parameters: their values; for gradients: flat_grads.
torch::Tensor flatten(const std::vector<torch::Tensor>& tensors, const std::vector<int64_t>& numels, int64_t size);
/// The gradients of `params` laid end to end (a parameter without a gradient as zeros), padded with
/// zeros to `size` elements.
torch::Tensor flat_grads(const std::vector<torch::Tensor>& params, int64_t size);
/// `flat` (the flat view's total elements) laid out for a collective over equal chunks: a new
/// tensor of world x chunk elements whose chunk r holds shard r's elements, then zeros.
torch::Tensor to_chunks(const Partition& p, const torch::Tensor& flat);
/// The parameters' numels, in order.
std::vector<int64_t> numels_of(const std::vector<torch::Tensor>& params);

/// Rank `rank`'s ZeRO state under `p`: `param` a new leaf tensor holding the shard's values, copied
/// out of `params` (the model's parameters, p's flat view); no Adam yet (shard_step makes it).
ShardState make_shard_state(const Partition& p, int rank, const std::vector<torch::Tensor>& params, double lr);

/// ZeRO-1's step (the kit's): averages the gradients with one all-reduce of the flat gradients,
/// divided by the world size, and hands this rank's slice of the average to shard_step (10.2).
/// Afterwards every rank's parameters are those DDP + Adam over the whole model would hold.
void zero1_step(ddplab::dist::Communicator& comm, const Partition& p, const std::vector<torch::Tensor>& params,
                ShardState& state);
/// ZeRO-2's step (the kit's): the gradient of this rank's shard from reduce_scatter_grads (10.3),
/// then shard_step (10.2).
void zero2_step(ddplab::dist::Communicator& comm, const Partition& p, const std::vector<torch::Tensor>& params,
                ShardState& state);

/// Writes rank `rank`'s shard under `p` to shard_file(dir, rank, p.world()), atomically (a temporary
/// file renamed over it, as lab 09's checkpoints): a torch::serialize archive holding "begin" and
/// "end" (the shard's flat range, int64 scalars), "param", "exp_avg", "exp_avg_sq" (the shard's
/// values and Adam's moments, moments_of) and "step" (Adam's step count, an int64 scalar). Throws
/// ddplab::Error naming the file when it cannot be written.
void save_shard(const std::string& dir, const Partition& p, int rank, const ShardState& state);

/// Adam's state for a shard: the two moments (exp_avg, exp_avg_sq, shaped like the shard) and the
/// step count. Before the first step: zeros and 0.
struct Moments {
  torch::Tensor exp_avg, exp_avg_sq;
  int64_t step = 0;
};
Moments moments_of(const ShardState& state);
/// Makes `state.adam` hold `m` for `state.param` (a copy), as if it had taken m.step steps (making
/// the shard's Adam if it has none yet).
void set_moments(ShardState& state, const Moments& m);

/// The shard files of the checkpoint in `dir` (shard-<r>-of-<W>.pt, r = 0..W-1), in rank order.
/// Throws ddplab::Error naming `dir` when it holds none, a rank's file is missing, or files of two
/// world sizes are mixed.
std::vector<std::string> shard_files(const std::string& dir);
/// The file rank `rank` of a job of `world` ranks writes in `dir`.
std::string shard_file(const std::string& dir, int rank, int world);

// ---- 10.1: the partition ----

/// Splits the flat view of parameters with `numels` elements over `world` ranks, in shards of
/// whole alignment units of near-equal size: with U = ceil(total / align) units, rank r's shard
/// begins at element align x floor(r x U / world) (but at most total) and ends where rank r + 1's
/// begins (the last rank's at total). So shards differ by at most one unit, and a parameter may
/// span two (or more) ranks. Each shard's pieces cover its [begin, end) exactly, in flat order: a
/// parameter that crosses a boundary gives a piece to each rank it touches; a parameter of no
/// elements gives none. Throws ddplab::ConfigError for world < 1 or align < 1.
Partition partition(const std::vector<int64_t>& numels, int world, int64_t align);

// ---- 10.2: the shard's update ----

/// One ZeRO update of this rank's shard, given `shard_grad`, the shard's averaged gradient
/// (shard.numel() elements):
///  1. at the first step, make `state.adam`: an Adam at `state.lr` over {state.param} alone, so its
///     moments cover this shard and nothing else;
///  2. give `state.param` the gradient `shard_grad`, and step `state.adam`;
///  3. all-gather the updated shards (each padded with zeros to p.chunk() elements) and write every
///     rank's shard, this rank's own too, into `params` through the shards' pieces.
void shard_step(ddplab::dist::Communicator& comm, const Partition& p, const std::vector<torch::Tensor>& params,
                ShardState& state, const torch::Tensor& shard_grad);

// ---- 10.3: ZeRO-2's gradient reduction ----

/// This rank's shard of the gradient averaged over the ranks (shard.numel() elements), by one
/// reduce-scatter (comm.reduce_scatter) of the flat gradients laid out in chunks (flat_grads,
/// to_chunks) — each rank receives only its chunk of the sum, and averages it. Once they are sent,
/// the model's gradients are released (every parameter's grad undefined), so between steps a rank
/// holds only its shard's gradient.
torch::Tensor reduce_scatter_grads(ddplab::dist::Communicator& comm, const Partition& p,
                                   const std::vector<torch::Tensor>& params);

// ---- 10.4: the sharded checkpoint, at any world size ----

/// Makes `state` (rank `rank`'s under `p`, from make_shard_state) hold the checkpoint that
/// save_shard wrote in `dir`, which may have been written by a job of another world size: from every
/// shard file (shard_files) whose [begin, end) overlaps this rank's, the overlapping values of param
/// and both moments, bit for bit, and Adam's step (set_moments). Throws ddplab::Error naming `dir`
/// when the files do not cover this shard.
void load_shard(const std::string& dir, const Partition& p, int rank, ShardState& state);

}  // namespace lab10

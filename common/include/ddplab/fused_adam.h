#pragma once
// torch::optim::Adam's algorithm in one pass over each parameter (issue 18: the optimizer took a
// fifth of the single-rank step, sweeping the 10.7 MB embedding table six times per step).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "ddplab/torch_compat.h"

namespace ddplab::optim {

/// Sums the rows of a row-sparse gradient that share a row id, in the order given (the roundings
/// of index_add_ into zeros), and lists each row once, in order of first appearance. Kept between
/// steps so the per-row slots are allocated once; clear() resets only the rows it touched.
class RowAccumulator {
 public:
  /// ids: k row ids in [0, table_rows); vals: k x width floats. Adds them to what is held.
  /// Throws ddplab::Error naming `what`, the position and the id when an id is out of range.
  void add(const int64_t* ids, const float* vals, int64_t k, int64_t width, int64_t table_rows,
           const std::string& what);
  /// The same with 32-bit ids (the row ids the sparse sync sends).
  void add(const int32_t* ids, const float* vals, int64_t k, int64_t width, int64_t table_rows,
           const std::string& what);
  int64_t width() const noexcept { return width_; }
  /// The distinct rows, in order of first appearance, and their sums (rows().size() x width()).
  const std::vector<int64_t>& rows() const noexcept { return rows_; }
  const std::vector<float>& sums() const noexcept { return sums_; }
  std::vector<float>& sums() noexcept { return sums_; }
  /// The index of row r in rows(), or -1 when no id named it.
  int32_t slot(int64_t r) const noexcept {
    return r < static_cast<int64_t>(slot_.size()) ? slot_[static_cast<size_t>(r)] : -1;
  }
  /// slot() of every row of the table last added to (table_rows entries).
  const int32_t* slots() const noexcept { return slot_.data(); }
  void clear();

 private:
  void prepare(int64_t width, int64_t table_rows, const std::string& what);

  std::vector<int32_t> slot_;
  std::vector<int64_t> rows_;
  std::vector<float> sums_;
  int64_t width_ = 0;
};

/// torch::optim::Adam with the same options, the same state (AdamParamState under the same keys,
/// so save/load and checkpoints are unchanged) and the same float arithmetic, in the same order
/// of roundings as ATen's kernels (m*b1 then fma with (1-b1)*g; v*b2 + ((1-b2)*g)*g;
/// sqrt(v)/sqrt(bc2) + eps; p + (-lr/bc1)*m/denom), but each element's update in one pass instead
/// of six sweeps over memory. Parameters equal torch::optim::Adam's to float rounding (the tests
/// hold them to 1e-6 over many steps).
///
/// It also drops each gradient after using it (PyTorch's zero_grad(set_to_none=True), moved into
/// the step): the next backward then writes the gradient instead of zeroing it and adding to the
/// zeros, which is two more sweeps of every dense embedding gradient. zero_grad() after the step
/// has nothing left to do; code that reads .grad() after step() must read it before.
///
/// Row-sparse gradients (an embedding with sparse gradients, DeepFMOptions::sparse_gradients) get
/// dense Adam, not a lazy variant: every row of the table is updated, the rows no sample looked up
/// with a zero gradient (their moments decay and they keep moving, as under torch's Adam with the
/// dense gradient), the looked-up rows with their summed gradient — summed in the order given, as
/// the dense backward's index_add_ sums them, so the result equals the dense path's. The table's
/// gradient is never materialised.
///
/// Falls back to torch::optim::Adam's own step for what the one pass does not cover: amsgrad,
/// non-float or non-contiguous tensors, tensors not on the CPU (and that step refuses sparse
/// gradients, as torch's Adam does).
class FusedAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;

 private:
  std::unordered_map<compat::OptimStateKey, RowAccumulator> rows_;        ///< per sparse table, scratch only
  std::unordered_map<compat::OptimStateKey, std::vector<float>> zeroed_;  ///< per narrow sparse table: a zero gradient
};

/// The kit's trainers' choice of Adam: "fused" (FusedAdam) or "torch" (torch::optim::Adam), same
/// options. Throws ddplab::ConfigError naming `which` for anything else.
std::unique_ptr<torch::optim::Optimizer> make_adam(const std::string& which, std::vector<torch::Tensor> params,
                                                   const torch::optim::AdamOptions& options);

/// One parameter's update (exposed for the tests): n floats of p, grad, exp_avg and exp_avg_sq.
/// step is the step count after this update (1 for the first).
void fused_adam_update(float* p, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, int64_t step,
                       const torch::optim::AdamOptions& options);

}  // namespace ddplab::optim

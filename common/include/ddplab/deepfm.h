// DeepFM (Guo et al. 2017) as specified in shared/workload.md: first-order terms, a factorisation
// machine over 26 field embeddings of dim 16, and a 429-400-400-400-1 ReLU MLP sharing those
// embeddings. 3,338,913 parameters.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace ddplab {

struct DeepFMOptions {
  int64_t embedding_dim = 16;
  int64_t hidden = 400;
  int64_t layers = 3;
  double embedding_init_std = 0.01;  ///< N(0, std) for both embedding tables
  /// Row-sparse gradients for both embedding tables (torch::nn::EmbeddingOptions::sparse): the
  /// backward hands over the looked-up rows instead of a zeroed 10.7 MB table with them added in.
  /// Only optim::FusedAdam and the sparse sync rung take such gradients (torch's Adam refuses
  /// them); the labs keep dense ones.
  bool sparse_gradients = false;
};

class DeepFMImpl : public torch::nn::Module {
 public:
  explicit DeepFMImpl(const DeepFMOptions& opts = {});

  /// dense: [B, 13] float32 (log1p of the raw counts); rows: [B, 26] int64 global embedding rows
  /// (field offset + id). Returns the logits, [B].
  torch::Tensor forward(const torch::Tensor& dense, const torch::Tensor& rows);

  /// The second-order FM term for field embeddings e [B, F, D]:
  /// 0.5 * sum_d((sum_f e)^2 - sum_f e^2) = sum over field pairs of <e_i, e_j>. Returns [B].
  static torch::Tensor fm_interaction(const torch::Tensor& e);

  const DeepFMOptions& options() const noexcept { return opts_; }
  /// The parameters by role: the tables (embedding and first_order weights: rows a batch touches
  /// sparsely) and the dense rest (dense_linear and the MLP), each in parameters() order.
  std::vector<torch::Tensor> embedding_parameters() const;
  std::vector<torch::Tensor> dense_parameters() const;
  torch::nn::Embedding embedding{nullptr};    ///< [167394, D] field embeddings (FM and MLP)
  torch::nn::Embedding first_order{nullptr};  ///< [167394, 1] first-order weights
  torch::nn::Linear dense_linear{nullptr};    ///< 13 -> 1, first-order term of the dense inputs
  torch::nn::Sequential mlp{nullptr};         ///< 429 -> 400 -> 400 -> 400 -> 1

 private:
  DeepFMOptions opts_;
};
TORCH_MODULE(DeepFM);

/// Total number of scalar parameters of a module.
int64_t count_parameters(const torch::nn::Module& module);

/// Forward+backward FLOPs per sample of the dense layers (2 per multiply-add, 3x the forward
/// for forward + both backward GEMMs); the embedding gathers and the FM are memory-bound and
/// not counted. About 2.95 MFLOP for the standard model (docs/concepts/metrics.md).
double deepfm_train_flops_per_sample(const DeepFMOptions& opts = {});

}  // namespace ddplab

// DeepFM forward pass; the FM term uses the O(F*D) square-of-sum identity.
#include "ddplab/deepfm.h"

#include "ddplab/data/schema.h"

namespace ddplab {

DeepFMImpl::DeepFMImpl(const DeepFMOptions& opts) : opts_(opts) {
  const int64_t rows = data::kTotalRows;
  embedding = register_module("embedding",
                              torch::nn::Embedding(
                                  torch::nn::EmbeddingOptions(rows, opts.embedding_dim).sparse(opts.sparse_gradients)));
  first_order =
      register_module("first_order",
                      torch::nn::Embedding(torch::nn::EmbeddingOptions(rows, 1).sparse(opts.sparse_gradients)));
  dense_linear = register_module("dense_linear", torch::nn::Linear(data::kNumDense, 1));
  // Small embedding init: with 26 fields the FM sums 325 pairwise products, so N(0, 1) (the
  // Embedding default) would start the model with logits in the hundreds.
  torch::NoGradGuard no_grad;
  embedding->weight.normal_(0.0, opts.embedding_init_std);
  first_order->weight.normal_(0.0, opts.embedding_init_std);

  torch::nn::Sequential seq;
  int64_t in = data::kNumSparse * opts.embedding_dim + data::kNumDense;
  for (int64_t l = 0; l < opts.layers; ++l) {
    seq->push_back(torch::nn::Linear(in, opts.hidden));
    seq->push_back(torch::nn::ReLU());
    in = opts.hidden;
  }
  seq->push_back(torch::nn::Linear(in, 1));
  mlp = register_module("mlp", seq);
}

namespace {
/// The parameters of `m` whose being a table (embedding or first_order weight) is `tables`.
std::vector<torch::Tensor> parameters_by_role(const torch::nn::Module& m, bool tables) {
  std::vector<torch::Tensor> out;
  for (const auto& item : m.named_parameters()) {
    const bool table = item.key().rfind("embedding.", 0) == 0 || item.key().rfind("first_order.", 0) == 0;
    if (table == tables) out.push_back(item.value());
  }
  return out;
}
}  // namespace

std::vector<torch::Tensor> DeepFMImpl::embedding_parameters() const { return parameters_by_role(*this, true); }

std::vector<torch::Tensor> DeepFMImpl::dense_parameters() const { return parameters_by_role(*this, false); }

torch::Tensor DeepFMImpl::fm_interaction(const torch::Tensor& e) {
  const torch::Tensor sum = e.sum(1);
  return 0.5 * (sum.pow(2) - e.pow(2).sum(1)).sum(1);
}

torch::Tensor DeepFMImpl::forward(const torch::Tensor& dense, const torch::Tensor& rows) {
  const torch::Tensor e = embedding->forward(rows);                     // [B, 26, D]
  const torch::Tensor first = first_order->forward(rows).sum({1, 2}) +  // [B]
                              dense_linear->forward(dense).squeeze(1);
  const torch::Tensor deep_in = torch::cat({e.flatten(1), dense}, 1);  // [B, 429]
  return first + fm_interaction(e) + mlp->forward(deep_in).squeeze(1);
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

double deepfm_train_flops_per_sample(const DeepFMOptions& opts) {
  double macs = 0.0;
  int64_t in = data::kNumSparse * opts.embedding_dim + data::kNumDense;
  for (int64_t l = 0; l < opts.layers; ++l) {
    macs += static_cast<double>(in * opts.hidden);
    in = opts.hidden;
  }
  macs += static_cast<double>(in);
  return 3.0 * 2.0 * macs;
}

}  // namespace ddplab

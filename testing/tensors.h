// Test support: a module's gradients and values as tensor lists, and the one comparison of two
// such lists every test uses (gradient sync against its oracle, weights across ranks).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace ddplab::testing {

/// Drops every parameter's gradient (the next backward starts from none).
inline void clear_grads(torch::nn::Module& m) {
  for (auto& p : m.parameters()) p.mutable_grad() = torch::Tensor();
}

/// A copy of each parameter's gradient, in parameter order (undefined where it has none).
inline std::vector<torch::Tensor> grads(const torch::nn::Module& m) {
  std::vector<torch::Tensor> g;
  for (const auto& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return g;
}

/// A copy of each parameter's value, in parameter order.
inline std::vector<torch::Tensor> values(const torch::nn::Module& m) {
  std::vector<torch::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().clone());
  return v;
}

/// "" when every element of `got` is within atol + rtol * |want| of `want` (0, 0: bit-identical);
/// otherwise what differs first: a count, a missing tensor (a parameter left without a gradient),
/// a shape, or the worst element of the first offending tensor with both values.
inline std::string compare(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want, double atol,
                           double rtol = 0.0) {
  if (got.size() != want.size()) {
    return "got " + std::to_string(got.size()) + " tensors, want " + std::to_string(want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    std::ostringstream msg;
    msg << "parameter " << i << ": ";
    if (!got[i].defined() || !want[i].defined()) {
      msg << (got[i].defined() ? "the oracle has no tensor" : "got none (no gradient reached it)");
      return msg.str();
    }
    if (got[i].sizes() != want[i].sizes()) {
      msg << "shape " << got[i].sizes() << " vs " << want[i].sizes();
      return msg.str();
    }
    const torch::Tensor w = want[i].to(torch::kFloat64).flatten();
    const torch::Tensor diff = (got[i].to(torch::kFloat64).flatten() - w).abs();
    const torch::Tensor excess = diff - (atol + rtol * w.abs());
    const int64_t at = excess.argmax().item<int64_t>();
    if (excess[at].item<double>() > 0.0 || diff.isnan().any().item<bool>()) {
      msg.precision(9);
      msg << "max |got - want| " << diff.max().item<double>() << "; at element " << at << " got "
          << got[i].flatten()[at].item<double>() << ", want " << w[at].item<double>() << ", |diff| "
          << diff[at].item<double>() << " > " << atol << " + " << rtol << " * |want|";
      return msg.str();
    }
  }
  return "";
}

}  // namespace ddplab::testing

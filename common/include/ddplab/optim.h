// The labs' optimizers by name (--optimizer): one place that turns "adam" or "sgd" into
// LibTorch's optimizer, so every lab builds the same thing from the same word.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace ddplab::optim {

/// The names make() accepts: "adam" (torch::optim::Adam) and "sgd" (plain torch::optim::SGD).
const std::vector<std::string>& names();

/// `name`'s optimizer over `params` at learning rate `lr`, with LibTorch's defaults otherwise.
/// Throws ddplab::ConfigError naming `name` and the choices for anything else.
std::unique_ptr<torch::optim::Optimizer> make(const std::string& name, std::vector<torch::Tensor> params, double lr);
/// The same over parameter groups (each group's own options are kept; `lr` for groups without).
std::unique_ptr<torch::optim::Optimizer> make(const std::string& name,
                                              std::vector<torch::optim::OptimizerParamGroup> groups, double lr);

/// Bytes of the optimizer's state tensors (Adam's two moments; SGD's momentum buffers; 0 for
/// plain SGD).
int64_t state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace ddplab::optim

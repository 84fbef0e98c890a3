// The labs' optimizers by name (see optim.h).
#include "ddplab/optim.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/error.h"
#include "ddplab/memory.h"

namespace ddplab::optim {

const std::vector<std::string>& names() {
  static const std::vector<std::string> n{"adam", "sgd"};
  return n;
}

namespace {
void check_name(const std::string& name) {
  if (name != "adam" && name != "sgd") {
    throw ConfigError(fmt::format("optimizer '{}': choose one of {}", name, fmt::join(names(), ", ")));
  }
}
}  // namespace

std::unique_ptr<torch::optim::Optimizer> make(const std::string& name, std::vector<torch::Tensor> params, double lr) {
  check_name(name);
  if (name == "adam") return std::make_unique<torch::optim::Adam>(std::move(params), torch::optim::AdamOptions(lr));
  return std::make_unique<torch::optim::SGD>(std::move(params), torch::optim::SGDOptions(lr));
}

std::unique_ptr<torch::optim::Optimizer> make(const std::string& name,
                                              std::vector<torch::optim::OptimizerParamGroup> groups, double lr) {
  check_name(name);
  if (name == "adam") return std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(lr));
  return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(lr));
}

int64_t state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t n = 0;
  for (const auto& kv : optimizer.state()) {
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(kv.second.get())) {
      n += memory::bytes_of({adam->exp_avg(), adam->exp_avg_sq(), adam->max_exp_avg_sq()});
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(kv.second.get())) {
      n += memory::bytes_of({sgd->momentum_buffer()});
    }
  }
  return n;
}

}  // namespace ddplab::optim

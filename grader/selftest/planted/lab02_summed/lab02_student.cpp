// Lab 02 exercises: find your place in the job from the launcher's environment, start every rank
// from rank 0's weights, and average gradients so the ranks stay one model.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "lab02.h"
#include "ddplab/error.h"

namespace lab02 {

ddplab::dist::Environment environment_from_launcher() {
  // BEGIN STUDENT CODE (02.1: rank and world size from the environment)
  auto get = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v == nullptr ? std::nullopt : std::optional<std::string>(v);
  };
  // A plain decimal integer >= min_value; anything else names the variable and its value.
  auto number = [](const char* name, const std::string& value, long long min_value, long long max_value) {
    bool digits = !value.empty() && value.size() <= 10;
    for (char c : value) digits = digits && c >= '0' && c <= '9';
    if (!digits) throw ddplab::ConfigError(fmt::format("{}='{}' is not a non-negative integer", name, value));
    const long long n = std::stoll(value);
    if (n < min_value || n > max_value) {
      throw ddplab::ConfigError(fmt::format("{}='{}' is out of range ({}..{})", name, value, min_value, max_value));
    }
    return static_cast<int>(n);
  };
  auto required = [&](const char* name, long long min_value, long long max_value) {
    const auto v = get(name);
    if (!v) throw ddplab::ConfigError(fmt::format("{} is not set", name));
    return number(name, *v, min_value, max_value);
  };
  auto optional = [&](const char* name, int fallback, long long min_value, long long max_value) {
    const auto v = get(name);
    return v ? number(name, *v, min_value, max_value) : fallback;
  };

  ddplab::dist::Environment e;
  if (!get("RANK") && !get("WORLD_SIZE")) {
    e.source = "single";
    return e;
  }
  e.source = "torchrun";
  constexpr long long kMax = 1000000;
  e.world_size = required("WORLD_SIZE", 1, kMax);
  e.rank = required("RANK", 0, kMax);
  e.local_rank = optional("LOCAL_RANK", e.rank, 0, kMax);
  e.local_world_size = optional("LOCAL_WORLD_SIZE", e.world_size, 1, kMax);
  if (e.rank >= e.world_size) {
    throw ddplab::ConfigError(fmt::format("RANK='{}' is not below WORLD_SIZE='{}'", e.rank, e.world_size));
  }
  if (e.local_rank >= e.local_world_size) {
    throw ddplab::ConfigError(
        fmt::format("LOCAL_RANK='{}' is not below LOCAL_WORLD_SIZE='{}'", e.local_rank, e.local_world_size));
  }
  const auto addr = get("MASTER_ADDR");
  if (e.world_size > 1 && (!addr || addr->empty())) {
    throw ddplab::ConfigError(fmt::format("MASTER_ADDR is not set but WORLD_SIZE='{}'", e.world_size));
  }
  e.master_addr = addr.value_or("");
  if (e.world_size > 1) {
    e.master_port = required("MASTER_PORT", 1, 65535);
  } else {
    e.master_port = optional("MASTER_PORT", 0, 1, 65535);
  }
  return e;
  // END STUDENT CODE
}

void broadcast_parameters(ddplab::dist::Communicator& comm, torch::nn::Module& model) {
  // BEGIN STUDENT CODE (02.2: same start on every rank)
  torch::NoGradGuard no_grad;  // a copy of weights, not a step of training
  for (auto& p : model.parameters()) {
    torch::Tensor t = p.detach();  // shares p's storage: writing t writes p
    comm.broadcast(t, 0);
  }
  // Buffers (running statistics, counters) are state too; a model that differs in them differs.
  for (auto& b : model.buffers()) {
    torch::Tensor t = b.detach();
    comm.broadcast(t, 0);
  }
  // END STUDENT CODE
}

void average_gradients(ddplab::dist::Communicator& comm, torch::nn::Module& model) {
  // BEGIN STUDENT CODE (02.3: average the gradients)
  torch::NoGradGuard no_grad;
  const double world = static_cast<double>(comm.size());
  for (auto& p : model.parameters()) {
    torch::Tensor g = p.grad();
    if (!g.defined()) continue;
    comm.allreduce(g);  // sum over ranks, in place
    (void)world;  // PLANTED BUG: summed, never divided by the world size
  }
  // END STUDENT CODE
}

}  // namespace lab02

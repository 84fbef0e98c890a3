// Launcher detection and strict parsing of rank variables.
#include "ddplab/dist/env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "ddplab/error.h"

namespace ddplab::dist {
namespace {

/// Strict non-negative integer: digits only (after optional surrounding spaces), fits an int.
int parse_int(const std::string& name, const std::string& value, int min_value) {
  size_t b = value.find_first_not_of(" \t");
  size_t e = value.find_last_not_of(" \t");
  const std::string v = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  bool digits = !v.empty();
  for (char c : v) digits = digits && c >= '0' && c <= '9';
  if (!digits) {
    throw ConfigError(fmt::format("environment variable {}='{}' is not a non-negative integer", name, value));
  }
  errno = 0;
  const long long n = std::strtoll(v.c_str(), nullptr, 10);
  if (errno == ERANGE || n > 1000000000LL) {
    throw ConfigError(fmt::format("environment variable {}='{}' is out of range", name, value));
  }
  if (n < min_value) {
    throw ConfigError(fmt::format("environment variable {}='{}' must be at least {}", name, value, min_value));
  }
  return static_cast<int>(n);
}

struct Reader {
  const EnvLookup& env;
  std::optional<std::string> get(const std::string& name) const { return env(name); }
  bool has(const std::string& name) const { return env(name).has_value(); }
  int integer(const std::string& name, int min_value) const {
    const auto v = env(name);
    if (!v) throw ConfigError(fmt::format("environment variable {} is not set", name));
    return parse_int(name, *v, min_value);
  }
  int integer_or(const std::string& name, int fallback, int min_value) const {
    return has(name) ? integer(name, min_value) : fallback;
  }
};

void check_consistent(const Environment& e, const std::string& rank_var, const std::string& world_var,
                      const std::string& local_var, const std::string& local_world_var, const EnvLookup& env) {
  auto value = [&](const std::string& n) { return env(n).value_or("?"); };
  if (e.rank >= e.world_size) {
    throw ConfigError(fmt::format("{}={} is not below {}={} (ranks are 0..{}-1)", rank_var, value(rank_var), world_var,
                                  value(world_var), world_var));
  }
  if (e.local_rank >= e.local_world_size) {
    throw ConfigError(
        fmt::format("{}={} is not below {}={}", local_var, e.local_rank, local_world_var, e.local_world_size));
  }
  if (e.local_world_size > e.world_size) {
    throw ConfigError(
        fmt::format("{}={} is larger than {}={}", local_world_var, e.local_world_size, world_var, e.world_size));
  }
}

void read_rendezvous(const Reader& r, Environment& e, const std::string& fallback_addr) {
  if (const auto addr = r.get("MASTER_ADDR"); addr && !addr->empty()) {
    e.master_addr = *addr;
  } else {
    e.master_addr = fallback_addr;
  }
  e.master_port = r.integer_or("MASTER_PORT", kDefaultMasterPort, 1);
  if (e.master_port > 65535) {
    throw ConfigError(fmt::format("environment variable MASTER_PORT='{}' is not a TCP port (1..65535)",
                                  r.get("MASTER_PORT").value_or("")));
  }
}

}  // namespace

std::string Environment::describe() const {
  std::string s = fmt::format("rank {}/{} (local {}/{}, node {}) via {}", rank, world_size, local_rank,
                              local_world_size, node_rank, source);
  if (distributed()) s += fmt::format(", rendezvous {}:{}", master_addr, master_port);
  return s;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Environment detect_environment(const EnvLookup& env) {
  const Reader r{env};
  Environment e;
  if (r.has("RANK") || r.has("WORLD_SIZE")) {
    // torchrun (and our own launcher): all of RANK and WORLD_SIZE, MASTER_ADDR when distributed.
    e.source = "torchrun";
    e.rank = r.integer("RANK", 0);
    e.world_size = r.integer("WORLD_SIZE", 1);
    e.local_rank = r.integer_or("LOCAL_RANK", e.rank, 0);
    e.local_world_size = r.integer_or("LOCAL_WORLD_SIZE", e.world_size, 1);
    e.node_rank = r.integer_or("GROUP_RANK", 0, 0);
    e.restart_count = r.integer_or("TORCHELASTIC_RESTART_COUNT", 0, 0);
    check_consistent(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", env);
    if (e.world_size > 1) {
      const auto addr = r.get("MASTER_ADDR");
      if (!addr || addr->empty()) {
        throw ConfigError(
            fmt::format("WORLD_SIZE={} but MASTER_ADDR is not set: ranks cannot find the rendezvous "
                        "(start the job with `ddplab launch`, torchrun, mpirun or srun)",
                        e.world_size));
      }
      if (!r.has("MASTER_PORT")) {
        throw ConfigError(
            fmt::format("WORLD_SIZE={} and MASTER_ADDR={} but MASTER_PORT is not set", e.world_size, *addr));
      }
      read_rendezvous(r, e, "");
    }
    return e;
  }
  if (r.has("OMPI_COMM_WORLD_RANK") || r.has("OMPI_COMM_WORLD_SIZE")) {
    e.source = "openmpi";
    e.rank = r.integer("OMPI_COMM_WORLD_RANK", 0);
    e.world_size = r.integer("OMPI_COMM_WORLD_SIZE", 1);
    e.local_rank = r.integer_or("OMPI_COMM_WORLD_LOCAL_RANK", e.rank, 0);
    e.local_world_size = r.integer_or("OMPI_COMM_WORLD_LOCAL_SIZE", e.world_size, 1);
    // Open MPI has no node index (OMPI_COMM_WORLD_NODE_RANK is a node-local rank across jobs);
    // with mpirun's default by-slot mapping, node = rank / ranks-per-node.
    check_consistent(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                     "OMPI_COMM_WORLD_LOCAL_SIZE", env);
    e.node_rank = e.rank / e.local_world_size;
    if (e.world_size > 1) {
      if (e.local_world_size < e.world_size && !r.has("MASTER_ADDR")) {
        throw ConfigError(
            fmt::format("OMPI_COMM_WORLD_SIZE={} spans several nodes but MASTER_ADDR is not set "
                        "(pass it with mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT)",
                        e.world_size));
      }
      read_rendezvous(r, e, "127.0.0.1");
    }
    return e;
  }
  if (r.has("SLURM_PROCID") || r.has("SLURM_NTASKS")) {
    e.source = "slurm";
    e.rank = r.integer("SLURM_PROCID", 0);
    e.world_size = r.integer("SLURM_NTASKS", 1);
    e.local_rank = r.integer_or("SLURM_LOCALID", 0, 0);
    // SLURM_NTASKS_PER_NODE is a plain number when the job asked for one; SLURM_TASKS_PER_NODE is
    // always set but compressed ("2(x3),1"): its first count is this layout's tasks on node 0.
    if (r.has("SLURM_NTASKS_PER_NODE")) {
      e.local_world_size = r.integer("SLURM_NTASKS_PER_NODE", 1);
    } else if (const auto tpn = r.get("SLURM_TASKS_PER_NODE");
               tpn && !tpn->empty() && std::isdigit(static_cast<unsigned char>((*tpn)[0]))) {
      e.local_world_size = std::max(1, std::atoi(tpn->c_str()));
    } else {
      e.local_world_size = e.world_size;
    }
    e.node_rank = r.integer_or("SLURM_NODEID", 0, 0);
    check_consistent(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", env);
    if (e.world_size > 1) {
      const auto launch = r.get("SLURM_LAUNCH_NODE_IPADDR");
      if (!r.has("MASTER_ADDR") && !launch) {
        throw ConfigError(
            fmt::format("SLURM_NTASKS={} but neither MASTER_ADDR nor SLURM_LAUNCH_NODE_IPADDR is set", e.world_size));
      }
      read_rendezvous(r, e, launch.value_or(""));
    }
    return e;
  }
  e.source = "single";
  return e;
}

}  // namespace ddplab::dist

// The launch contract (design.md, "Launch"): a lab learns its rank, world size, local rank and
// the rendezvous address from the environment — torchrun's variables, else Open MPI's, else
// Slurm's, else it is a single process. Never from code: "change the cluster and it explodes".
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ddplab::dist {

/// Where this process sits in the job, and how to reach the rendezvous store.
struct Environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr;  ///< rendezvous host (rank 0 hosts the TCPStore); "" for a single process
  int master_port = 0;
  std::string source;  ///< "torchrun", "openmpi", "slurm" or "single"
  /// Which attempt of an elastic job this is (torchrun's TORCHELASTIC_RESTART_COUNT; 0: the first,
  /// and for every other launcher).
  int restart_count = 0;

  bool distributed() const noexcept { return world_size > 1; }
  /// Whether `other` places this process in the same job: same rank and world size and, in a
  /// distributed job, the same rendezvous address (local ranks and the source may differ).
  bool same_job(const Environment& other) const noexcept {
    return rank == other.rank && world_size == other.world_size &&
           (!distributed() || (master_addr == other.master_addr && master_port == other.master_port));
  }
  /// "rank 1/4 (local 1/2, node 0) via torchrun, rendezvous 127.0.0.1:29500"
  std::string describe() const;
};

/// Reads a variable; returns nullopt when unset. Injectable so tests need not touch the process env.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
/// The process environment (getenv).
EnvLookup process_env();

/// Detects the launcher and parses its variables. Throws ddplab::ConfigError naming the variable
/// and its value when a value is malformed (non-numeric, negative) or inconsistent (RANK >=
/// WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE, WORLD_SIZE > 1 without MASTER_ADDR, ...).
/// Under Open MPI and Slurm the rendezvous address comes from MASTER_ADDR/MASTER_PORT when set
/// (mpirun -x MASTER_ADDR), else from SLURM_LAUNCH_NODE_IPADDR (Slurm) or 127.0.0.1 for a
/// single-node mpirun; the port defaults to 29500.
Environment detect_environment(const EnvLookup& env = process_env());

/// Default rendezvous port when only the address is known (torchrun's default).
inline constexpr int kDefaultMasterPort = 29500;

}  // namespace ddplab::dist

// `ddplab launch -n N -- PROGRAM ARGS...`: starts N ranks of a program on this machine with
// torchrun's environment variables, prefixes their output with the rank, stops the job when one
// rank fails and exits with its status. The work is done by the library (common/src/launch.cpp).
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "ddplab/error.h"
#include "ddplab/launch.h"

namespace ddplab::tools {
namespace {

struct LaunchOptions {
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::string master_port = "auto";
  std::string run_id;
  std::string log_dir;
  double timeout = 0;
  double grace = 5;
  bool no_prefix = false;
  bool verbose = false;
  std::string bind = "auto";
  std::string backend = "auto";
  std::vector<std::string> command;
};

/// "auto" is 0 (the library picks a free port); anything else must be a port number.
int parse_port(const std::string& text) {
  if (text == "auto") return 0;
  size_t used = 0;
  int port = -1;
  try {
    port = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || port < 1 || port > 65535) {
    throw ConfigError(fmt::format("--master-port {}: must be 'auto' or a port in [1, 65535]", text));
  }
  return port;
}

int run_launch(const LaunchOptions& o) {
  LaunchSpec spec;
  spec.nproc = o.nproc;
  spec.nnodes = o.nnodes;
  spec.node_rank = o.node_rank;
  spec.master_addr = o.master_addr;
  spec.master_port = parse_port(o.master_port);
  spec.run_id = o.run_id;
  spec.command = o.command;
  spec.log_dir = o.log_dir;
  spec.timeout_s = o.timeout;
  spec.grace_s = o.grace;
  spec.prefix_output = !o.no_prefix;
  spec.verbose = o.verbose;
  spec.bind = parse_cpu_bind(o.bind);
  spec.backend = parse_launch_backend(o.backend);
  // The library has already said why a job failed (which rank, which status or signal).
  return launch(spec).exit_code;
}

}  // namespace

void setup_launch(CLI::App& app) {
  auto opts = std::make_shared<LaunchOptions>();
  auto* sub = app.add_subcommand("launch", "Start N ranks of a program on this machine, as torchrun does");
  sub->add_option("-n,--nproc-per-node", opts->nproc, "Ranks on this machine")->capture_default_str();
  sub->add_option("--nnodes", opts->nnodes, "Machines in the job (WORLD_SIZE = N x nnodes)")->capture_default_str();
  sub->add_option("--node-rank", opts->node_rank, "This machine's index in [0, nnodes)")->capture_default_str();
  sub->add_option("--master-addr", opts->master_addr, "Address of rank 0's rendezvous store (MASTER_ADDR)")
      ->capture_default_str();
  sub->add_option("--master-port", opts->master_port, "Its port (MASTER_PORT), or 'auto' for a free one (one node)")
      ->capture_default_str();
  sub->add_option("--run-id", opts->run_id, "TORCHELASTIC_RUN_ID (default: generated)");
  sub->add_option("--log-dir", opts->log_dir, "Also write each rank's output to DIR/rank<R>.log")
      ->envname("DDPLAB_LAUNCH_LOG_DIR");
  sub->add_option("--timeout", opts->timeout, "Stop the job after this many seconds and exit 124 (0: no limit)")
      ->envname("DDPLAB_LAUNCH_TIMEOUT")
      ->capture_default_str();
  sub->add_option("--grace", opts->grace, "Seconds between SIGTERM and SIGKILL when stopping ranks")
      ->envname("DDPLAB_LAUNCH_GRACE")
      ->capture_default_str();
  sub->add_option("--bind", opts->bind,
                  "Bind each rank to cores of its own: auto (when 2+ ranks fit this machine's cores, as "
                  "mpirun does; DDPLAB_BIND, if set, chooses instead), cores (bind or fail), none (the "
                  "scheduler places the threads, as torchrun)")
      ->check(CLI::IsMember({"auto", "cores", "none"}))
      ->capture_default_str();
  sub->add_option("--backend", opts->backend,
                  "Who starts the ranks and what their collectives go over: c10d (this launcher; Gloo for "
                  "CPU tensors, NCCL for CUDA), mpi (Open MPI's mpirun, one app context per rank with this "
                  "launcher's variables and cores, and DDPLAB_BACKEND=mpi: shared memory between the ranks), "
                  "auto (mpi where this build has Open MPI and mpirun is on PATH, for 2+ ranks on one node; "
                  "else c10d)")
      ->envname("DDPLAB_LAUNCH_BACKEND")
      ->check(CLI::IsMember({"c10d", "mpi", "auto"}))
      ->capture_default_str();
  sub->add_flag("--no-prefix", opts->no_prefix, "Do not prefix output lines with [rank R]");
  sub->add_flag("-v,--verbose", opts->verbose, "Also report the port, the start and each rank's exit");
  sub->add_option("command", opts->command, "PROGRAM ARGS... (after --)")->required();
  sub->footer(
      "Put -- before the program when it has options of its own:\n"
      "  ddplab launch -n 2 -- build/solutions/bin/lab01_baseline --data DIR\n"
      "Exit status: 0 if every rank succeeded; else the first failing rank's status (128 + signal\n"
      "if it was killed), 124 after --timeout, 128 + signal if the launcher was interrupted.");
  sub->callback([opts] { exit_status() = run_launch(*opts); });
}

}  // namespace ddplab::tools

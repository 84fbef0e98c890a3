// Short trial jobs of a lab program (the lab 09 template), started the way the grader starts runs
// and read back from their reports: what `ddplab preflight` and `ddplab forecast --check` measure.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddplab/launch.h"

namespace ddplab::tools {

/// One trial job: its reports (one per rank) and the figures read from them.
struct Trial {
  int ranks = 0;
  int64_t batch = 0;         ///< per rank (the report's config)
  double step_s = 0;         ///< the slowest rank's median step
  double samples_per_s = 0;  ///< ranks x batch / step_s: the job's samples per second
  double busy = 0;           ///< rank 0's busy fraction (compute / wall of its steps)
  double comm_share = 0;     ///< rank 0's exposed communication / wall
  std::vector<nlohmann::json> reports;
};

/// Runs `spec` until it ends or `timeout_s` passes, every line of its output kept with "[rank R] "
/// before it (the launcher's own with "[launcher] "), and returns the output; written to `log` too
/// when one is given. A failed job throws Error with `what`, the launcher's summary and the
/// output's last 40 lines. What the benchmarks and trials of `ddplab` start goes through here.
std::string run_captured(LaunchSpec spec, double timeout_s, const std::string& what,
                         const std::filesystem::path& log = {});

/// Makes `spec` a job of n ranks that mpirun starts (LaunchBackend::kMpi: the launcher's variables
/// and cores per rank) and whose collectives go over Open MPI (`--backend mpi`).
void start_with_mpirun(LaunchSpec& spec, int n);

/// The transport a bench's `--backend auto` takes for a job of n ranks: "mpi" where the kit can
/// start it through mpirun (mpi_launch_problem), else "gloo". Other values are returned as given.
std::string bench_backend(const std::string& given, int n);

/// The program to try: `given`, or the lab 09 template next to this ddplab (same bin folder).
std::string template_program(const std::string& given);

/// Throws ConfigError if `args` set a flag the trial sets itself (`owner` names the command).
void refuse_trial_flags(const std::vector<std::string>& args, const std::string& owner);

/// Runs `program args... --max-steps steps --log-every 0 --report dir/rank{rank}.json` on `ranks`
/// ranks with the kit's launcher; its output goes to dir/output.txt. A failed job throws Error
/// with the command, the launcher's summary and the output's last lines.
Trial run_trial(const std::string& program, const std::vector<std::string>& args, int ranks, int64_t steps,
                const std::filesystem::path& dir, double timeout_s);

/// `copies` one-rank jobs of the same command started together, joined by nothing: together they
/// measure the machine's capacity for `copies` processes (bench scaling's definition), each
/// Trial's samples_per_s its own. Reports go to dir/copy<i>/.
std::vector<Trial> run_independent(const std::string& program, const std::vector<std::string>& args, int copies,
                                   int64_t steps, const std::filesystem::path& dir, double timeout_s);

}  // namespace ddplab::tools

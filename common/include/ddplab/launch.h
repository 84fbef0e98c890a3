// Starting the N processes of a data-parallel job on this machine, the way torchrun does: each
// rank gets torchrun's environment variables, its output lines are prefixed with its rank, and
// when one rank fails the others are stopped. A library so that `ddplab launch` and the grader share it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddplab {

/// What to start. Rank r of this node is global rank node_rank * nproc + r.
/// Whether the launcher binds each rank to cores of its own (sched_setaffinity before exec, so
/// every thread the rank starts inherits it), as Open MPI's mpirun does by default for a few
/// ranks. kAuto binds when 2 or more ranks fit the cores this launcher may use; kCores binds or
/// fails (more ranks than cores); kNone leaves placement to the scheduler (torchrun's behaviour).
/// Measured on a 2-core VM (docs/concepts/gradient-sync.md): binding keeps a rank's Gloo threads
/// on its own core, and a 16 B all-reduce at 2 ranks takes ~0.17 ms instead of ~0.28 ms.
enum class CpuBind { kAuto, kCores, kNone };
/// "auto", "cores" or "none"; throws ConfigError naming `flag` otherwise.
CpuBind parse_cpu_bind(const std::string& text, const std::string& flag = "--bind");
const char* cpu_bind_name(CpuBind bind);

/// How the ranks are started, and so which transport their collectives take (`ddplab launch
/// --backend`). kC10d: the launcher starts each rank itself with torchrun's variables, and the
/// program's collectives go over c10d (Gloo for CPU tensors, NCCL for CUDA ones). kMpi: Open MPI's
/// mpirun starts them, one app context per rank so that each still gets the kit's variables (RANK,
/// MASTER_ADDR, ..., DDPLAB_CPUS) and cores, with DDPLAB_BACKEND=mpi: the collectives go through
/// Open MPI's shared memory (5-6 us for an all-reduce of up to 1 KiB on the 2-core VM, the kit's
/// in-step comparison included, where Gloo took ~150 us; docs/concepts/gradient-sync.md). kAuto: kMpi where it can
/// start the job (mpi_launch_problem is empty) and the job has two or more ranks, else kC10d.
enum class LaunchBackend { kC10d, kMpi, kAuto };
/// "c10d", "mpi" or "auto"; throws ConfigError naming `flag` otherwise.
LaunchBackend parse_launch_backend(const std::string& text, const std::string& flag = "--backend");
const char* launch_backend_name(LaunchBackend backend);

/// The cores of each local rank under `bind`: rank i gets the i-th of `nproc` equal, consecutive
/// blocks of `allowed` (the launcher's own affinity, in order), the leftover cores unused. An
/// empty list for every rank means no binding (kNone; kAuto with one rank or more ranks than
/// cores). kCores with more ranks than cores throws ConfigError.
std::vector<std::vector<int>> plan_cpu_binding(CpuBind bind, int nproc, const std::vector<int>& allowed);
/// The cores this process may run on (sched_getaffinity), in increasing order.
std::vector<int> allowed_cpus();
/// "0-3,6" for {0,1,2,3,6}.
std::string cpu_list(const std::vector<int>& cpus);

struct LaunchSpec {
  int nproc = 1;                          ///< ranks on this node (torchrun's --nproc_per_node)
  int nnodes = 1;                         ///< nodes in the job; WORLD_SIZE = nproc * nnodes
  int node_rank = 0;                      ///< this node's index (GROUP_RANK), 0 <= node_rank < nnodes
  std::string master_addr = "127.0.0.1";  ///< MASTER_ADDR: where rank 0 opens the TCPStore
  int master_port = 0;                    ///< MASTER_PORT; 0 = a free port on master_addr (nnodes == 1 only)
  std::vector<std::string> command;       ///< program and arguments; the program is looked up in PATH
  /// Started in front of the job (the grader's sandbox: `bwrap ... --`, `ddplab-run-as UID -- env
  /// --chdir=DIR`): in front of each rank's program, or, under kMpi, of mpirun itself, so that
  /// every rank of the job shares one confinement (Open MPI's shared memory and session folder).
  std::vector<std::string> wrapper;
  std::map<std::string, std::string> extra_env;  ///< set in every rank after the launcher's variables
  std::string run_id;                            ///< TORCHELASTIC_RUN_ID; empty = generated
  std::string log_dir;                           ///< if set, each rank's lines also go to log_dir/rankR.log
  double timeout_s = 0;                          ///< stop the whole job after this long (0 = no limit); exit 124
  double grace_s = 5;                            ///< between SIGTERM and SIGKILL when stopping ranks
  bool prefix_output = true;                     ///< "[rank R] " before every line on the terminal
  bool forward_signals = true;                   ///< pass SIGINT/SIGTERM/SIGHUP sent to this process on to the ranks
  bool verbose = false;                          ///< also report the start and every rank's exit
  /// Cores per rank (plan_cpu_binding over this launcher's affinity). A bound rank's environment
  /// has DDPLAB_CPUS, its core list ("1", "2-3").
  CpuBind bind = CpuBind::kAuto;
  /// Who starts the ranks and what their collectives go over (see LaunchBackend).
  LaunchBackend backend = LaunchBackend::kC10d;
  /// Resource limits set in each rank before exec (0 = inherit): address space (RLIMIT_AS, so a
  /// memory blow-up fails in that rank instead of taking the machine down) and file size
  /// (RLIMIT_FSIZE). The grader sets both; core dumps are off whenever either is set.
  uint64_t memory_limit_bytes = 0;
  uint64_t file_size_limit_bytes = 0;
  /// The memory limit bounds private writable memory (RLIMIT_DATA: the heap, anonymous mappings,
  /// thread stacks) instead of all address space. For CUDA programs: the CUDA runtime reserves tens
  /// of GB of address space at initialisation, and under a 4 GB RLIMIT_AS cudaGetDeviceCount fails
  /// with "out of memory" (seen on an H200 machine, driver 580); the reservation is not writable
  /// until used, so RLIMIT_DATA still stops a host-memory blow-up.
  bool memory_limit_data_only = false;
  /// If set, every output line of a rank (without its newline) goes here instead of the terminal.
  /// Called from the thread that called launch(), one line at a time.
  std::function<void(int rank, bool is_stderr, const std::string& line)> on_line;
  /// If set, the launcher's own messages (a rank failed, timed out, ...) go here instead of stderr.
  std::function<void(const std::string& message)> on_message;
};

/// How one rank ended.
struct RankResult {
  int rank = -1;           ///< global rank
  pid_t pid = -1;          ///< also its process group id
  int exit_code = -1;      ///< as a shell reports it: the exit status, or 128 + signal
  int signal = 0;          ///< the signal that killed it, 0 if it exited
  bool timed_out = false;  ///< still running when the job's timeout expired
  bool stopped = false;    ///< the launcher had asked it to stop (another rank failed, timeout, interrupt)
  double seconds = 0;      ///< from start to exit
};

/// How the job ended.
struct LaunchResult {
  /// 0; the first failing rank's exit_code; 124 on timeout; 128 + signal if interrupted; 3
  /// (kExitNotAttempted) if ranks ended "not attempted" and none failed — such a rank does not
  /// stop the others.
  int exit_code = 0;
  std::vector<RankResult> ranks;  ///< indexed by local rank
  int first_failed_rank = -1;     ///< global rank of the first rank that failed on its own, -1 if none
  bool timed_out = false;
  int interrupted_by = 0;  ///< the signal (SIGINT, SIGTERM, SIGHUP) that stopped the job, 0 if none
  int master_port = 0;     ///< the port the job used (the free one picked for master_port 0)
  std::string summary;     ///< one line saying how the job ended
  /// How the ranks were started: "c10d" (by the launcher) or "mpi" (through mpirun; kAuto
  /// resolved). Under mpirun each rank's status comes from the shell around it, and every rank's
  /// pid is mpirun's (whose process group the launcher signals).
  std::string backend;
};

/// Runs the job and returns when every rank has exited. The processes (and what they started in
/// their process groups) are gone on every path out, exceptions included. While it runs, SIGINT,
/// SIGTERM and SIGHUP sent to this process are forwarded to the ranks (spec.forward_signals).
/// Throws ConfigError for an invalid spec or a program that cannot be run, before starting anything.
LaunchResult launch(const LaunchSpec& spec);

/// A TCP port that is free on addr right now (bind to port 0, read it back). Another process may
/// take it before it is used, but two calls practically never return the same one.
int find_free_port(const std::string& addr = "127.0.0.1");

/// The environment of one rank (local_rank on this node): the launcher's own, minus the variables of
/// an outer launcher (OMPI_COMM_WORLD_*, SLURM_PROCID/NTASKS/LOCALID), plus torchrun's and
/// DDPLAB_LAUNCHER=1, plus spec.extra_env. spec.master_port must already be resolved (non-zero).
std::map<std::string, std::string> rank_environment(const LaunchSpec& spec, int local_rank);

/// Why `spec` cannot be started through mpirun on this machine, "" if it can: this build has no
/// Open MPI, mpirun is not on PATH, or the job spans several nodes (mpirun then needs a hostfile:
/// run it directly).
std::string mpi_launch_problem(const LaunchSpec& spec);

/// "SIGSEGV" for SIGSEGV, "signal 42" for one without a well-known name.
std::string signal_name(int sig);

}  // namespace ddplab

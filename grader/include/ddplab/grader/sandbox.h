// The sandbox the grader runs student programs in (lab programs and test binaries): bubblewrap
// (Debian's `bubblewrap`, /usr/bin/bwrap) gives each one a file system of its own that holds the
// system folders (read-only), the program itself and the data set (read-only) and one writable
// folder, its run folder (also its working directory and TMPDIR). Nothing else exists there: not
// the kit's solutions/, not the build folder (calibration, the solutions' binaries and objects),
// not other submissions, not the grader's outputs. Where bubblewrap cannot run (a container
// without user namespaces, such as a default Docker one) and the grader runs as root, the
// unprivileged-user sandbox runs them as uid 65534 (nobody) instead, and compiles a submission as
// uid 65533 (through ddplab-run-as, tools/run_as.cpp): the file system's permissions keep them
// out of what root alone may read, which the grader checks before grading. Guide:
// docs/instructor-guide.md, "Sandbox".
#pragma once

#include <string>
#include <vector>

#include "ddplab/launch.h"

namespace ddplab::grader {

/// --sandbox: auto (bubblewrap if it works here, else the unprivileged user if it works, else
/// unconfined with a warning), required (one of the two, or grading stops), bwrap or user (that
/// one, or grading stops), none.
enum class SandboxMode { kAuto, kRequired, kBwrap, kUser, kNone };
SandboxMode parse_sandbox_mode(const std::string& name);  ///< ConfigError for anything else
const char* sandbox_mode_name(SandboxMode m);

/// The uids of the unprivileged-user sandbox: programs run as kRunUid, a submission compiles as
/// kCompileUid (so that what the compiler writes is not the programs' to change).
constexpr unsigned kRunUid = 65534;
constexpr unsigned kCompileUid = 65533;

/// The sandbox of one grading job.
struct Sandbox {
  bool enabled = false;                ///< false: programs run unconfined
  bool as_user = false;                ///< enabled: true = unprivileged user (ddplab-run-as), false = bubblewrap
  std::string bwrap = "bwrap";         ///< the bubblewrap program
  std::vector<std::string> read_only;  ///< files and folders every confined program may read (the data set)
  std::string out_dir;  ///< as_user: the grader's output folder (run folders' parents inside it made traversable)
  std::string run_as;   ///< as_user: the ddplab-run-as program
  std::string note;     ///< one line for the grader's output: how programs run
};

/// Why bubblewrap cannot confine a program here ("" if it can): runs `bwrap ... true` with the
/// options confine() uses and returns bwrap's own error ("No permissions to creating new
/// namespace, likely because the kernel does not allow non-privileged user namespaces", "bwrap:
/// not found in PATH").
std::string bwrap_problem(const std::string& bwrap = "bwrap");

/// What the unprivileged-user sandbox protects and needs.
struct UserSandboxPaths {
  std::vector<std::string> secrets;   ///< must not be readable (files) or listable (folders) by kRunUid
  std::vector<std::string> readable;  ///< must be readable by kRunUid (the data set)
  std::string out_dir;                ///< the grader's output folder: made traversable (0711), not listable
};

/// The folders outside the system ones that hold libraries the kit's programs load: a pip torch,
/// its nvidia-* wheels and the build's links to them (DDPLAB_LIBRARY_DIRS, set at configure time;
/// none for Debian's LibTorch). Confined programs must be able to read them to start at all.
std::vector<std::string> kit_library_dirs();

/// Sets a graded program's memory limit of `memory_mb` per rank: on address space in a CPU build;
/// on private writable memory in a CUDA build, whose programs map ~2.7 GB of CUDA libraries before
/// they allocate a byte and whose CUDA runtime reserves tens of GB at start
/// (LaunchSpec::memory_limit_data_only). Core dumps go off with it.
void apply_memory_limit(LaunchSpec& spec, double memory_mb);

/// The kit's ddplab-run-as next to the running program (<build>/bin/ddplab-run-as).
std::string default_run_as();

/// The command that runs `command` as `uid`:`uid` with no supplementary groups, no capabilities
/// and no_new_privs: `run_as` (ddplab-run-as) UID -- command.
std::vector<std::string> user_command(const std::vector<std::string>& command, unsigned uid, const std::string& run_as);

/// Why the unprivileged-user sandbox cannot protect `paths` here ("" if it can): the grader is not
/// root, `run_as` is missing or cannot switch, or kRunUid can read a secret (named, with the chmod
/// that fixes it) or cannot read a path it needs. Makes paths.out_dir (created if missing) 0711 first.
std::string user_problem(const UserSandboxPaths& paths, const std::string& run_as = default_run_as());

/// The sandbox for `mode`. kAuto without a working bubblewrap tries the unprivileged user, and
/// without that gives a disabled sandbox whose note says why; kRequired, kBwrap and kUser without
/// theirs throw ddplab::Error saying why. `bwrap`: the program to use.
Sandbox make_sandbox(SandboxMode mode, std::vector<std::string> read_only, const UserSandboxPaths& user_paths = {},
                     const std::string& bwrap = "bwrap", const std::string& run_as = default_run_as());

/// The bwrap command line that runs `command` confined: it sees the system folders, `read_only`,
/// the program file (command[0], made absolute) read-only, and `writable` read-write (created if
/// missing, its working directory), with its own /dev and /proc (own PID namespace), no /tmp, no
/// capabilities, and is killed with its parent.
std::vector<std::string> bwrap_command(const std::string& bwrap, const std::vector<std::string>& command,
                                       const std::vector<std::string>& read_only, const std::string& writable);

/// The bwrap command line that runs a submission's build (`command`: cmake --build ...) confined:
/// the whole file system read-only, `build_dir` writable (the compiler writes its objects there,
/// and its temporary files in build_dir/submission-tmp), and every file of `hidden` (files, or folders' files) replaced
/// by an empty file under the same name — the kit's solutions/ and the calibration — so an #include or an assembler
/// .incbin in a student region cannot put their text into the program or the compiler's messages.
std::vector<std::string> bwrap_build_command(const std::string& bwrap, const std::vector<std::string>& command,
                                             const std::string& build_dir, const std::vector<std::string>& hidden);

/// Confines the job `spec` describes (if `sandbox` is enabled, through spec.wrapper: one sandbox for
/// every rank under --backend mpi): its command runs under bwrap with
/// `writable` as its only writable folder, or as kRunUid with `writable` its own (chowned, 0700;
/// the folders above it inside the grader's output folder made traversable), and TMPDIR points
/// into it. `extra_read_only`: what this program also reads. Without a sandbox, only TMPDIR is set.
void confine(const Sandbox& sandbox, LaunchSpec& spec, const std::string& writable,
             const std::vector<std::string>& extra_read_only = {});

/// bwrap reports a program killed by signal N as exit status 128 + N: turns those back into
/// signals (and the launcher's summary into "was killed by signal N (NAME)"), so that a confined
/// crash reads as an unconfined one. A no-op for an unconfined job.
void restore_signals(const Sandbox& sandbox, LaunchResult& result);

}  // namespace ddplab::grader

// The sandbox the grader runs student programs in (lab programs and test binaries): bubblewrap
// (Debian's `bubblewrap`, /usr/bin/bwrap) gives each one a file system of its own that holds the
// system folders (read-only), the program itself and the data set (read-only) and one writable
// folder, its run folder (also its working directory and TMPDIR). Nothing else exists there: not
// the kit's solutions/, not the build folder (calibration, the solutions' binaries and objects),
// not other submissions, not the grader's outputs. Guide: docs/instructor-guide.md, "Sandbox".
#pragma once

#include <string>
#include <vector>

#include "ddplab/launch.h"

namespace ddplab::grader {

/// --sandbox: auto (bubblewrap if it works here, else unconfined with a warning), bwrap (required:
/// grading stops if it does not work), none.
enum class SandboxMode { kAuto, kBwrap, kNone };
SandboxMode parse_sandbox_mode(const std::string& name);  ///< ConfigError for anything else
const char* sandbox_mode_name(SandboxMode m);

/// The sandbox of one grading job.
struct Sandbox {
  bool enabled = false;                ///< false: programs run unconfined
  std::string bwrap = "bwrap";         ///< the bubblewrap program
  std::vector<std::string> read_only;  ///< files and folders every confined program may read (the data set)
  std::string note;                    ///< one line for the grader's output: how programs run
};

/// Why bubblewrap cannot confine a program here ("" if it can): runs `bwrap ... true` with the
/// options confine() uses and returns bwrap's own error ("No permissions to creating new
/// namespace, likely because the kernel does not allow non-privileged user namespaces", "bwrap:
/// not found in PATH").
std::string bwrap_problem(const std::string& bwrap = "bwrap");

/// The sandbox for `mode`. kAuto without a working bubblewrap gives a disabled sandbox whose note
/// says why; kBwrap without one throws ddplab::Error saying why. `bwrap`: the program to use.
Sandbox make_sandbox(SandboxMode mode, std::vector<std::string> read_only, const std::string& bwrap = "bwrap");

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

/// Confines the job `spec` describes (if `sandbox` is enabled): its command runs under bwrap with
/// `writable` as its only writable folder, and TMPDIR points into it. `extra_read_only`: what this
/// program also reads. Without a sandbox, only TMPDIR is set.
void confine(const Sandbox& sandbox, LaunchSpec& spec, const std::string& writable,
             const std::vector<std::string>& extra_read_only = {});

/// bwrap reports a program killed by signal N as exit status 128 + N: turns those back into
/// signals (and the launcher's summary into "was killed by signal N (NAME)"), so that a confined
/// crash reads as an unconfined one. A no-op for an unconfined job.
void restore_signals(const Sandbox& sandbox, LaunchResult& result);

}  // namespace ddplab::grader

// Confining student programs with bubblewrap: an allow-list file system (system folders, the
// program, the data set, one writable run folder), own PID/IPC/UTS namespaces, no capabilities.
// Where bubblewrap cannot run and the grader is root: an unprivileged user (ddplab-run-as) that the
// file system's permissions keep out of solutions/, the calibration and the grader's outputs.
#include "ddplab/grader/sandbox.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <utime.h>

#include <fstream>
#include <sstream>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/config.h"
#include "ddplab/error.h"

namespace fs = std::filesystem;

namespace ddplab::grader {
namespace {

/// The system folders a program needs to start and run (libraries, ld.so.cache, the BLAS
/// alternatives under /etc, CPU topology under /sys). /home, /root, /tmp, /work, /autograder...
/// are not among them.
const char* const kSystem[] = {"/usr", "/etc", "/opt", "/sys", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};

/// The namespace and privilege options, shared by the probe and every confined command.
const std::vector<std::string> kIsolation =
    {"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session", "--cap-drop", "ALL"};

std::string absolute(const std::string& p) { return fs::absolute(p).lexically_normal().string(); }

/// Whether `p` lies in one of the system folders (bound already).
bool in_system(const std::string& p) {
  for (const char* dir : kSystem) {
    const std::string d = std::string(dir) + "/";
    if (p.rfind(d, 0) == 0) return true;
  }
  return false;
}

/// Runs a probe `command` (30 s at most), its output in `out`: "" if it exited 0, else what went
/// wrong — its own output, trimmed, or the launcher's summary or error ("program 'bwrap' not
/// found in PATH").
std::string run_probe(const std::vector<std::string>& command, std::string& out) {
  LaunchSpec spec;
  spec.nproc = 1;
  spec.command = command;
  spec.timeout_s = 30;
  spec.prefix_output = false;
  spec.on_line = [&](int, bool, const std::string& l) { out += l + "\n"; };
  spec.on_message = [&](const std::string&) {};
  try {
    const LaunchResult r = launch(spec);
    if (r.exit_code == 0) return "";
    return out.empty() ? r.summary : out.substr(0, out.find_last_not_of('\n') + 1);
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

SandboxMode parse_sandbox_mode(const std::string& name) {
  if (name == "auto") return SandboxMode::kAuto;
  if (name == "required") return SandboxMode::kRequired;
  if (name == "bwrap") return SandboxMode::kBwrap;
  if (name == "user") return SandboxMode::kUser;
  if (name == "none") return SandboxMode::kNone;
  throw ConfigError(fmt::format("--sandbox {}: expected auto, required, bwrap, user or none", name));
}

const char* sandbox_mode_name(SandboxMode m) {
  switch (m) {
    case SandboxMode::kAuto: return "auto";
    case SandboxMode::kRequired: return "required";
    case SandboxMode::kBwrap: return "bwrap";
    case SandboxMode::kUser: return "user";
    case SandboxMode::kNone: return "none";
  }
  return "auto";
}

void apply_memory_limit(LaunchSpec& spec, double memory_mb) {
  spec.memory_limit_bytes = static_cast<uint64_t>(memory_mb * 1024 * 1024);
  spec.memory_limit_data_only = DDPLAB_HAVE_CUDA_01 == 1;
}

std::vector<std::string> kit_library_dirs() {
  std::vector<std::string> dirs;
  const std::string list = DDPLAB_LIBRARY_DIRS;
  for (size_t at = 0; at < list.size();) {
    const size_t end = std::min(list.find(';', at), list.size());
    if (end > at) dirs.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return dirs;
}

std::string default_run_as() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "ddplab-run-as" : (self.parent_path() / "ddplab-run-as").string();
}

std::vector<std::string> user_command(const std::vector<std::string>& command, unsigned uid,
                                      const std::string& run_as) {
  std::vector<std::string> c = {run_as, std::to_string(uid), "--"};
  c.insert(c.end(), command.begin(), command.end());
  return c;
}

std::string user_problem(const UserSandboxPaths& paths, const std::string& run_as) {
  if (::geteuid() != 0) {
    return fmt::format("the grader runs as uid {}, and only root can run programs as another user", ::geteuid());
  }
  if (paths.secrets.empty() || paths.out_dir.empty()) return "no secrets or output folder were named to protect";
  if (!fs::exists(run_as)) {
    return fmt::format("{} not found (it is built with the grader: target ddplab_run_as)", run_as);
  }
  std::vector<std::string> args = {"/bin/sh", "-c",
                                   // s: must not be readable; n: must be; x: must be traversable
                                   "m=s; for p; do case \"$p\" in ::n|::x) m=${p#::}; continue;; esac; "
                                   "case $m in s) [ -r \"$p\" ] && echo \"secret $p\";; "
                                   "n) [ -r \"$p\" ] || echo \"need $p\";; x) [ -x \"$p\" ] || echo \"reach $p\";; "
                                   "esac; done; exit 0",
                                   "probe"};
  for (const auto& p : paths.secrets) args.push_back(absolute(p));
  args.push_back("::n");
  for (const auto& p : paths.readable) args.push_back(absolute(p));
  const std::string out_dir = absolute(paths.out_dir);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  ::chmod(out_dir.c_str(), 0711);  // its run folders' parent: reachable, not listable
  args.insert(args.end(), {"::x", out_dir});
  std::string out;
  if (const std::string why = run_probe(user_command(args, kRunUid, run_as), out); !why.empty()) {
    // its own error: "cannot switch to uid 65534: Operation not permitted" under a fake root (proot -0)
    return fmt::format("{} cannot run a program as uid {}: {}", run_as, kRunUid, why);
  }
  std::vector<std::string> problems;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    const std::string what = line.substr(0, sp), p = line.substr(sp + 1);
    if (what == "secret") {
      problems.push_back(fmt::format("uid {} can read {} (as root: chmod -R go-rwx {})", kRunUid, p, p));
    } else if (what == "need") {
      problems.push_back(fmt::format("uid {} cannot read {} (as root: chmod -R o+rX {}, and o+x each folder above it)",
                                     kRunUid, p, p));
    } else if (what == "reach") {
      problems.push_back(
          fmt::format("uid {} cannot reach the output folder {} (each folder above it needs o+x)", kRunUid, p));
    }
  }
  return fmt::format("{}", fmt::join(problems, "; "));
}

std::vector<std::string> bwrap_command(const std::string& bwrap, const std::vector<std::string>& command,
                                       const std::vector<std::string>& read_only, const std::string& writable) {
  std::vector<std::string> c = {bwrap};
  c.insert(c.end(), kIsolation.begin(), kIsolation.end());
  for (const char* dir : kSystem) {
    std::error_code ec;
    const auto st = fs::symlink_status(dir, ec);
    if (ec || !fs::exists(st)) continue;
    if (fs::is_symlink(st)) {
      c.insert(c.end(), {"--symlink", fs::read_symlink(dir).string(), dir});  // merged /usr: /lib -> usr/lib
    } else if (fs::is_directory(st)) {
      c.insert(c.end(), {"--ro-bind", dir, dir});
    }
  }
  // A private /dev (its own /dev/shm), /proc of its own PID namespace, and a /tmp of its own: a
  // tmpfs, so TMPDIR is another file system than the run folder, as /tmp is on most machines (a
  // file made in TMPDIR cannot be renamed into the run folder: EXDEV, as in real life). Binds
  // below that lie under /tmp (a CI's clone) are mounted over it, in order.
  c.insert(c.end(), {"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"});
  std::vector<std::string> readable = read_only;
  if (!command.empty()) readable.push_back(command[0]);
  for (const auto& p : readable) {
    const std::string a = absolute(p);
    if (!in_system(a)) c.insert(c.end(), {"--ro-bind", a, a});
  }
  const std::string w = absolute(writable);
  fs::create_directories(w);
  // The root bwrap builds the tree in is a tmpfs: read-only too, so the run folder and the private
  // /tmp are the only places a write can land.
  c.insert(c.end(), {"--bind", w, w, "--remount-ro", "/", "--chdir", w, "--"});
  if (!command.empty()) {
    c.push_back(absolute(command[0]));
    c.insert(c.end(), command.begin() + 1, command.end());
  }
  return c;
}

std::vector<std::string> bwrap_build_command(const std::string& bwrap, const std::vector<std::string>& command,
                                             const std::string& build_dir, const std::vector<std::string>& hidden) {
  // Hidden files become an empty file dated 1970, each under its own name: the build's globs list
  // the same names and no configure dependency looks newer than the build, so CMake does not try
  // to regenerate (it would read the real files), while an #include or .incbin gets nothing.
  const fs::path empty = fs::temp_directory_path() / fmt::format("ddplab-hidden-{}", ::getuid());
  if (!fs::exists(empty)) {
    const fs::path tmp = empty.string() + fmt::format(".tmp{}", ::getpid());
    std::ofstream(tmp).close();
    fs::rename(tmp, empty);
  }
  const struct utimbuf epoch = {0, 0};
  ::utime(empty.c_str(), &epoch);
  std::vector<std::string> c = {bwrap};
  c.insert(c.end(), kIsolation.begin(), kIsolation.end());
  // No tmpfs over /tmp: the kit itself may live there (a CI's clone). The compiler's temporary
  // files go to a folder of the (writable) build folder instead.
  c.insert(c.end(), {"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"});
  const std::string b = absolute(build_dir);
  const std::string tmp = (fs::path(b) / "submission-tmp").string();
  fs::create_directories(tmp);
  c.insert(c.end(), {"--bind", b, b, "--setenv", "TMPDIR", tmp});
  auto hide = [&](const std::string& file) { c.insert(c.end(), {"--ro-bind", empty.string(), file}); };
  for (const auto& h : hidden) {
    const std::string a = absolute(h);
    std::error_code ec;
    if (fs::is_directory(a, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(a, ec)) {
        if (e.is_regular_file()) hide(e.path().string());
      }
    } else if (fs::is_regular_file(a, ec)) {
      hide(a);
    }
  }
  c.push_back("--");
  c.insert(c.end(), command.begin(), command.end());
  return c;
}

std::string bwrap_problem(const std::string& bwrap) {
  const fs::path probe = fs::temp_directory_path() / fmt::format("ddplab-sandbox-probe-{}", ::getpid());
  std::string out;
  const std::string problem = run_probe(bwrap_command(bwrap, {"/bin/true"}, {}, probe.string()), out);
  std::error_code ec;
  fs::remove_all(probe, ec);
  return problem;
}

Sandbox make_sandbox(SandboxMode mode, std::vector<std::string> read_only, const UserSandboxPaths& user_paths,
                     const std::string& bwrap, const std::string& run_as) {
  Sandbox s;
  s.bwrap = bwrap;
  s.read_only = std::move(read_only);
  if (mode == SandboxMode::kNone) {
    s.note = "sandbox off (--sandbox none): student programs can read and write whatever this user can";
    return s;
  }
  std::string bwrap_why;
  if (mode != SandboxMode::kUser) {
    bwrap_why = bwrap_problem(s.bwrap);
    if (bwrap_why.empty()) {
      s.enabled = true;
      s.note =
          "sandbox: student programs run under bubblewrap, seeing only the system, their program, the data and "
          "their run folder";
      return s;
    }
    if (mode == SandboxMode::kBwrap) {
      throw Error(fmt::format(
          "--sandbox bwrap: bubblewrap cannot confine programs here: {} (install Debian's bubblewrap; in a container "
          "it needs user namespaces or CAP_SYS_ADMIN; docs/instructor-guide.md, \"Sandbox\")",
          bwrap_why));
    }
  }
  const std::string user_why = user_problem(user_paths, run_as);
  if (user_why.empty()) {
    s.enabled = true;
    s.as_user = true;
    s.run_as = run_as;
    s.out_dir = absolute(user_paths.out_dir);
    s.note = fmt::format(
        "sandbox: student programs run as uid {} and a submission compiles as uid {}{}; neither can read solutions/, "
        "the calibration or the grader's outputs (checked), but both can write to /tmp",
        kRunUid, kCompileUid, bwrap_why.empty() ? "" : fmt::format(" (bubblewrap cannot run here: {})", bwrap_why));
    return s;
  }
  if (mode == SandboxMode::kUser) {
    throw Error(
        fmt::format("--sandbox user: an unprivileged user cannot confine programs here: {} "
                    "(docs/instructor-guide.md, \"Sandbox\")",
                    user_why));
  }
  if (mode == SandboxMode::kRequired) {
    throw Error(
        fmt::format("--sandbox required: nothing can confine student programs here: bubblewrap: {}; an "
                    "unprivileged user: {} (docs/instructor-guide.md, \"Sandbox\")",
                    bwrap_why, user_why));
  }
  s.note = fmt::format(
      "WARNING: no sandbox: bubblewrap cannot run here ({}), nor an unprivileged user ({}); student programs can read "
      "solutions/ and the calibration (use --sandbox required to refuse to grade without one)",
      bwrap_why, user_why);
  return s;
}

void confine(const Sandbox& sandbox, LaunchSpec& spec, const std::string& writable,
             const std::vector<std::string>& extra_read_only) {
  if (sandbox.enabled && !sandbox.as_user) {
    spec.extra_env["TMPDIR"] = "/tmp";  // bwrap's private tmpfs (bwrap_command)
  } else {
    // Without bubblewrap there is no private /tmp: a folder of the run folder, on its file system.
    const fs::path tmp = fs::absolute(writable) / "tmp";
    fs::create_directories(tmp);
    spec.extra_env["TMPDIR"] = tmp.string();
  }
  if (!sandbox.enabled) return;
  if (sandbox.as_user) {
    // The run folder becomes the program's own (and nobody else's but root's); the folders above it
    // in the grader's output folder are made traversable, not listable.
    const fs::path w = fs::absolute(writable).lexically_normal();
    auto give = [](const fs::path& p) {
      if (::lchown(p.c_str(), kRunUid, kRunUid) != 0) {
        throw Error(fmt::format("sandbox: cannot hand {} to uid {}: {}", p.string(), kRunUid, std::strerror(errno)));
      }
    };
    give(w);
    for (const auto& e : fs::recursive_directory_iterator(w)) give(e.path());
    ::chmod(w.c_str(), 0700);
    const std::string out = sandbox.out_dir.empty() ? "" : sandbox.out_dir + "/";
    for (fs::path p = w.parent_path(); !out.empty() && (p.string() + "/").rfind(out, 0) == 0; p = p.parent_path()) {
      struct stat st {};
      if (::stat(p.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0)
        ::chmod(p.c_str(), (st.st_mode & 07777) | S_IXOTH);
      if (p == p.parent_path()) break;
    }
    spec.extra_env["HOME"] = w.string();
    // its working directory, as in bwrap
    spec.wrapper = user_command({"env", "--chdir=" + w.string()}, kRunUid, sandbox.run_as);
    return;
  }
  std::vector<std::string> readable = sandbox.read_only;
  readable.insert(readable.end(), extra_read_only.begin(), extra_read_only.end());
  if (!spec.command.empty()) readable.push_back(spec.command[0]);
  // In front of each rank, or of mpirun (LaunchSpec::wrapper): one sandbox for the whole job then.
  spec.wrapper = bwrap_command(sandbox.bwrap, {}, readable, writable);
}

void restore_signals(const Sandbox& sandbox, LaunchResult& result) {
  if (!sandbox.enabled || sandbox.as_user) return;  // ddplab-run-as execs the program: its signals are its own
  for (auto& r : result.ranks) {
    if (r.signal != 0 || r.exit_code <= 128 || r.exit_code > 128 + 64) continue;
    const int sig = r.exit_code - 128;
    r.signal = sig;
    const std::string was = fmt::format("exited with status {}", r.exit_code);
    std::string now = fmt::format("was killed by signal {} ({})", sig, signal_name(sig));
    if (sig == SIGKILL) now += " (out of memory?)";
    const auto at = result.summary.find(was);
    if (at != std::string::npos) result.summary.replace(at, was.size(), now);
  }
}

}  // namespace ddplab::grader

// ddplab-run-as UID -- PROGRAM [ARGS...]: runs PROGRAM as UID:UID, the grader's unprivileged-user
// sandbox (grader/src/sandbox.cpp, grader/compile-as-student). Run as root, it drops the
// supplementary groups, then the gid and the uid (real, effective and saved: the kernel clears the
// capabilities with them), sets no_new_privs (no setuid program or file capability can give them
// back) and execs PROGRAM. It does what util-linux's setpriv does, and one thing more that setpriv
// cannot: it marks the process dumpable again after the switch (PR_SET_DUMPABLE). A uid change
// clears that flag, and a ptrace-based root such as proot (the kit's Debian 12 root on Gradescope's
// Ubuntu image) can then no longer read the process's memory to translate its execve: setpriv's
// exec fails there with "Bad address". Dumpable, the process is open to its own uid's processes,
// which are only the student's.
#include <grp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int fail(int status, const char* what, const char* detail) {
  std::fprintf(stderr, "ddplab-run-as: %s: %s\n", what, detail);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || std::strcmp(argv[2], "--") != 0) {
    return fail(2, "usage", "ddplab-run-as UID -- PROGRAM [ARGS...]");
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long id = std::strtoul(argv[1], &end, 10);
  if (errno != 0 || end == argv[1] || *end != '\0' || id == 0 || id > 65535) {
    return fail(2, "UID", "expected a number from 1 to 65535 (not root)");
  }
  const auto uid = static_cast<uid_t>(id);
  const auto gid = static_cast<gid_t>(id);
  if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0) {
    return fail(126, ("cannot switch to uid " + std::to_string(uid)).c_str(), std::strerror(errno));
  }
  if (::setuid(0) == 0) return fail(126, "still root after the switch", "refusing to run");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) {
    return fail(126, "prctl", std::strerror(errno));
  }
  ::execvp(argv[3], argv + 3);
  return fail(127, argv[3], std::strerror(errno));
}

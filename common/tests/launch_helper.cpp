// A stand-in rank for the launcher's tests: it runs the actions given as arguments, in order, so a
// test can script each rank's behaviour (print, sleep, exit, crash, ignore SIGTERM, fork a grandchild).
// An action written "@R:action" runs only on the rank whose RANK is R.
#include <signal.h>
#include <sys/resource.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace {

const char* kUsage =
    "usage: launch_helper ACTION...   ACTION = [@RANK:]NAME[:ARG]\n"
    "  env               print RANK, WORLD_SIZE, ... as NAME=VALUE lines (<unset> if missing)\n"
    "  print:TEXT        a line on stdout        eprint:TEXT   a line on stderr\n"
    "  partial:TEXT      TEXT on stdout without a newline\n"
    "  lines:N           N lines 'line <rank> <i>' on stdout, each long enough to straddle pipe reads\n"
    "  sleep:SECONDS     sleep                   exit:CODE     exit with CODE\n"
    "  signal:NAME       kill itself with SEGV, ABRT, KILL or TERM (abort() for ABRT)\n"
    "  ignore-term       ignore SIGTERM from now on      ignore-int   the same for SIGINT\n"
    "  touch:PATH        create PATH             wait-file:PATH  wait (up to 60 s) until PATH exists\n"
    "  grandchild:PATH   fork a child that writes its pid to PATH and sleeps 60 s\n"
    "  rlimits           print 'AS=<bytes|unlimited> DATA=<bytes|unlimited>' (its memory limits)\n"
    "  cpus              print 'CPUS=<the cores it may run on> ENV=<DDPLAB_CPUS or <unset>>'\n";

const char* kEnvNames[] = {"RANK",           "WORLD_SIZE",          "LOCAL_RANK",      "LOCAL_WORLD_SIZE",
                           "GROUP_RANK",     "ROLE_RANK",           "ROLE_WORLD_SIZE", "MASTER_ADDR",
                           "MASTER_PORT",    "TORCHELASTIC_RUN_ID", "DDPLAB_LAUNCHER", "OMPI_COMM_WORLD_RANK",
                           "SLURM_PROCID",   "SLURM_NTASKS",        "SLURM_LOCALID",   "DDPLAB_TEST_EXTRA",
                           "DDPLAB_BACKEND", "OMPI_COMM_WORLD_SIZE"};

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

int signal_from_name(const std::string& name) {
  if (name == "SEGV") return SIGSEGV;
  if (name == "ABRT") return SIGABRT;
  if (name == "KILL") return SIGKILL;
  if (name == "TERM") return SIGTERM;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // A crash test must not leave core files in the build tree.
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  const char* rank_env = std::getenv("RANK");
  const std::string rank = rank_env != nullptr ? rank_env : "";

  for (int i = 1; i < argc; ++i) {
    std::string action = argv[i];
    if (!action.empty() && action[0] == '@') {
      const size_t colon = action.find(':');
      if (colon == std::string::npos) {
        std::fprintf(stderr, "launch_helper: bad action '%s'\n%s", argv[i], kUsage);
        return 2;
      }
      if (action.substr(1, colon - 1) != rank) continue;
      action = action.substr(colon + 1);
    }
    const size_t colon = action.find(':');
    const std::string name = action.substr(0, colon);
    const std::string arg = colon == std::string::npos ? "" : action.substr(colon + 1);

    if (name == "rlimits") {
      auto show = [](int which) {
        rlimit r{};
        ::getrlimit(which, &r);
        return r.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(r.rlim_cur);
      };
      std::printf("AS=%s DATA=%s\n", show(RLIMIT_AS).c_str(), show(RLIMIT_DATA).c_str());
    } else if (name == "cpus") {
      cpu_set_t set;
      CPU_ZERO(&set);
      std::string list;
      if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c) {
          if (CPU_ISSET(c, &set)) list += (list.empty() ? "" : ",") + std::to_string(c);
        }
      }
      const char* env = std::getenv("DDPLAB_CPUS");
      std::printf("CPUS=%s ENV=%s\n", list.c_str(), env != nullptr ? env : "<unset>");
    } else if (name == "env") {
      for (const char* key : kEnvNames) {
        const char* value = std::getenv(key);
        std::printf("%s=%s\n", key, value != nullptr ? value : "<unset>");
      }
    } else if (name == "print") {
      std::printf("%s\n", arg.c_str());
    } else if (name == "eprint") {
      std::fprintf(stderr, "%s\n", arg.c_str());
    } else if (name == "partial") {
      std::printf("%s", arg.c_str());
    } else if (name == "lines") {
      const std::string filler(200, 'x');
      for (int n = 0, count = std::atoi(arg.c_str()); n < count; ++n) {
        std::printf("line %s %d %s\n", rank.c_str(), n, filler.c_str());
      }
    } else if (name == "sleep") {
      std::fflush(nullptr);
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg.c_str())));
    } else if (name == "exit") {
      std::fflush(nullptr);
      return std::atoi(arg.c_str());
    } else if (name == "signal") {
      const int sig = signal_from_name(arg);
      if (sig == 0) {
        std::fprintf(stderr, "launch_helper: unknown signal '%s'\n", arg.c_str());
        return 2;
      }
      std::fflush(nullptr);
      if (sig == SIGABRT) std::abort();
      // The default action, even under a sanitizer that installs its own SIGSEGV handler.
      ::signal(sig, SIG_DFL);
      ::raise(sig);
    } else if (name == "ignore-term") {
      ::signal(SIGTERM, SIG_IGN);
    } else if (name == "ignore-int") {
      ::signal(SIGINT, SIG_IGN);
    } else if (name == "touch") {
      std::ofstream(arg) << "\n";
    } else if (name == "wait-file") {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!file_exists(arg) && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } else if (name == "grandchild") {
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      if (pid == 0) {
        // Written to a temporary name and renamed, so the test never reads a half-written pid.
        const std::string tmp = arg + ".tmp";
        std::ofstream(tmp) << ::getpid() << "\n";
        std::rename(tmp.c_str(), arg.c_str());
        std::this_thread::sleep_for(std::chrono::seconds(60));
        ::_exit(0);
      }
      while (!file_exists(arg)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } else {
      std::fprintf(stderr, "launch_helper: unknown action '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  std::fflush(nullptr);
  return 0;
}

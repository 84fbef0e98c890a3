// Tests of the process launcher (common/src/launch.cpp) with real processes: launch_helper plays
// the ranks. Timing is only bounded generously (a job that should stop a 60 s sleeper must end
// well before 60 s); nothing asserts how fast anything is.
#include "ddplab/launch.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "ddplab/config.h"
#include "ddplab/error.h"
#include "scratch_dir.h"

#ifndef DDPLAB_LAUNCH_HELPER
#error "DDPLAB_LAUNCH_HELPER must name the launch_helper executable"
#endif

namespace ddplab {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// Lines a job printed, per rank and stream, captured through on_line; messages through on_message.
struct Captured {
  std::map<int, std::vector<std::string>> out, err;
  std::vector<std::string> messages;

  void attach(LaunchSpec& spec) {
    spec.on_line = [this](int rank, bool is_stderr, const std::string& line) {
      (is_stderr ? err : out)[rank].push_back(line);
    };
    spec.on_message = [this](const std::string& m) { messages.push_back(m); };
  }
  /// VALUE of the NAME=VALUE line a rank printed with the helper's "env" action.
  std::string env(int rank, const std::string& name) const {
    const auto it = out.find(rank);
    if (it == out.end()) return "<no output>";
    for (const auto& line : it->second) {
      if (line.rfind(name + "=", 0) == 0) return line.substr(name.size() + 1);
    }
    return "<not printed>";
  }
  std::string all_messages() const {
    std::string s;
    for (const auto& m : messages) s += m + "\n";
    return s;
  }
};

LaunchSpec helper_job(int nproc, std::vector<std::string> actions) {
  LaunchSpec spec;
  spec.nproc = nproc;
  spec.command = {DDPLAB_LAUNCH_HELPER};
  spec.command.insert(spec.command.end(), actions.begin(), actions.end());
  return spec;
}

/// A fresh directory per test, removed afterwards.
class LaunchTest : public ddplab::testing::ScratchTest {};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A process is gone when kill(pid, 0) fails with ESRCH, or it is a zombie waiting for whoever
/// adopted it (PID 1 of a container may reap late or never): either way it runs no more.
bool process_is_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] == 'Z';
}

bool eventually_gone(pid_t pid) {
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < until) {
    if (process_is_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return process_is_gone(pid);
}

/// A shell starts background jobs with SIGINT ignored; the launcher then leaves it ignored, as it
/// should, and there is nothing to forward.
bool sigint_is_ignored() {
  struct sigaction current {};
  ::sigaction(SIGINT, nullptr, &current);
  return current.sa_handler == SIG_IGN;
}

TEST_F(LaunchTest, SetsTorchrunEnvironmentForEachRank) {
  // Variables of an outer launcher must not reach the ranks.
  ::setenv("OMPI_COMM_WORLD_RANK", "7", 1);
  ::setenv("SLURM_PROCID", "5", 1);
  ::setenv("SLURM_NTASKS", "9", 1);
  ::setenv("SLURM_LOCALID", "4", 1);
  LaunchSpec spec = helper_job(3, {"env"});
  spec.extra_env["DDPLAB_TEST_EXTRA"] = "yes";
  Captured cap;
  cap.attach(spec);
  const LaunchResult result = launch(spec);
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}) ::unsetenv(name);

  ASSERT_EQ(result.exit_code, 0) << result.summary;
  ASSERT_EQ(result.ranks.size(), 3u);
  EXPECT_GT(result.master_port, 0);
  const std::string run_id = cap.env(0, "TORCHELASTIC_RUN_ID");
  EXPECT_NE(run_id, "<unset>");
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(result.ranks[static_cast<size_t>(r)].rank, r);
    EXPECT_EQ(result.ranks[static_cast<size_t>(r)].exit_code, 0);
    EXPECT_EQ(cap.env(r, "RANK"), std::to_string(r));
    EXPECT_EQ(cap.env(r, "WORLD_SIZE"), "3");
    EXPECT_EQ(cap.env(r, "LOCAL_RANK"), std::to_string(r));
    EXPECT_EQ(cap.env(r, "LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(cap.env(r, "GROUP_RANK"), "0");
    EXPECT_EQ(cap.env(r, "ROLE_RANK"), std::to_string(r));
    EXPECT_EQ(cap.env(r, "ROLE_WORLD_SIZE"), "3");
    EXPECT_EQ(cap.env(r, "MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(cap.env(r, "MASTER_PORT"), std::to_string(result.master_port));
    EXPECT_EQ(cap.env(r, "TORCHELASTIC_RUN_ID"), run_id);
    EXPECT_EQ(cap.env(r, "DDPLAB_LAUNCHER"), "1");
    EXPECT_EQ(cap.env(r, "DDPLAB_TEST_EXTRA"), "yes");
    EXPECT_EQ(cap.env(r, "OMPI_COMM_WORLD_RANK"), "<unset>");
    EXPECT_EQ(cap.env(r, "SLURM_PROCID"), "<unset>");
    EXPECT_EQ(cap.env(r, "SLURM_NTASKS"), "<unset>");
    EXPECT_EQ(cap.env(r, "SLURM_LOCALID"), "<unset>");
  }
}

TEST_F(LaunchTest, SecondNodeNumbersItsRanksAfterTheFirst) {
  LaunchSpec spec = helper_job(2, {"env"});
  spec.nnodes = 3;
  spec.node_rank = 1;
  spec.master_addr = "127.0.0.1";
  spec.master_port = 29531;
  spec.run_id = "job42";
  Captured cap;
  cap.attach(spec);
  const LaunchResult result = launch(spec);
  ASSERT_EQ(result.exit_code, 0) << result.summary;
  ASSERT_EQ(result.ranks.size(), 2u);
  for (int local = 0; local < 2; ++local) {
    const int global = 2 + local;
    SCOPED_TRACE("global rank " + std::to_string(global));
    EXPECT_EQ(result.ranks[static_cast<size_t>(local)].rank, global);
    EXPECT_EQ(cap.env(global, "RANK"), std::to_string(global));
    EXPECT_EQ(cap.env(global, "WORLD_SIZE"), "6");
    EXPECT_EQ(cap.env(global, "LOCAL_RANK"), std::to_string(local));
    EXPECT_EQ(cap.env(global, "LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(cap.env(global, "GROUP_RANK"), "1");
    EXPECT_EQ(cap.env(global, "MASTER_PORT"), "29531");
    EXPECT_EQ(cap.env(global, "TORCHELASTIC_RUN_ID"), "job42");
  }
  const auto env = rank_environment(spec, 1);
  EXPECT_EQ(env.at("RANK"), "3");
  EXPECT_EQ(env.at("ROLE_WORLD_SIZE"), "6");
}

TEST_F(LaunchTest, PrefixesEveryLineWithItsRankOnTheTerminal) {
  // Two ranks printing many long lines at once: every line must arrive whole, with its own prefix.
  LaunchSpec spec = helper_job(2, {"lines:300", "@0:print:hello", "@1:eprint:oops", "@0:partial:no newline"});
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const LaunchResult result = launch(spec);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(result.exit_code, 0) << result.summary << "\n" << err;

  // "[rank R] line R <n> xxx...x" with 200 x: a line cut or mixed with another rank's fails this.
  const auto well_formed = [](const std::string& l) {
    const std::string r = l.substr(6, 1);
    const std::string head = "[rank " + r + "] line " + r + " ";
    if (l.rfind(head, 0) != 0) return false;
    size_t i = head.size();
    const size_t digits = i;
    while (i < l.size() && std::isdigit(static_cast<unsigned char>(l[i]))) ++i;
    return i > digits && l.substr(i) == " " + std::string(200, 'x');
  };
  std::map<std::string, int> counts;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("[rank 0] line", 0) == 0 || line.rfind("[rank 1] line", 0) == 0) {
      EXPECT_TRUE(well_formed(line)) << "mangled line: " << line.substr(0, 120);
      ++counts[line.substr(0, 8)];
    } else {
      ++counts[line];
    }
  }
  EXPECT_EQ(counts["[rank 0]"], 300);
  EXPECT_EQ(counts["[rank 1]"], 300);
  EXPECT_EQ(counts["[rank 0] hello"], 1);
  EXPECT_EQ(counts["[rank 0] no newline"], 1) << "the partial last line is flushed at exit";
  EXPECT_EQ(out.find("oops"), std::string::npos) << "stderr lines stay on stderr";
  EXPECT_NE(err.find("[rank 1] oops\n"), std::string::npos) << err;
}

TEST_F(LaunchTest, NoPrefixWhenAskedAndStreamsKeptApartInCallbacks) {
  LaunchSpec spec = helper_job(1, {"print:plain", "eprint:to stderr"});
  spec.prefix_output = false;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const LaunchResult result = launch(spec);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(out, "plain\n");
  EXPECT_EQ(err, "to stderr\n");

  LaunchSpec spec2 = helper_job(1, {"print:plain", "eprint:to stderr"});
  Captured cap;
  cap.attach(spec2);
  ASSERT_EQ(launch(spec2).exit_code, 0);
  EXPECT_EQ(cap.out[0], std::vector<std::string>{"plain"});
  EXPECT_EQ(cap.err[0], std::vector<std::string>{"to stderr"});
}

TEST_F(LaunchTest, LogDirHoldsEachRanksLinesUnprefixed) {
  LaunchSpec spec = helper_job(2, {"@0:print:zero says hi", "@1:print:one says hi", "eprint:bye", "partial:tail"});
  spec.log_dir = path("logs/nested");
  Captured cap;
  cap.attach(spec);
  ASSERT_EQ(launch(spec).exit_code, 0);
  // stdout and stderr come through two pipes, so only the order within each is defined.
  const auto sorted_lines = [](const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::sort(lines.begin(), lines.end());
    return lines;
  };
  const std::string log0 = read_file(path("logs/nested/rank0.log"));
  const std::string log1 = read_file(path("logs/nested/rank1.log"));
  EXPECT_EQ(sorted_lines(log0), (std::vector<std::string>{"bye", "tail", "zero says hi"})) << log0;
  EXPECT_EQ(sorted_lines(log1), (std::vector<std::string>{"bye", "one says hi", "tail"})) << log1;
  EXPECT_EQ(log0.back(), '\n') << "a partial last line is completed";
}

TEST_F(LaunchTest, TheMemoryLimitIsOnAddressSpaceOrOnPrivateWritableMemory) {
  // RLIMIT_AS by default; RLIMIT_DATA for a CUDA program, whose runtime reserves tens of GB of
  // address space at start (the grader's apply_memory_limit in a CUDA build).
  for (const bool data_only : {false, true}) {
    LaunchSpec spec = helper_job(1, {"rlimits"});
    spec.memory_limit_bytes = uint64_t{3} << 30;
    spec.memory_limit_data_only = data_only;
    Captured cap;
    cap.attach(spec);
    const LaunchResult result = launch(spec);
    ASSERT_EQ(result.exit_code, 0) << result.summary;
    const std::string limit = std::to_string(uint64_t{3} << 30);
    ASSERT_EQ(cap.out[0].size(), 1u);
    // The limits the launcher found are inherited too: only the one it set is compared.
    const std::string line = cap.out[0][0];
    if (data_only) {
      EXPECT_NE(line.find("DATA=" + limit), std::string::npos) << line;
      EXPECT_EQ(line.find("AS=" + limit), std::string::npos) << line;
    } else {
      EXPECT_NE(line.find("AS=" + limit), std::string::npos) << line;
      EXPECT_EQ(line.find("DATA=" + limit), std::string::npos) << line;
    }
  }
}

TEST(CpuBinding, AutoGivesEachOfSeveralRanksItsOwnBlockOfCores) {
  using V = std::vector<std::vector<int>>;
  EXPECT_EQ(plan_cpu_binding(CpuBind::kAuto, 2, {0, 1}), (V{{0}, {1}}));
  EXPECT_EQ(plan_cpu_binding(CpuBind::kAuto, 2, {0, 1, 2, 3, 4}), (V{{0, 1}, {2, 3}}));  // core 4 left over
  EXPECT_EQ(plan_cpu_binding(CpuBind::kAuto, 3, {2, 5, 7}), (V{{2}, {5}, {7}}));         // the launcher's own mask
  // One rank keeps every core (its intra-op threads may use them); more ranks than cores share.
  EXPECT_EQ(plan_cpu_binding(CpuBind::kAuto, 1, {0, 1}), (V{{}}));
  EXPECT_EQ(plan_cpu_binding(CpuBind::kAuto, 3, {0, 1}), (V{{}, {}, {}}));
  EXPECT_EQ(plan_cpu_binding(CpuBind::kNone, 2, {0, 1}), (V{{}, {}}));
  EXPECT_EQ(plan_cpu_binding(CpuBind::kCores, 1, {0, 1}), (V{{0, 1}}));
}

TEST(CpuBinding, CoresWithMoreRanksThanCoresFailsSayingHowMany) {
  try {
    plan_cpu_binding(CpuBind::kCores, 3, {0, 1});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("3 ranks, but this launcher may use 2 core(s) (0-1)"), std::string::npos) << what;
    EXPECT_NE(what.find("--bind none"), std::string::npos) << what;
  }
  EXPECT_THROW(parse_cpu_bind("core"), ConfigError);
  EXPECT_EQ(parse_cpu_bind("none"), CpuBind::kNone);
  EXPECT_EQ(cpu_list({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
}

TEST_F(LaunchTest, BoundRanksRunOnTheirOwnCoresAndAreTold) {
  // On one core --bind auto binds nothing (more ranks than cores): the expectations follow the plan.
  const std::vector<int> cores = allowed_cpus();
  ASSERT_FALSE(cores.empty());
  for (CpuBind bind : {CpuBind::kAuto, CpuBind::kNone}) {
    LaunchSpec spec = helper_job(2, {"cpus"});
    spec.bind = bind;
    Captured c;
    c.attach(spec);
    ASSERT_EQ(launch(spec).exit_code, 0) << c.all_messages();
    const auto plan = plan_cpu_binding(CpuBind::kAuto, 2, cores);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(c.out[r].size(), 1u);
      const bool bound = bind == CpuBind::kAuto && !plan[static_cast<size_t>(r)].empty();
      const std::vector<int> mine = bound ? plan[static_cast<size_t>(r)] : cores;
      std::string list;
      for (int core : mine) list += (list.empty() ? "" : ",") + std::to_string(core);
      const std::string env = bound ? cpu_list(mine) : "<unset>";
      EXPECT_EQ(c.out[r][0], fmt::format("CPUS={} ENV={}", list, env))
          << "rank " << r << ", --bind " << cpu_bind_name(bind);
    }
  }
}

TEST_F(LaunchTest, AllRanksSucceedingGivesZero) {
  LaunchSpec spec = helper_job(4, {"exit:0"});
  Captured cap;
  cap.attach(spec);
  const LaunchResult result = launch(spec);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.first_failed_rank, -1);
  EXPECT_FALSE(result.timed_out);
  for (const auto& r : result.ranks) {
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.signal, 0);
    EXPECT_GT(r.pid, 0);
  }
  EXPECT_TRUE(cap.messages.empty()) << cap.all_messages();
}

TEST_F(LaunchTest, FailingRankStatusBecomesTheJobsStatus) {
  LaunchSpec spec = helper_job(3, {"@1:eprint:something broke", "@1:exit:4"});
  Captured cap;
  cap.attach(spec);
  const LaunchResult result = launch(spec);
  EXPECT_EQ(result.exit_code, 4);
  EXPECT_EQ(result.first_failed_rank, 1);
  EXPECT_EQ(result.ranks[1].exit_code, 4);
  EXPECT_EQ(result.ranks[1].signal, 0);
  EXPECT_NE(result.summary.find("rank 1 (pid " + std::to_string(result.ranks[1].pid) + ") exited with status 4"),
            std::string::npos)
      << result.summary;
  EXPECT_EQ(cap.err[1], std::vector<std::string>{"something broke"});
}

TEST_F(LaunchTest, ProgramIsFoundInPath) {
  LaunchSpec spec;
  spec.nproc = 2;
  spec.command = {"sh", "-c", "echo rank $RANK of $WORLD_SIZE"};
  Captured cap;
  cap.attach(spec);
  ASSERT_EQ(launch(spec).exit_code, 0);
  EXPECT_EQ(cap.out[0], std::vector<std::string>{"rank 0 of 2"});
  EXPECT_EQ(cap.out[1], std::vector<std::string>{"rank 1 of 2"});

  spec.nproc = 1;
  spec.command = {"sh", "-c", "exit 5"};
  EXPECT_EQ(launch(spec).exit_code, 5);
}

TEST_F(LaunchTest, FailFastStopsASleepingRankWithSigterm) {
  LaunchSpec spec = helper_job(2, {"@0:sleep:60", "@1:exit:4"});
  Captured cap;
  cap.attach(spec);
  const auto t0 = Clock::now();
  const LaunchResult result = launch(spec);
  EXPECT_LT(seconds_since(t0), 30.0) << "the sleeping rank was not stopped";
  EXPECT_EQ(result.exit_code, 4);
  EXPECT_EQ(result.first_failed_rank, 1);
  EXPECT_EQ(result.ranks[0].signal, SIGTERM);
  EXPECT_TRUE(result.ranks[0].stopped);
  EXPECT_EQ(result.ranks[0].exit_code, 128 + SIGTERM);
  ASSERT_FALSE(cap.messages.empty());
  EXPECT_NE(cap.messages[0].find("rank 1"), std::string::npos) << cap.all_messages();
  EXPECT_NE(cap.messages[0].find("exited with status 4; stopping the other ranks"), std::string::npos)
      << cap.all_messages();
}

TEST_F(LaunchTest, NotAttemptedIsNoFailureTheOtherRanksFinish) {
  // Status 3 is a skeleton that ran to its end ("exercise not attempted"): the job's status, but
  // no reason to stop a rank that is still writing its report.
  LaunchSpec spec = helper_job(2, {"@0:sleep:1", "@0:print:done", "@1:exit:3"});
  Captured cap;
  cap.attach(spec);
  const LaunchResult result = launch(spec);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.first_failed_rank, -1);
  EXPECT_EQ(result.ranks[0].exit_code, 0);
  EXPECT_FALSE(result.ranks[0].stopped);
  EXPECT_EQ(cap.out[0], std::vector<std::string>{"done"});
  EXPECT_NE(result.summary.find("rank 1 exited with status 3 (exercises not attempted)"), std::string::npos)
      << result.summary;
}

TEST_F(LaunchTest, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  const std::string ready = path("ready");
  LaunchSpec spec = helper_job(2, {"@0:ignore-term", "@0:touch:" + ready, "@0:sleep:60",  //
                                   "@1:wait-file:" + ready, "@1:exit:1"});
  spec.grace_s = 0.5;
  Captured cap;
  cap.attach(spec);
  const auto t0 = Clock::now();
  const LaunchResult result = launch(spec);
  EXPECT_LT(seconds_since(t0), 30.0);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.ranks[0].signal, SIGKILL);
  EXPECT_NE(cap.all_messages().find("sending SIGKILL"), std::string::npos) << cap.all_messages();
}

TEST_F(LaunchTest, CrashIsReportedWithTheSignal) {
  for (const auto& [name, sig] : std::vector<std::pair<std::string, int>>{{"SEGV", SIGSEGV}, {"ABRT", SIGABRT}}) {
    SCOPED_TRACE(name);
    LaunchSpec spec = helper_job(2, {"@0:sleep:60", "@1:signal:" + name});
    Captured cap;
    cap.attach(spec);
    const LaunchResult result = launch(spec);
    EXPECT_EQ(result.exit_code, 128 + sig);
    EXPECT_EQ(result.first_failed_rank, 1);
    EXPECT_EQ(result.ranks[1].signal, sig);
    EXPECT_EQ(result.ranks[0].signal, SIGTERM);
    const std::string expected = "was killed by signal " + std::to_string(sig) + " (SIG" + name + ")";
    EXPECT_NE(result.summary.find(expected), std::string::npos) << result.summary;
  }
}

TEST_F(LaunchTest, TimeoutStopsTheJobAndNamesTheRanksStillRunning) {
  LaunchSpec spec = helper_job(3, {"@1:sleep:60", "@2:sleep:60"});
  spec.timeout_s = 1.0;
  Captured cap;
  cap.attach(spec);
  const auto t0 = Clock::now();
  const LaunchResult result = launch(spec);
  EXPECT_LT(seconds_since(t0), 30.0);
  EXPECT_EQ(result.exit_code, 124);
  EXPECT_TRUE(result.timed_out);
  EXPECT_FALSE(result.ranks[0].timed_out);
  EXPECT_TRUE(result.ranks[1].timed_out);
  EXPECT_TRUE(result.ranks[2].timed_out);
  EXPECT_EQ(result.ranks[1].signal, SIGTERM);
  EXPECT_EQ(result.first_failed_rank, -1);
  const std::string expected = "ranks still running: 1 (pid " + std::to_string(result.ranks[1].pid) + "), 2 (pid " +
                               std::to_string(result.ranks[2].pid) + ")";
  EXPECT_NE(result.summary.find(expected), std::string::npos) << result.summary;
  EXPECT_NE(result.summary.find("timed out after 1 s"), std::string::npos) << result.summary;
}

TEST_F(LaunchTest, SigintToTheLauncherIsForwardedToTheRanks) {
  if (sigint_is_ignored()) GTEST_SKIP() << "SIGINT is ignored in this process (started in the background?)";
  LaunchSpec spec = helper_job(2, {"print:ready", "sleep:60"});
  bool sent = false;
  std::vector<std::string> messages;
  // Sent from inside the job (the first line arrives while launch() runs), so the handler is in place.
  spec.on_line = [&sent](int, bool, const std::string& line) {
    if (line == "ready" && !sent) {
      sent = true;
      ::kill(::getpid(), SIGINT);
    }
  };
  spec.on_message = [&messages](const std::string& m) { messages.push_back(m); };
  const auto t0 = Clock::now();
  const LaunchResult result = launch(spec);
  EXPECT_LT(seconds_since(t0), 30.0);
  ASSERT_TRUE(sent);
  EXPECT_EQ(result.interrupted_by, SIGINT);
  EXPECT_EQ(result.exit_code, 128 + SIGINT);
  for (const auto& r : result.ranks) EXPECT_EQ(r.signal, SIGINT) << "rank " << r.rank;
  ASSERT_FALSE(messages.empty());
  EXPECT_NE(messages[0].find("received SIGINT"), std::string::npos) << messages[0];
}

TEST_F(LaunchTest, SecondSigintKillsWithoutWaitingForTheGracePeriod) {
  if (sigint_is_ignored()) GTEST_SKIP() << "SIGINT is ignored in this process (started in the background?)";
  LaunchSpec spec = helper_job(1, {"ignore-int", "print:ready", "sleep:60"});
  spec.grace_s = 50;
  spec.on_line = [](int, bool, const std::string& line) {
    if (line == "ready") {
      ::kill(::getpid(), SIGINT);
      ::kill(::getpid(), SIGINT);
    }
  };
  std::vector<std::string> messages;
  spec.on_message = [&messages](const std::string& m) { messages.push_back(m); };
  const auto t0 = Clock::now();
  const LaunchResult result = launch(spec);
  EXPECT_LT(seconds_since(t0), 30.0);
  EXPECT_EQ(result.exit_code, 128 + SIGINT);
  EXPECT_EQ(result.ranks[0].signal, SIGKILL);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_NE(messages[1].find("received SIGINT again; killing the ranks"), std::string::npos) << messages[1];
}

TEST_F(LaunchTest, FreePortsAreUsableAndNotAlwaysTheSame) {
  std::set<int> ports;
  for (int i = 0; i < 8; ++i) {
    const int port = find_free_port("127.0.0.1");
    ASSERT_GT(port, 0);
    ASSERT_LT(port, 65536);
    ports.insert(port);
    // Usable: a listener can take it right away.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << "port " << port;
    EXPECT_EQ(::listen(fd, 1), 0);
    ::close(fd);
  }
  // Two jobs at once must not be handed one fixed port.
  EXPECT_GE(ports.size(), 2u);
  EXPECT_THROW(find_free_port("no-such-host.invalid"), ConfigError);
}

TEST_F(LaunchTest, NoOrphansAfterSuccess) {
  const std::string pid_file = path("grandchild.pid");
  LaunchSpec spec = helper_job(2, {"@0:grandchild:" + pid_file, "exit:0"});
  Captured cap;
  cap.attach(spec);
  const auto t0 = Clock::now();
  const LaunchResult result = launch(spec);
  EXPECT_LT(seconds_since(t0), 30.0) << "waited for the grandchild's pipe instead of killing it";
  EXPECT_EQ(result.exit_code, 0);
  const pid_t grandchild = std::stoi(read_file(pid_file));
  EXPECT_TRUE(eventually_gone(grandchild)) << "grandchild " << grandchild << " survived the job";
}

TEST_F(LaunchTest, NoOrphansAfterFailure) {
  const std::string pid_file = path("grandchild.pid");
  LaunchSpec spec = helper_job(2, {"@0:grandchild:" + pid_file, "@0:sleep:60",  //
                                   "@1:wait-file:" + pid_file, "@1:exit:2"});
  Captured cap;
  cap.attach(spec);
  const LaunchResult result = launch(spec);
  EXPECT_EQ(result.exit_code, 2);
  const pid_t grandchild = std::stoi(read_file(pid_file));
  EXPECT_TRUE(eventually_gone(grandchild)) << "grandchild " << grandchild << " survived the job";
}

TEST_F(LaunchTest, AnExceptionInACallbackStillStopsEveryProcess) {
  const std::string pid_file = path("grandchild.pid");
  LaunchSpec spec = helper_job(2, {"@0:grandchild:" + pid_file, "print:ready", "sleep:60"});
  spec.on_line = [](int rank, bool, const std::string& line) {
    if (rank == 0 && line == "ready") throw std::runtime_error("the caller gave up");
  };
  struct sigaction before {};
  ::sigaction(SIGINT, nullptr, &before);
  const auto t0 = Clock::now();
  EXPECT_THROW(launch(spec), std::runtime_error);
  EXPECT_LT(seconds_since(t0), 30.0);
  const pid_t grandchild = std::stoi(read_file(pid_file));
  EXPECT_TRUE(eventually_gone(grandchild)) << "grandchild " << grandchild << " survived the job";
  // The signal handlers are back to what they were.
  struct sigaction after {};
  ::sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST_F(LaunchTest, TwoJobsCanRunAtOnce) {
  // The grader may run several jobs from threads: each gets its own port and its own ranks' lines.
  Captured cap[2];
  LaunchResult results[2];
  std::vector<std::thread> threads;
  for (int j = 0; j < 2; ++j) {
    threads.emplace_back([&, j] {
      LaunchSpec spec = helper_job(2, {"env", "sleep:0.3"});
      cap[j].attach(spec);
      results[j] = launch(spec);
    });
  }
  for (auto& t : threads) t.join();
  for (int j = 0; j < 2; ++j) {
    SCOPED_TRACE("job " + std::to_string(j));
    EXPECT_EQ(results[j].exit_code, 0) << results[j].summary;
    for (int r = 0; r < 2; ++r) EXPECT_EQ(cap[j].env(r, "MASTER_PORT"), std::to_string(results[j].master_port));
  }
  EXPECT_NE(results[0].master_port, results[1].master_port);
}

/// Runs f and returns the ConfigError's message, or "" if nothing was thrown.
template <typename F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_F(LaunchTest, BadSpecsAreConfigErrorsNamingTheProblem) {
  LaunchSpec missing = helper_job(2, {});
  missing.command = {"ddplab-no-such-program-xyz", "--flag"};
  EXPECT_NE(config_error_of([&] { launch(missing); }).find("ddplab-no-such-program-xyz"), std::string::npos);

  missing.command = {path("absent/program")};
  EXPECT_NE(config_error_of([&] { launch(missing); }).find(path("absent/program")), std::string::npos);

  const std::string not_exec = path("data.txt");
  std::ofstream(not_exec) << "not a program\n";
  missing.command = {not_exec};
  EXPECT_NE(config_error_of([&] { launch(missing); }).find("not an executable"), std::string::npos);

  LaunchSpec s = helper_job(0, {"exit:0"});
  EXPECT_NE(config_error_of([&] { launch(s); }).find("nproc 0"), std::string::npos);
  s = helper_job(1, {"exit:0"});
  s.nnodes = 2;
  s.node_rank = 2;
  s.master_port = 29500;
  EXPECT_NE(config_error_of([&] { launch(s); }).find("node rank 2"), std::string::npos);
  s.node_rank = 0;
  s.master_port = 0;  // auto port with two nodes: the other node could not know it
  EXPECT_NE(config_error_of([&] { launch(s); }).find("single node"), std::string::npos);
  s = helper_job(1, {});
  s.command.clear();
  EXPECT_NE(config_error_of([&] { launch(s); }).find("no program"), std::string::npos);
  s = helper_job(1, {"exit:0"});
  s.timeout_s = -1;
  EXPECT_NE(config_error_of([&] { launch(s); }).find("timeout"), std::string::npos);
}

// --backend mpi: Open MPI's mpirun starts the ranks (one app context each), and the launcher keeps
// its contract: the kit's variables per rank, lines routed to their rank, the first failure named
// with its status, a timeout that leaves nothing running.
#ifdef DDPLAB_HAVE_MPI
TEST_F(LaunchTest, ThroughMpirunEachRankGetsTheKitsVariablesAndOpenMpisAndItsOwnLines) {
  ASSERT_EQ(mpi_launch_problem(helper_job(2, {})), "") << "this build has Open MPI: mpirun must be on PATH";
  LaunchSpec spec = helper_job(3, {"env", "@1:eprint:one on stderr", "cpus"});
  spec.backend = LaunchBackend::kMpi;
  spec.extra_env["DDPLAB_TEST_EXTRA"] = "yes";
  spec.log_dir = path("logs");
  Captured cap;
  cap.attach(spec);
  const LaunchResult result = launch(spec);
  ASSERT_EQ(result.exit_code, 0) << result.summary << cap.all_messages();
  EXPECT_EQ(result.backend, "mpi");
  ASSERT_EQ(result.ranks.size(), 3u);
  const std::string run_id = cap.env(0, "TORCHELASTIC_RUN_ID");
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(result.ranks[static_cast<size_t>(r)].rank, r);
    EXPECT_EQ(result.ranks[static_cast<size_t>(r)].exit_code, 0);
    EXPECT_EQ(cap.env(r, "RANK"), std::to_string(r));
    EXPECT_EQ(cap.env(r, "LOCAL_RANK"), std::to_string(r));
    EXPECT_EQ(cap.env(r, "ROLE_RANK"), std::to_string(r));
    EXPECT_EQ(cap.env(r, "WORLD_SIZE"), "3");
    EXPECT_EQ(cap.env(r, "OMPI_COMM_WORLD_RANK"), std::to_string(r)) << "the kit's rank is Open MPI's";
    EXPECT_EQ(cap.env(r, "OMPI_COMM_WORLD_SIZE"), "3");
    EXPECT_EQ(cap.env(r, "DDPLAB_BACKEND"), "mpi");
    EXPECT_EQ(cap.env(r, "MASTER_PORT"), std::to_string(result.master_port));
    EXPECT_EQ(cap.env(r, "TORCHELASTIC_RUN_ID"), run_id);
    EXPECT_EQ(cap.env(r, "DDPLAB_TEST_EXTRA"), "yes");
    const std::string log = read_file(path(fmt::format("logs/rank{}.log", r)));
    EXPECT_NE(log.find("RANK=" + std::to_string(r) + "\n"), std::string::npos) << log;
  }
  EXPECT_EQ(cap.err[1], std::vector<std::string>{"one on stderr"});
  EXPECT_TRUE(cap.err[0].empty() && cap.err[2].empty());

  // A line written in pieces reaches mpirun as pieces, each tagged: one line again, no tags inside.
  LaunchSpec pieces = helper_job(2, {"@1:partial:first piece, ", "@1:sleep:0.3", "@1:print:second piece"});
  pieces.backend = LaunchBackend::kMpi;
  Captured cap2;
  cap2.attach(pieces);
  ASSERT_EQ(launch(pieces).exit_code, 0);
  EXPECT_EQ(cap2.out[1], std::vector<std::string>{"first piece, second piece"});
}

TEST_F(LaunchTest, ThroughMpirunBoundRanksGetTheLaunchersCores) {
  const auto allowed = allowed_cpus();
  if (allowed.size() < 2) GTEST_FAIL() << "needs 2 cores to bind 2 ranks; this process may use " << allowed.size();
  LaunchSpec spec = helper_job(2, {"cpus"});
  spec.backend = LaunchBackend::kMpi;
  spec.bind = CpuBind::kCores;
  Captured cap;
  cap.attach(spec);
  ASSERT_EQ(launch(spec).exit_code, 0);
  const auto plan = plan_cpu_binding(CpuBind::kCores, 2, allowed);
  for (int r = 0; r < 2; ++r) {
    const auto& mine = plan[static_cast<size_t>(r)];
    ASSERT_EQ(cap.out[r].size(), 1u);
    // The helper prints its affinity as a comma list, then DDPLAB_CPUS as the launcher wrote it.
    EXPECT_EQ(cap.out[r][0], fmt::format("CPUS={} ENV={}", fmt::join(mine, ","), cpu_list(mine)));
  }
}

TEST_F(LaunchTest, ThroughMpirunTheFirstFailingRankIsNamedWithItsStatus) {
  LaunchSpec spec = helper_job(2, {"@0:sleep:60", "@1:exit:5"});
  spec.backend = LaunchBackend::kMpi;
  Captured cap;
  cap.attach(spec);
  const auto t0 = Clock::now();
  const LaunchResult result = launch(spec);
  EXPECT_LT(seconds_since(t0), 30.0) << "rank 0 was not stopped";
  EXPECT_EQ(result.exit_code, 5);
  EXPECT_EQ(result.first_failed_rank, 1);
  EXPECT_EQ(result.ranks[1].exit_code, 5);
  EXPECT_TRUE(result.ranks[0].stopped);
  EXPECT_EQ(result.ranks[0].signal, SIGTERM);
  EXPECT_NE(result.summary.find("rank 1 (pid "), std::string::npos) << result.summary;
  EXPECT_NE(result.summary.find("exited with status 5; stopping the other ranks"), std::string::npos) << result.summary;

  LaunchSpec crash = helper_job(2, {"@0:sleep:60", "@1:signal:SEGV"});
  crash.backend = LaunchBackend::kMpi;
  Captured cap2;
  cap2.attach(crash);
  const LaunchResult crashed = launch(crash);
  EXPECT_EQ(crashed.first_failed_rank, 1);
  EXPECT_EQ(crashed.ranks[1].signal, SIGSEGV);
  EXPECT_NE(crashed.summary.find("was killed by signal 11 (SIGSEGV)"), std::string::npos) << crashed.summary;
}

TEST_F(LaunchTest, ThroughMpirunNotAttemptedIsNoFailureTheOtherRanksFinish) {
  const std::string done = path("rank1.done");
  LaunchSpec spec = helper_job(2, {"@0:exit:3", "@1:sleep:1", "@1:touch:" + done});
  spec.backend = LaunchBackend::kMpi;
  Captured cap;
  cap.attach(spec);
  const LaunchResult result = launch(spec);
  EXPECT_EQ(result.exit_code, kExitNotAttempted) << result.summary;
  EXPECT_EQ(result.first_failed_rank, -1);
  EXPECT_EQ(result.ranks[0].exit_code, kExitNotAttempted);
  EXPECT_EQ(result.ranks[1].exit_code, 0);
  EXPECT_FALSE(result.ranks[1].stopped);
  EXPECT_TRUE(fs::exists(done)) << "rank 1 was stopped instead of finishing";
  EXPECT_NE(result.summary.find("the others finished"), std::string::npos) << result.summary;
}

TEST_F(LaunchTest, ThroughMpirunATimeoutLeavesNothingRunning) {
  const std::string pid_file = path("grandchild.pid");
  LaunchSpec spec = helper_job(2, {"@1:grandchild:" + pid_file, "ignore-term", "sleep:60"});
  spec.backend = LaunchBackend::kMpi;
  spec.timeout_s = 2;
  spec.grace_s = 1;
  Captured cap;
  cap.attach(spec);
  const auto t0 = Clock::now();
  const LaunchResult result = launch(spec);
  EXPECT_LT(seconds_since(t0), 30.0);
  EXPECT_EQ(result.exit_code, 124);
  EXPECT_TRUE(result.timed_out);
  EXPECT_NE(result.summary.find("all 2 under mpirun"), std::string::npos) << result.summary;
  const pid_t grandchild = std::stoi(read_file(pid_file));
  EXPECT_TRUE(eventually_gone(grandchild)) << "rank 1's child " << grandchild << " survived the job";
}

TEST_F(LaunchTest, AutoTakesMpirunForSeveralRanksOfOneNodeOnly) {
  LaunchSpec two = helper_job(2, {"env"});
  two.backend = LaunchBackend::kAuto;
  Captured cap;
  cap.attach(two);
  const LaunchResult r2 = launch(two);
  ASSERT_EQ(r2.exit_code, 0) << r2.summary;
  EXPECT_EQ(r2.backend, "mpi");
  EXPECT_EQ(cap.env(1, "DDPLAB_BACKEND"), "mpi");

  LaunchSpec one = helper_job(1, {"env"});
  one.backend = LaunchBackend::kAuto;
  Captured cap1;
  cap1.attach(one);
  const LaunchResult r1 = launch(one);
  EXPECT_EQ(r1.backend, "c10d") << "one rank has no collectives to speed up: no mpirun to start";
  EXPECT_EQ(cap1.env(0, "DDPLAB_BACKEND"), "<unset>");
}
#endif

TEST_F(LaunchTest, MpiBackendRefusesWhatItCannotStartNamingWhy) {
  LaunchSpec nodes = helper_job(2, {"env"});
  nodes.backend = LaunchBackend::kMpi;
  nodes.nnodes = 2;
  nodes.master_port = 29555;
  try {
    (void)launch(nodes);
    ADD_FAILURE() << "a 2-node job through mpirun was started";
  } catch (const ConfigError& e) {
#ifdef DDPLAB_HAVE_MPI
    EXPECT_NE(std::string(e.what()).find("it starts the ranks of one machine (2 nodes asked)"), std::string::npos)
        << e.what();
#else
    EXPECT_NE(std::string(e.what()).find("this build of the kit has no Open MPI"), std::string::npos) << e.what();
#endif
  }
  LaunchSpec no_path = helper_job(2, {"env"});
  no_path.backend = LaunchBackend::kMpi;
  no_path.extra_env["PATH"] = path("empty");
  EXPECT_NE(mpi_launch_problem(no_path), "");
  EXPECT_THROW((void)launch(no_path), ConfigError);
  EXPECT_EQ(parse_launch_backend("auto"), LaunchBackend::kAuto);
  EXPECT_THROW((void)parse_launch_backend("gloo", "--backend"), ConfigError);
}

TEST(LaunchSignalName, NamesCommonSignals) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(63), "signal 63");
}

}  // namespace
}  // namespace ddplab

// The sandbox student programs run in: a confined shell tries to read what it must not (a
// solutions/ folder, a calibration file, another submission, the grader's outputs), to write
// outside its run folder and to see the grader's processes, and fails at each; it can read the
// data set and write its run folder. Skipped (saying why) where bubblewrap cannot run; the kit's
// set-up installs it (tools/setup-debian.sh), and the grade.planted.lab01_baseline.reads_solutions
// self-test grades a submission that reads the solutions through the build folder.
#include "ddplab/grader/sandbox.h"

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "ddplab/error.h"

namespace fs = std::filesystem;
using namespace ddplab::grader;

namespace {

class Sandboxed : public ::testing::Test {
 protected:
  void SetUp() override {
    problem_ = bwrap_problem();
    if (!problem_.empty()) GTEST_SKIP() << "bubblewrap cannot run here: " << problem_;
    root_ = fs::temp_directory_path() / ("ddplab_sandbox_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    for (const char* d : {"kit/solutions/lab09", "build/grader", "data", "out/lab09/runs/r", "batch/bob"}) {
      fs::create_directories(root_ / d);
    }
    std::ofstream(root_ / "kit/solutions/lab09/lab09_student.cpp") << "the reference solution\n";
    std::ofstream(root_ / "build/grader/calibration.json") << "{}\n";
    std::ofstream(root_ / "batch/bob/lab09_student.cpp") << "bob's code\n";
    std::ofstream(root_ / "out/lab09/results.json") << "{}\n";
    std::ofstream(root_ / "data/meta.json") << "{\"train\": 1}\n";
    sandbox_ = make_sandbox(SandboxMode::kBwrap, {(root_ / "data").string()});
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  /// Runs `script` with /bin/sh in the sandbox, run folder out/lab09/runs/r; returns its exit
  /// status and its output in `out`.
  int sh(const std::string& script, std::string* out = nullptr, ddplab::LaunchResult* result = nullptr) {
    ddplab::LaunchSpec spec;
    spec.nproc = 1;
    spec.command = {"/bin/sh", "-c", script};
    spec.timeout_s = 30;
    spec.prefix_output = false;
    std::string text;
    spec.on_line = [&](int, bool, const std::string& l) { text += l + "\n"; };
    spec.on_message = [&](const std::string&) {};
    confine(sandbox_, spec, (root_ / "out/lab09/runs/r").string());
    auto r = ddplab::launch(spec);
    restore_signals(sandbox_, r);
    if (out) *out = text;
    if (result) *result = r;
    return r.exit_code;
  }
  std::string at(const char* rel) const { return (root_ / rel).string(); }

  std::string problem_;
  fs::path root_;
  Sandbox sandbox_;
};

TEST_F(Sandboxed, ReadsTheDataAndWritesItsRunFolder) {
  ASSERT_TRUE(sandbox_.enabled);
  std::string out;
  EXPECT_EQ(sh("cat " + at("data/meta.json") + " && echo ok > rank0.json && echo t > \"$TMPDIR/x\" && pwd", &out), 0)
      << out;
  EXPECT_NE(out.find("\"train\": 1"), std::string::npos) << out;
  EXPECT_NE(out.find(at("out/lab09/runs/r")), std::string::npos) << "its working directory is the run folder: " << out;
  EXPECT_TRUE(fs::exists(root_ / "out/lab09/runs/r/rank0.json"));
}

TEST_F(Sandboxed, CannotReadSolutionsCalibrationOtherSubmissionsOrOutputs) {
  for (const char* secret : {"kit/solutions/lab09/lab09_student.cpp", "build/grader/calibration.json",
                             "batch/bob/lab09_student.cpp", "out/lab09/results.json"}) {
    std::string out;
    EXPECT_NE(sh("cat " + at(secret), &out), 0) << secret << " is readable: " << out;
    EXPECT_EQ(out.find("the reference solution"), std::string::npos);
    EXPECT_EQ(out.find("bob's code"), std::string::npos);
  }
  std::string out;
  EXPECT_NE(sh("ls " + at("kit"), &out), 0) << "the kit's folder exists in the sandbox: " << out;
  EXPECT_NE(sh("ls /root /home/* /work 2>/dev/null | grep -q . ", &out), 0) << out;
}

TEST_F(Sandboxed, CannotWriteOutsideItsRunFolder) {
  std::string out;
  EXPECT_NE(sh("echo x > " + at("out/lab09/forged.json"), &out), 0) << out;
  EXPECT_NE(sh("echo x > " + at("data/meta.json"), &out), 0) << out;
  EXPECT_NE(sh("echo x > /usr/ddplab_sandbox_test", &out), 0) << out;
  EXPECT_FALSE(fs::exists(root_ / "out/lab09/forged.json"));
  std::ifstream meta(root_ / "data/meta.json");
  std::string line;
  std::getline(meta, line);
  EXPECT_EQ(line, "{\"train\": 1}");
  // Nor /tmp: its TMPDIR is in the run folder.
  EXPECT_NE(sh("echo x > /tmp/ddplab_sandbox_test_tmp", &out), 0) << out;
  EXPECT_FALSE(fs::exists("/tmp/ddplab_sandbox_test_tmp"));
}

TEST_F(Sandboxed, SeesNoProcessOfTheGrader) {
  std::string out;
  // In its own PID namespace: the grader's pid (and /proc/<pid>/root, a way out) does not exist.
  EXPECT_NE(sh("test -e /proc/" + std::to_string(::getpid()) + "/root", &out), 0) << out;
  EXPECT_EQ(sh("ls /proc | grep -c '^[0-9]'", &out), 0);
  EXPECT_LE(std::stoi(out), 4) << out;
}

TEST_F(Sandboxed, ACrashReadsAsASignalAsItWouldUnconfined) {
  ddplab::LaunchResult r;
  sh("kill -SEGV $$", nullptr, &r);
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].signal, SIGSEGV);
  EXPECT_NE(r.summary.find("was killed by signal 11 (SIGSEGV)"), std::string::npos) << r.summary;
  EXPECT_EQ(sh("exit 3"), 3);  // the kit's "not attempted" passes through
}

TEST(Sandbox, AskedForAndUnavailableItStopsTheGrader) {
  try {
    make_sandbox(SandboxMode::kBwrap, {}, "/nonexistent/bwrap");
    FAIL() << "no error";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sandbox bwrap: bubblewrap cannot confine programs here"), std::string::npos)
        << e.what();
  }
  const Sandbox s = make_sandbox(SandboxMode::kAuto, {}, "/nonexistent/bwrap");
  EXPECT_FALSE(s.enabled);
  EXPECT_NE(s.note.find("WARNING: no sandbox"), std::string::npos) << s.note;
  EXPECT_FALSE(make_sandbox(SandboxMode::kNone, {}).enabled);
  EXPECT_THROW(parse_sandbox_mode("chroot"), ddplab::ConfigError);
}

}  // namespace

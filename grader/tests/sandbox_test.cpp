// The sandbox student programs run in: a confined shell tries to read what it must not (a
// solutions/ folder, a calibration file, another submission, the grader's outputs), to write
// outside its run folder and to see the grader's processes, and fails at each; it can read the
// data set and write its run folder. Skipped (saying why) where bubblewrap cannot run; the kit's
// set-up installs it (tools/setup-debian.sh), and the grade.planted.lab01_baseline.reads_solutions
// self-test grades a submission that reads the solutions through the build folder.
#include "ddplab/grader/sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ddplab/config.h"
#include "ddplab/error.h"
#include "../src/harness_parts.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace ddplab::grader;

constexpr const char* kRunAs = DDPLAB_TEST_RUN_AS;  // the build's ddplab-run-as

namespace {

/// A grading's file system in miniature under /tmp: the kit's solutions/, a calibration file,
/// another submission, the grader's outputs with a run folder, and the data set; `sandbox_` is
/// set by the fixtures below.
class SandboxTree : public ::testing::Test {
 protected:
  void make_tree(const std::string& name) {
    scratch_.emplace(name);
    root_ = scratch_->dir();
    for (const char* d : {"kit/solutions/lab09", "build/grader", "data", "out/lab09/runs/r", "batch/bob"}) {
      fs::create_directories(root_ / d);
    }
    ::chmod(root_.c_str(), 0755);
    std::ofstream(root_ / "kit/solutions/lab09/lab09_student.cpp") << "the reference solution\n";
    std::ofstream(root_ / "build/grader/calibration.json") << "{}\n";
    std::ofstream(root_ / "batch/bob/lab09_student.cpp") << "bob's code\n";
    std::ofstream(root_ / "out/lab09/results.json") << "{}\n";
    std::ofstream(root_ / "data/meta.json") << "{\"train\": 1}\n";
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

  /// It reads the data and writes its run folder, its working directory.
  void expect_reads_data_and_writes_run_folder(const std::string& first_line = "") {
    ASSERT_TRUE(sandbox_.enabled);
    std::string out;
    EXPECT_EQ(sh("id -u && cat " + at("data/meta.json") + " && echo ok > rank0.json && echo t > \"$TMPDIR/x\" && pwd",
                 &out),
              0)
        << out;
    if (!first_line.empty()) EXPECT_EQ(out.rfind(first_line + "\n", 0), 0u) << out;
    EXPECT_NE(out.find("\"train\": 1"), std::string::npos) << out;
    EXPECT_NE(out.find(at("out/lab09/runs/r")), std::string::npos)
        << "its working directory is the run folder: " << out;
    EXPECT_TRUE(fs::exists(root_ / "out/lab09/runs/r/rank0.json"));
  }
  /// It reads none of the secrets.
  void expect_secrets_unreadable() {
    for (const char* secret : {"kit/solutions/lab09/lab09_student.cpp", "build/grader/calibration.json",
                               "batch/bob/lab09_student.cpp", "out/lab09/results.json"}) {
      std::string out;
      EXPECT_NE(sh("cat " + at(secret), &out), 0) << secret << " is readable: " << out;
      EXPECT_EQ(out.find("the reference solution"), std::string::npos);
      EXPECT_EQ(out.find("bob's code"), std::string::npos);
    }
  }
  /// It writes neither the grader's files, nor the data, nor the system. (Under bubblewrap a write
  /// beside the run folder may succeed when the tree lies in /tmp, as here: it lands in the
  /// sandbox's private /tmp, never in the grader's folder.)
  void expect_no_write_outside() {
    std::string out;
    sh("echo x > " + at("out/lab09/forged.json"), &out);
    EXPECT_NE(sh("echo x > " + at("data/meta.json"), &out), 0) << out;
    EXPECT_NE(sh("echo x > /usr/ddplab_sandbox_test", &out), 0) << out;
    EXPECT_FALSE(fs::exists(root_ / "out/lab09/forged.json"));
    std::ifstream meta(root_ / "data/meta.json");
    std::string line;
    std::getline(meta, line);
    EXPECT_EQ(line, "{\"train\": 1}");
  }

  std::optional<ddplab::testing::ScratchDir> scratch_;
  fs::path root_;
  Sandbox sandbox_;
};

class Sandboxed : public SandboxTree {
 protected:
  void SetUp() override {
    problem_ = bwrap_problem();
    if (!problem_.empty()) GTEST_SKIP() << "bubblewrap cannot run here: " << problem_;
    make_tree("ddplab_sandbox_test");
    sandbox_ = make_sandbox(SandboxMode::kBwrap, {(root_ / "data").string()});
  }
  std::string problem_;
};

TEST_F(Sandboxed, ReadsTheDataAndWritesItsRunFolder) { expect_reads_data_and_writes_run_folder(); }

TEST_F(Sandboxed, CannotReadSolutionsCalibrationOtherSubmissionsOrOutputs) {
  expect_secrets_unreadable();
  std::string out;
  EXPECT_NE(sh("ls " + at("kit"), &out), 0) << "the kit's folder exists in the sandbox: " << out;
  EXPECT_NE(sh("ls /root /home/* /work 2>/dev/null | grep -q . ", &out), 0) << out;
}

TEST_F(Sandboxed, CannotWriteOutsideItsRunFolder) {
  expect_no_write_outside();
  // Nor the host's /tmp: its /tmp is a tmpfs of its own, gone with it.
  std::string out;
  EXPECT_EQ(sh("echo x > /tmp/ddplab_sandbox_test_tmp", &out), 0) << out;
  EXPECT_FALSE(fs::exists("/tmp/ddplab_sandbox_test_tmp"));
}

TEST_F(Sandboxed, SeesNeitherTheHostsTmpNorItsSharedMemory) {
  std::ofstream("/tmp/ddplab_sandbox_test_host_tmp") << "the host's\n";
  const bool shm = static_cast<bool>(std::ofstream("/dev/shm/ddplab_sandbox_test_host_shm") << "the host's\n");
  std::string out;
  EXPECT_NE(sh("cat /tmp/ddplab_sandbox_test_host_tmp", &out), 0) << "the host's /tmp is visible: " << out;
  if (shm) EXPECT_NE(sh("cat /dev/shm/ddplab_sandbox_test_host_shm", &out), 0) << "the host's /dev/shm: " << out;
  fs::remove("/tmp/ddplab_sandbox_test_host_tmp");
  std::error_code ec;
  fs::remove("/dev/shm/ddplab_sandbox_test_host_shm", ec);
}

TEST_F(Sandboxed, ItsTmpdirIsAnotherFileSystemThanItsRunFolder) {
  // A checkpoint written in $TMPDIR and renamed into the run folder fails (EXDEV) as it would on a
  // machine whose /tmp is a tmpfs or another disk: the sandbox must not make that mistake pass.
  std::string out;
  EXPECT_EQ(sh("echo t > \"$TMPDIR/ckpt\" && stat -c %d \"$TMPDIR\" . | uniq | wc -l", &out), 0) << out;
  EXPECT_EQ(out, "2\n") << "TMPDIR and the run folder share a file system";
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
    make_sandbox(SandboxMode::kBwrap, {}, {}, "/nonexistent/bwrap");
    FAIL() << "no error";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sandbox bwrap: bubblewrap cannot confine programs here"), std::string::npos)
        << e.what();
  }
  const Sandbox s = make_sandbox(SandboxMode::kAuto, {}, {}, "/nonexistent/bwrap");
  EXPECT_FALSE(s.enabled);
  EXPECT_NE(s.note.find("WARNING: no sandbox"), std::string::npos) << s.note;
  EXPECT_FALSE(make_sandbox(SandboxMode::kNone, {}).enabled);
  EXPECT_THROW(parse_sandbox_mode("chroot"), ddplab::ConfigError);
}

}  // namespace

namespace {

// The unprivileged-user sandbox (where bubblewrap cannot run: a default Docker container, such as
// Gradescope's): the same secrets, kept out by the file system's permissions, which the
// instructor's set-up sets (tools/gradescope/setup.sh) and the grader checks. Needs root (it
// switches uids); skipped, saying so, otherwise.
class UserSandboxed : public SandboxTree {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "the unprivileged-user sandbox needs root (this runs as uid " << ::geteuid() << ")";
    }
    make_tree("ddplab_user_sandbox_test");
    // What set-up and the grader do: secrets root's alone, the grader's files private.
    ::chmod(at("kit/solutions").c_str(), 0700);
    ::chmod(at("build/grader/calibration.json").c_str(), 0600);
    ::chmod(at("batch").c_str(), 0700);
    ::chmod(at("out/lab09").c_str(), 0711);
    ::chmod(at("out/lab09/results.json").c_str(), 0600);
    paths_.secrets = {at("kit/solutions"), at("build/grader/calibration.json"), at("batch")};
    paths_.readable = {at("data")};
    paths_.out_dir = at("out");
    sandbox_ = make_sandbox(SandboxMode::kUser, {at("data")}, paths_, "bwrap", kRunAs);
  }
  UserSandboxPaths paths_;
};

TEST_F(UserSandboxed, RunsAsNobodyReadingTheDataAndWritingItsRunFolder) {
  ASSERT_TRUE(sandbox_.as_user);
  expect_reads_data_and_writes_run_folder(std::to_string(kRunUid));
  struct stat st {};
  ASSERT_EQ(::stat(at("out/lab09/runs/r/rank0.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kRunUid);
}

TEST_F(UserSandboxed, CannotReadSolutionsCalibrationOtherSubmissionsOrOutputs) {
  expect_secrets_unreadable();
  std::string out;
  EXPECT_NE(sh("ls " + at("kit/solutions"), &out), 0) << out;
  EXPECT_NE(sh("ls " + at("out"), &out), 0) << "the grader's output folder is listable: " << out;
  EXPECT_NE(sh("ls /root", &out), 0) << out;
}

TEST_F(UserSandboxed, CannotWriteTheGradersFilesTheDataOrTheSystem) {
  expect_no_write_outside();
  // No capabilities, and no way back to root (no_new_privs: a setuid-root program gains nothing).
  EXPECT_EQ(sh("grep -q '^CapEff:[[:space:]]*0000000000000000$' /proc/self/status"), 0);
  EXPECT_EQ(sh("grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status"), 0);
}

TEST_F(UserSandboxed, NamesEverySecretThatUidCouldReadAndRefuses) {
  ::chmod(at("kit/solutions").c_str(), 0755);
  ::chmod(at("build/grader/calibration.json").c_str(), 0644);
  const std::string why = user_problem(paths_, kRunAs);
  EXPECT_NE(why.find("uid 65534 can read " + at("kit/solutions") + " (as root: chmod -R go-rwx"), std::string::npos)
      << why;
  EXPECT_NE(why.find("can read " + at("build/grader/calibration.json")), std::string::npos) << why;
  EXPECT_EQ(why.find(at("batch")), std::string::npos) << why;
  try {
    make_sandbox(SandboxMode::kUser, {}, paths_, "bwrap", kRunAs);
    FAIL() << "no error";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sandbox user: an unprivileged user cannot confine programs here"),
              std::string::npos)
        << e.what();
  }
  // Where nothing can confine programs, `required` refuses and `auto` warns.
  EXPECT_THROW(make_sandbox(SandboxMode::kRequired, {}, paths_, "/nonexistent/bwrap", kRunAs), ddplab::Error);
  const Sandbox s = make_sandbox(SandboxMode::kAuto, {}, paths_, "/nonexistent/bwrap", kRunAs);
  EXPECT_FALSE(s.enabled);
  EXPECT_NE(s.note.find("WARNING: no sandbox"), std::string::npos) << s.note;
  EXPECT_NE(s.note.find("can read " + at("kit/solutions")), std::string::npos) << s.note;
  // A data set it cannot read is named too.
  ::chmod(at("data").c_str(), 0700);
  EXPECT_NE(user_problem(paths_, kRunAs).find("uid 65534 cannot read " + at("data")), std::string::npos);
}

TEST_F(UserSandboxed, AutoPrefersBubblewrapAndFallsBackToTheUser) {
  const Sandbox fallback = make_sandbox(SandboxMode::kAuto, {}, paths_, "/nonexistent/bwrap", kRunAs);
  EXPECT_TRUE(fallback.enabled);
  EXPECT_TRUE(fallback.as_user);
  EXPECT_NE(fallback.note.find("run as uid 65534"), std::string::npos) << fallback.note;
  if (bwrap_problem().empty()) EXPECT_FALSE(make_sandbox(SandboxMode::kAuto, {}, paths_, "bwrap", kRunAs).as_user);
}

// The submission slot's compiler launcher: as DDPLAB_SANDBOX_COMPILE_UID, a compile that reads a
// root-only file fails; one that reads the kit's (readable) files writes its object as that uid.
TEST_F(UserSandboxed, TheSlotsCompilerRunsAsTheCompileUid) {
  const std::string launcher = std::string(DDPLAB_TEST_SOURCE_ROOT) + "/grader/compile-as-student";
  auto compile = [&](const std::string& input, const std::string& object, bool as_uid = true) {
    ddplab::LaunchSpec spec;
    spec.nproc = 1;
    // A stand-in compiler: copies its input to its -o file. Without the uid, as bubblewrap runs it:
    // root without capabilities.
    spec.command = {"env", fmt::format("DDPLAB_SANDBOX_COMPILE_UID={}", kCompileUid),
                    std::string("DDPLAB_SANDBOX_RUN_AS=") + kRunAs};
    if (!as_uid) {
      spec.command = {"setpriv", "--inh-caps=-all", "--bounding-set=-all", "env", "-u", "DDPLAB_SANDBOX_COMPILE_UID"};
    }
    const std::vector<std::string> cc = {launcher, "/bin/sh", "-c", "cat \"$1\" > \"$3\"", "cc", input, "-o", object};
    spec.command.insert(spec.command.end(), cc.begin(), cc.end());
    spec.timeout_s = 30;
    spec.prefix_output = false;
    spec.on_line = [](int, bool, const std::string&) {};
    spec.on_message = [](const std::string&) {};
    return ddplab::launch(spec).exit_code;
  };
  EXPECT_NE(compile(at("kit/solutions/lab09/lab09_student.cpp"), at("obj/a.o")), 0);
  EXPECT_NE(compile(at("build/grader/calibration.json"), at("obj/b.o")), 0);
  ASSERT_EQ(compile(at("data/meta.json"), at("obj/c.o")), 0);
  struct stat st {};
  ASSERT_EQ(::stat(at("obj/c.o").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kCompileUid);
  // A later build under bubblewrap replaces that uid's object.
  ASSERT_EQ(compile(at("data/meta.json"), at("obj/c.o"), false), 0);
  ASSERT_EQ(::stat(at("obj/c.o").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

TEST(UserSandbox, CommandRunsThroughTheKitsRunAs) {
  const std::vector<std::string> want = {"/b/ddplab-run-as", "65534", "--", "prog", "--flag"};
  EXPECT_EQ(user_command({"prog", "--flag"}, 65534, "/b/ddplab-run-as"), want);
}

// ddplab-run-as itself: as root, the program runs as the uid with no groups, no capabilities and
// no_new_privs; root is refused as a target, and a bad uid is a usage error. (What it adds to
// setpriv, dumpable during the execve so that proot can read the path, shows only under proot:
// tools/gradescope/test-on-ubuntu; after an exec the kernel makes any such process dumpable.)
TEST(UserSandbox, RunAsDropsEverythingButStaysDumpable) {
  if (::geteuid() != 0) GTEST_SKIP() << "ddplab-run-as needs root (this runs as uid " << ::geteuid() << ")";
  auto run = [](const std::vector<std::string>& command, std::string* out) {
    ddplab::LaunchSpec spec;
    spec.nproc = 1;
    spec.command = command;
    spec.timeout_s = 30;
    spec.prefix_output = false;
    std::string text;
    spec.on_line = [&](int, bool, const std::string& l) { text += l + "\n"; };
    spec.on_message = [](const std::string&) {};
    const int rc = ddplab::launch(spec).exit_code;
    *out = text;
    return rc;
  };
  std::string out;
  ASSERT_EQ(run({kRunAs, "65534", "--", "/bin/sh", "-c",
                 "id -u; id -g; id -G; grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status; "
                 "grep -E '^Uid:' /proc/self/status"},
                &out),
            0)
      << out;
  EXPECT_NE(out.find("65534\n65534\n65534\n"), std::string::npos) << "uid, gid and only that group: " << out;
  EXPECT_NE(out.find("CapPrm:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("CapEff:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
  EXPECT_NE(out.find("Uid:\t65534\t65534\t65534\t65534"), std::string::npos) << "real, effective, saved: " << out;
  EXPECT_EQ(run({kRunAs, "0", "--", "/bin/true"}, &out), 2) << out;
  EXPECT_NE(out.find("not root"), std::string::npos) << out;
  EXPECT_EQ(run({kRunAs, "65534", "/bin/true"}, &out), 2) << out;
  EXPECT_EQ(run({kRunAs, "65534", "--", "/nonexistent/prog"}, &out), 127) << out;
}

}  // namespace

namespace {

// A pip build's programs load torch and the nvidia-* libraries from the venv: the sandbox must let
// them read those folders (DDPLAB_LIBRARY_DIRS), or no confined program starts.
TEST(KitLibraries, AreTheConfiguredFoldersAndExist) {
  const auto dirs = ddplab::grader::kit_library_dirs();
  std::string joined;
  for (const auto& d : dirs) {
    joined += (joined.empty() ? "" : ";") + d;
    EXPECT_TRUE(std::filesystem::is_directory(d)) << d;
  }
  EXPECT_EQ(joined, std::string(DDPLAB_LIBRARY_DIRS));
#if DDPLAB_HAVE_CUDA_01
  EXPECT_TRUE(std::any_of(dirs.begin(), dirs.end(), [](const std::string& d) {
    return d.find("torch") != std::string::npos;
  })) << joined;
#endif
}

// A CUDA build's programs map ~2.7 GB of libraries and the CUDA runtime reserves tens of GB of
// address space: their memory limit is on private writable memory.
TEST(MemoryLimit, IsOnPrivateWritableMemoryInACudaBuildAndOnAddressSpaceElsewhere) {
  ddplab::LaunchSpec spec;
  ddplab::grader::apply_memory_limit(spec, 4096);
  EXPECT_EQ(spec.memory_limit_bytes, uint64_t{4096} << 20);
  EXPECT_EQ(spec.memory_limit_data_only, DDPLAB_HAVE_CUDA_01 == 1);
}

}  // namespace

namespace ddplab::grader::testing {
namespace {

// A failed check whose output names a path the sandbox hides gets that cause first; paths the
// program may read (the data set, named as its folder too, its run folder, its binaries) do not.
// The data set's folder inside the build folder, named without a trailing '/', once read as hidden.
TEST(SandboxCause, OnlyAHiddenPathIsNamedNotTheDataSetOrTheRunFolder) {
  GradeOptions o;
  o.source_dir = "/kit";
  o.build_dir = "/kit/build/solutions";
  o.data_dir = "/kit/build/solutions/testdata/tiny";
  o.out_dir = "/kit/build/solutions/out";
  o.calibration = "/kit/build/solutions/grader/calibration.json";
  Sandbox sandbox;
  sandbox.enabled = true;
  LabBinaries bin;
  bin.program = "/kit/build/solutions/submission/bin/lab04_grad_sync";
  auto cause = [&](const std::string& details) {
    CheckResult r;
    r.status = Status::kFailed;
    r.diagnosis = "the check's own";
    r.details = details;
    parts::name_sandbox_cause(sandbox, o, bin, r);
    return r.diagnosis;
  };
  EXPECT_EQ(cause("error: bucket 3 of 2 (data /kit/build/solutions/testdata/tiny)"), "the check's own");
  EXPECT_EQ(cause("reading /kit/build/solutions/testdata/tiny/train-00000.bin"), "the check's own");
  EXPECT_EQ(cause("wrote /kit/build/solutions/out/lab04/runs/a/rank0.json"), "the check's own");
  EXPECT_NE(cause("cannot open /kit/solutions/lab04_grad_sync/lab04_student.cpp")
                .find("the program reached for /kit/solutions/lab04_grad_sync/lab04_student.cpp, which the grader's "
                      "sandbox hides"),
            std::string::npos);
  EXPECT_NE(cause("cannot open /kit/build/solutions/grader/calibration.json")
                .find("reached for "
                      "/kit/build/solutions/grader/"
                      "calibration.json"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

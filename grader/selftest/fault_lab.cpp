// fault_lab: a stand-in for a student's lab program (and its test binary) that misbehaves on
// purpose, so the grader's self-tests can check that every kind of fault ends within its timeout
// as a failed check with the right cause — never a pass, never a hung or crashed grader.
//   as a lab program:  fault_lab --fault crash|hang|deadlock|oom|garbage|silent|ok [lab flags]
//   as a test binary:  fault_lab --gtest_filter=crash|hang ...
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ddplab/dist/process_group.h"
#include "ddplab/lab.h"

namespace {

[[noreturn]] void hang() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

std::string arg_after(int argc, char** argv, const char* flag) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gtest_filter=crash") std::raise(SIGSEGV);
    if (a == "--gtest_filter=hang") hang();
  }
  const std::string fault = arg_after(argc, argv, "--fault");
  const std::string report = arg_after(argc, argv, "--report");
  if (fault == "garbage" || fault == "silent") {
    // A program that never reaches the lab's driver: junk where the report should be, or nothing.
    if (fault == "garbage" && !report.empty()) {
      std::string path = report;
      const auto at = path.find("{rank}");
      if (at != std::string::npos) path.replace(at, 6, std::getenv("RANK") ? std::getenv("RANK") : "0");
      std::ofstream(path) << "{\"schema\": \"ddplab.run-report\", \"version\": 1, \"status\": ";  // cut short
    }
    return 0;
  }
  std::string mode;
  ddplab::LabProgram program;
  program.name = "fault_lab";
  program.description = "A lab program that fails on purpose (grader self-tests)";
  program.add_flags = [&](ddplab::LabFlags& f) { f.option("--fault", mode, "crash, hang, deadlock, oom or ok"); };
  program.body = [&](ddplab::LabRun& run) {
    if (mode == "crash" && run.rank() == run.world_size() - 1) std::raise(SIGSEGV);
    if (mode == "hang") hang();
    if (mode == "oom") {
      std::vector<std::vector<char>> hog;
      for (;;) hog.emplace_back(size_t{256} << 20, 1);  // touched, so it is really used
    }
    auto pg = run.join();
    if (mode == "deadlock" && run.rank() == 1) hang();  // rank 0 waits for it in the all-reduce below
    auto t = torch::ones({1024});
    pg->allreduce(t);
    if (mode == "crash") hang();  // the other ranks wait; the launcher must stop them
  };
  return ddplab::run_lab(program, argc, argv);
}

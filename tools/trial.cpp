#include "trial.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/error.h"
#include "ddplab/launch.h"
#include "ddplab/report.h"

namespace fs = std::filesystem;

namespace ddplab::tools {
namespace {

std::string last_lines(const std::string& text, size_t n) {
  size_t at = text.size();
  for (size_t k = 0; k <= n && at > 0; ++k) at = text.rfind('\n', at - 1);
  return at == std::string::npos ? text : text.substr(at + 1);
}

Trial read_trial(const std::vector<fs::path>& reports) {
  Trial t;
  for (const auto& path : reports) {
    if (!fs::exists(path)) throw Error(fmt::format("{}: the trial wrote no report", path.string()));
    t.reports.push_back(RunReport::load(path.string()));
  }
  const auto& r0 = t.reports.front();
  t.ranks = r0.value("world_size", 1);
  t.batch = r0.at("config").at("batch").get<int64_t>();
  for (const auto& r : t.reports) t.step_s = std::max(t.step_s, r.at("phases").at("step_median").get<double>());
  if (!(t.step_s > 0)) throw Error(fmt::format("{}: the trial timed no step", reports.front().string()));
  t.samples_per_s = static_cast<double>(t.ranks * t.batch) / t.step_s;
  t.busy = r0.at("utilization").at("busy").get<double>();
  const auto& ph = r0.at("phases");
  t.comm_share = ph.at("comm").get<double>() / ph.at("wall").get<double>();
  return t;
}

std::vector<std::string> trial_flags(int64_t steps) {
  return {"--max-steps", std::to_string(steps), "--log-every", "0"};
}

}  // namespace

std::string run_captured(LaunchSpec spec, double timeout_s, const std::string& what, const fs::path& log) {
  spec.timeout_s = timeout_s;
  std::ostringstream out;
  spec.on_line = [&](int rank, bool, const std::string& line) { out << "[rank " << rank << "] " << line << "\n"; };
  spec.on_message = [&](const std::string& m) { out << "[launcher] " << m << "\n"; };
  const LaunchResult r = launch(spec);
  if (!log.empty()) write_file_atomic(log.string(), out.str());
  if (r.exit_code != 0) throw Error(fmt::format("{} failed: {}\n{}", what, r.summary, last_lines(out.str(), 40)));
  return out.str();
}

void start_with_mpirun(LaunchSpec& spec, int n) {
  spec.nproc = n;
  spec.backend = LaunchBackend::kMpi;
  spec.command.insert(spec.command.end(), {"--backend", "mpi"});
}

std::string bench_backend(const std::string& given, int n) {
  if (given != "auto") return given;
  LaunchSpec probe;
  probe.nproc = n;
  return n > 1 && mpi_launch_problem(probe).empty() ? "mpi" : "gloo";
}

std::string template_program(const std::string& given) {
  if (!given.empty()) return given;
  const fs::path beside = fs::canonical("/proc/self/exe").parent_path() / "lab09_capstone";
  if (!fs::exists(beside)) {
    throw ConfigError(
        fmt::format("{} is not built (./kit build); or name the program with --program", beside.string()));
  }
  return beside.string();
}

void refuse_trial_flags(const std::vector<std::string>& args, const std::string& owner) {
  for (const auto& a : args) {
    for (const char* flag : {"--max-steps", "--report", "--log-every"}) {
      if (a == flag || a.rfind(std::string(flag) + "=", 0) == 0) {
        throw ConfigError(fmt::format("{} sets {} itself: leave it out of the program's arguments", owner, flag));
      }
    }
  }
}

Trial run_trial(const std::string& program, const std::vector<std::string>& args, int ranks, int64_t steps,
                const fs::path& dir, double timeout_s) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  LaunchSpec spec;
  spec.nproc = ranks;
  spec.backend = LaunchBackend::kAuto;  // as `ddplab launch` and the grader start the job being forecast
  spec.command = {program};
  spec.command.insert(spec.command.end(), args.begin(), args.end());
  for (const auto& f : trial_flags(steps)) spec.command.push_back(f);
  spec.command.insert(spec.command.end(), {"--report", (dir / "rank{rank}.json").string()});
  run_captured(spec, timeout_s, fmt::format("the trial `{}` on {} process(es)", fmt::join(spec.command, " "), ranks),
               dir / "output.txt");
  std::vector<fs::path> reports;
  for (int r = 0; r < ranks; ++r) reports.push_back(dir / fmt::format("rank{}.json", r));
  return read_trial(reports);
}

std::vector<Trial> run_independent(const std::string& program, const std::vector<std::string>& args, int copies,
                                   int64_t steps, const fs::path& dir, double timeout_s) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  LaunchSpec spec;
  spec.nproc = copies;
  // Each copy leaves the launcher's job (no RANK/WORLD_SIZE: a single process, no process group)
  // and reports into a folder named after the rank the launcher gave it.
  spec.command = {"/bin/sh",
                  "-c",
                  "d=$1; shift; exec env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u GROUP_RANK "
                  "-u ROLE_RANK \"$@\" --report \"$d/copy$RANK/rank{rank}.json\"",
                  "sh",
                  dir.string(),
                  program};
  spec.command.insert(spec.command.end(), args.begin(), args.end());
  for (const auto& f : trial_flags(steps)) spec.command.push_back(f);
  run_captured(spec, timeout_s, fmt::format("the trial `{}` on {} process(es)", fmt::join(spec.command, " "), copies),
               dir / "output.txt");
  std::vector<Trial> out;
  for (int c = 0; c < copies; ++c) out.push_back(read_trial({dir / fmt::format("copy{}", c) / "rank0.json"}));
  return out;
}

}  // namespace ddplab::tools

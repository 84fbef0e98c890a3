// `ddplab trace merge OUT IN...`: puts the timelines of a job's ranks (--trace) into one file,
// each rank a process of its own, so Perfetto shows who waited for whom. The work is done by the
// library (common/src/trace.cpp); the format is in docs/concepts/metrics.md, "Timeline (--trace)".
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "ddplab/error.h"
#include "ddplab/trace.h"

namespace ddplab::tools {

struct TraceMergeOptions {
  std::string out;
  std::vector<std::string> inputs;
};

int run_trace_merge(const TraceMergeOptions& o) {
  std::vector<trace::MergeInput> inputs;
  for (const auto& path : o.inputs) inputs.push_back({path, trace::load(path)});
  const trace::MergeResult r = trace::merge(inputs);
  trace::write_atomic(o.out, trace::dump(r.doc));
  fmt::print("merged {} rank trace(s), {} events, into {}\n", inputs.size(), r.doc["traceEvents"].size(), o.out);
  if (r.alignment == "steady_clock") {
    fmt::print("clocks: one machine (same boot id), aligned exactly on steady_clock\n");
  } else {
    // Different machines' monotonic clocks are unrelated; wall clocks are all that relates them.
    fmt::print(stderr,
               "warning: the traces come from more than one machine: aligned on their system clocks, which is only as "
               "good as their synchronisation (NTP: often within a millisecond); a collective's bars may not line up "
               "across machines\n");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    fmt::print("  rank {} ({}): shifted by {:.3f} ms\n", inputs[i].doc["otherData"]["rank"].get<int64_t>(),
               inputs[i].path, r.shift_us[i] / 1000.0);
  }
  return kExitOk;
}

void setup_trace(CLI::App& app) {
  auto* sub = app.add_subcommand("trace", "Work with the timelines lab programs write with --trace");
  sub->require_subcommand(1);
  auto opts = std::make_shared<TraceMergeOptions>();
  auto* merge = sub->add_subcommand("merge", "Put the ranks' timelines of one job into one file (open it in Perfetto)");
  merge->add_option("OUT", opts->out, "The merged trace to write")->required();
  merge->add_option("IN", opts->inputs, "The ranks' trace files (rank{rank}.json of --trace)")
      ->required()
      ->check(CLI::ExistingFile);
  merge->callback([opts] { exit_status() = run_trace_merge(*opts); });
}

}  // namespace ddplab::tools

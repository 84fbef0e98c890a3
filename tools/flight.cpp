// `ddplab flight DIR`: merges the flight recorder dumps of a job's ranks (rank<R>.json, written
// when a collective timed out: lab 11) into one table of their last collectives and names the
// collective the job stopped in, the ranks waiting in it and the ranks they wait for. The work is
// the library's (common/src/flight.cpp); the format is in docs/concepts/metrics.md.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "ddplab/error.h"
#include "ddplab/flight.h"

namespace ddplab::tools {

struct FlightOptions {
  std::string dir;
  int world = 0;
  int rows = 8;
};

int run_flight(const FlightOptions& o) {
  const auto dumps = flight::read_dumps(o.dir, o.world);
  int found = 0;
  for (const auto& d : dumps) {
    if (!d) continue;
    ++found;
    fmt::print("rank {}: {} entries, dumped because {}\n", d->rank, d->entries.size(), d->reason);
  }
  fmt::print("{} of {} ranks left a dump\n\n", found, dumps.size());
  const flight::Stall s = flight::diagnose(dumps);
  fmt::print("{}", flight::table(dumps, s, o.rows));
  return s.seq >= 0 ? kExitError : kExitOk;
}

void setup_flight(CLI::App& app) {
  auto opts = std::make_shared<FlightOptions>();
  auto* sub = app.add_subcommand("flight",
                                 "Merge a job's flight recorder dumps (lab 11) and name the collective it stopped in");
  sub->add_option("DIR", opts->dir, "The folder of the dumps (rank<R>.json: the run's flight/ folder)")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--world", opts->world, "Ranks in the job (default: as the dumps say)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--rows", opts->rows, "Collectives shown, up to the stalled one")->check(CLI::PositiveNumber);
  sub->footer("Exit status: 1 when the dumps show a stall, 0 when they do not.");
  sub->callback([opts] { exit_status() = run_flight(*opts); });
}

}  // namespace ddplab::tools

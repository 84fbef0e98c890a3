// `ddplab bench`: benchmarks with a target. Each prints its figures and OK/FAILED against its
// target, with the exit status to match; one file per benchmark (bench_<name>.cpp).
#include "commands.h"

namespace ddplab::tools {

void setup_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks with a target: print figures and OK/FAILED");
  bench->require_subcommand(1);
  setup_bench_train(*bench);
  setup_bench_allreduce(*bench);
  setup_bench_scaling(*bench);
  setup_bench_grade(*bench);
  setup_bench_pytorch(*bench);
}

}  // namespace ddplab::tools

// ddplab-tools: every `ddplab` subcommand (the `ddplab` in front of it runs `launch` itself and
// hands everything else here, tools/front.cpp). Registers each subcommand; errors map to exit codes.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "ddplab/openblas_kernels.h"

int main(int argc, char** argv) {
  // The labs this process starts (grading, benchmarks, launches) get the OpenBLAS kernels this CPU
  // supports where OpenBLAS's own detection fell back to old ones (ddplab doctor says when).
  ddplab::sys::adopt_better_openblas_coretype();
  CLI::App app{"ddplab: a course kit for distributed data-parallel training"};
  app.require_subcommand(1);
  ddplab::tools::setup_data(app);
  ddplab::tools::setup_doctor(app);
  ddplab::tools::setup_bench(app);
  ddplab::tools::setup_launch(app);
  ddplab::tools::setup_grade(app);
  ddplab::tools::setup_trace(app);
  ddplab::tools::setup_flight(app);
  ddplab::tools::setup_pack(app);
  ddplab::tools::setup_preflight(app);
  ddplab::tools::setup_forecast(app);
  ddplab::tools::setup_price(app);
  return ddplab::tools::run_cli(app, argc, argv);
}

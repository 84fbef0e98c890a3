// The `ddplab` command line: registers each subcommand and maps errors to exit codes.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "ddplab/data/error.h"
#include "ddplab/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ddplab: a course kit for distributed data-parallel training"};
  app.require_subcommand(1);
  ddplab::tools::setup_data(app);
  ddplab::tools::setup_doctor(app);
  ddplab::tools::setup_bench(app);
  ddplab::tools::setup_launch(app);
  ddplab::tools::setup_grade(app);
  ddplab::tools::setup_trace(app);
  ddplab::tools::setup_pack(app);
  ddplab::tools::setup_preflight(app);
  ddplab::tools::setup_forecast(app);
  ddplab::tools::setup_price(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ddplab::NotImplemented& e) {
    std::cerr << "ddplab: " << e.what() << "\n";
    return ddplab::kExitNotAttempted;
  } catch (const ddplab::ConfigError& e) {
    std::cerr << "ddplab: " << e.what() << "\n";
    return ddplab::kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "ddplab: error: " << e.what() << "\n";
    return ddplab::kExitError;
  }
  return ddplab::tools::exit_status();
}

int& ddplab::tools::exit_status() {
  static int status = 0;
  return status;
}

// What both `ddplab` programs share: parsing, the mapping of errors to exit codes, the exit status.
#include <iostream>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "ddplab/error.h"

namespace ddplab::tools {

int run_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const NotImplemented& e) {
    std::cerr << "ddplab: " << e.what() << "\n";
    return kExitNotAttempted;
  } catch (const ConfigError& e) {
    std::cerr << "ddplab: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "ddplab: error: " << e.what() << "\n";
    return kExitError;
  }
  return exit_status();
}

int& exit_status() {
  static int status = 0;
  return status;
}

}  // namespace ddplab::tools

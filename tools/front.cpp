// `ddplab`: runs `ddplab launch` itself and hands every other subcommand to ddplab-tools, the
// program beside it (same arguments, execv). A program linking Debian's LibTorch spends ~0.7 s
// of CPU before main (its ~290 shared libraries bound at load, its operators registered), and a
// launcher needs none of it: a 2-rank job paid that start-up three times, the launcher's first.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string_view>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "ddplab/error.h"
#include "ddplab/openblas_kernels.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "launch") {
#ifdef DDPLAB_RANKS_USE_SYSTEM_BLAS
    // The ranks get the OpenBLAS kernels this CPU supports where OpenBLAS's own choice fell back to
    // old ones (ddplab-tools does the same for what it starts; ddplab doctor explains).
    ddplab::sys::adopt_better_openblas_coretype(/*load_system_blas=*/true);
#endif
    CLI::App app{"ddplab: a course kit for distributed data-parallel training"};
    app.require_subcommand(1);
    ddplab::tools::setup_launch(app);
    return ddplab::tools::run_cli(app, argc, argv);
  }
  std::error_code ec;
  const auto self = std::filesystem::canonical("/proc/self/exe", ec);
  const std::string tools = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "ddplab-tools";
  execv(tools.c_str(), argv);
  std::cerr << "ddplab: cannot start " << tools << ": " << std::strerror(errno)
            << " (it is built with ddplab: cmake --build <build> --target ddplab)\n";
  return ddplab::kExitError;
}

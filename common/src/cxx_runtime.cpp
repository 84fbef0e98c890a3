// std_filesystem_library and its check (cxx_runtime.h): a dynamic-loader question, asked with
// dlsym and dladdr.
#include "ddplab/cxx_runtime.h"

#include <dlfcn.h>

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "ddplab/error.h"

namespace ddplab::sys {

std::string std_filesystem_library() {
  // The first definition in the global scope, as a call from this program binds to.
  void* f = ::dlsym(RTLD_DEFAULT, "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE");
  Dl_info info{};
  if (f == nullptr || ::dladdr(f, &info) == 0 || info.dli_fname == nullptr) return "";
  std::error_code ec;
  const auto real = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::string(info.dli_fname) : real.string();
}

void require_std_filesystem_from_runtime() {
  const std::string lib = std_filesystem_library();
  if (lib.empty() || lib.find("libstdc++") != std::string::npos) return;
  throw Error(fmt::format(
      "std::filesystem resolves to {}, not the C++ runtime (libstdc++): a torch wheel's copy, which can crash "
      "(torch 2.11's remove_all jumps to address 0 under GCC 12's runtime). The kit links libstdc++.so.6 first "
      "(cmake/Flags.cmake); this build's link line did not: reconfigure the build folder (docs/concepts/build.md)",
      lib));
}

}  // namespace ddplab::sys

// OpenBLAS's kernel choice and the OPENBLAS_CORETYPE that corrects it (openblas_kernels.h).
#include "ddplab/openblas_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>

namespace ddplab::sys {
namespace {

using CoreName = char* (*)();

/// Whether `core` is one of the cores OpenBLAS falls back to for a model number it does not know
/// (SSE2/SSE3-era kernels).
bool is_fallback_core(const std::string& core) {
  static const std::set<std::string> fallbacks{"prescott",  "core2",  "penryn",     "dunnington",
                                               "nehalem",   "atom",   "katmai",     "coppermine",
                                               "northwood", "banias", "sse_generic"};
  std::string lower;
  for (const char c : core) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return fallbacks.count(lower) > 0;
}

std::string this_cpus_flags() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) == 0) return line.substr(line.find(':') + 1);
  }
  return "";
}

/// The OpenBLAS this process has loaded, asked for its core; nullptr without one.
CoreName loaded_corename() { return reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename")); }

/// /proc/cpuinfo is read only for a fallback core: every ddplab-tools start asks.
std::string better_for(CoreName corename) {
  if (corename == nullptr) return "";
  const std::string core = corename();
  return is_fallback_core(core) ? better_openblas_coretype(core, this_cpus_flags()) : "";
}

}  // namespace

std::string better_openblas_coretype(const std::string& core, const std::string& cpu_flags) {
  if (!is_fallback_core(core)) return "";
  std::set<std::string> flags;
  std::istringstream in(cpu_flags);
  for (std::string f; in >> f;) flags.insert(f);
  const auto has = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* n) { return flags.count(n) > 0; });
  };
  if (has({"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"})) return "SkylakeX";
  if (has({"avx2", "fma"})) return "Haswell";
  if (has({"avx"})) return "Sandybridge";
  return "";
}

std::string better_openblas_coretype() { return better_for(loaded_corename()); }

std::string adopt_better_openblas_coretype(bool load_system_blas) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  CoreName corename = loaded_corename();
  void* blas = nullptr;
  if (corename == nullptr && load_system_blas) {
    // The BLAS Debian's LibTorch loads (tools/setup-debian.sh points it at OpenBLAS).
    blas = ::dlopen("libblas.so.3", RTLD_LAZY | RTLD_LOCAL);
    if (blas != nullptr) corename = reinterpret_cast<CoreName>(::dlsym(blas, "openblas_get_corename"));
  }
  const std::string core = better_for(corename);
  if (!core.empty()) ::setenv("OPENBLAS_CORETYPE", core.c_str(), 0);
  if (blas != nullptr) ::dlclose(blas);
  return core;
}

std::string openblas_kernels() {
  const CoreName corename = loaded_corename();
  return corename == nullptr ? "" : std::string(corename());
}

void restart_with_better_openblas_coretype(char** argv) {
  // Nothing set when the variable was (by someone, or this is the restart) or OpenBLAS chose well.
  if (adopt_better_openblas_coretype().empty()) return;
  ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the kernels loaded
}

}  // namespace ddplab::sys

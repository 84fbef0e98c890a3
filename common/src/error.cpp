// Formatting of ddplab errors with rank and place.
#include "ddplab/error.h"

#include <atomic>
#include <cstring>

namespace ddplab {
namespace {
std::atomic<int> g_rank{-1};

std::string decorate(const std::string& message, const char* file, int line) {
  std::string out;
  const int rank = g_rank.load();
  if (rank >= 0) out += "[rank " + std::to_string(rank) + "] ";
  if (file != nullptr) {
    const char* base = std::strrchr(file, '/');
    out += std::string(base != nullptr ? base + 1 : file) + ":" + std::to_string(line) + ": ";
  }
  return out + message;
}
}  // namespace

Error::Error(const std::string& message, const char* file, int line)
    : std::runtime_error(decorate(message, file, line)), message_(message) {}

NotImplemented::NotImplemented(const std::string& exercise, const std::string& what)
    : Error("exercise " + exercise + " is not implemented yet" + (what.empty() ? "" : ": " + what)),
      exercise_(exercise) {}

void set_process_rank(int rank) { g_rank.store(rank); }
int process_rank() { return g_rank.load(); }

}  // namespace ddplab

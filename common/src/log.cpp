// Line-atomic, rank-prefixed log output.
#include "ddplab/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "ddplab/error.h"

namespace ddplab::log {
namespace {
std::atomic<int> g_level{[] {
  const char* env = std::getenv("DDPLAB_LOG_LEVEL");
  if (env == nullptr) return static_cast<int>(Level::kInfo);
  try {
    return static_cast<int>(parse_level(env));
  } catch (const Error&) {
    return static_cast<int>(Level::kInfo);
  }
}()};
std::mutex g_mutex;
}  // namespace

void set_level(Level l) { g_level.store(static_cast<int>(l)); }
Level level() { return static_cast<Level>(g_level.load()); }

Level parse_level(const std::string& name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn") return Level::kWarn;
  if (name == "error") return Level::kError;
  throw ConfigError("log level must be debug|info|warn|error, got '" + name + "'");
}

void write(Level l, const std::string& message) {
  if (static_cast<int>(l) < g_level.load()) return;
  static const char* const kTag[] = {"debug: ", "", "warning: ", "error: "};
  // Under `ddplab launch` every line already gets "[rank R] " from the launcher.
  static const bool launcher_prefixes = std::getenv("DDPLAB_LAUNCHER") != nullptr;
  const int rank = process_rank();
  const std::string prefix = rank >= 0 && !launcher_prefixes ? "[rank " + std::to_string(rank) + "] " : "";
  const std::string line = prefix + kTag[static_cast<int>(l)] + message + "\n";
  std::FILE* out = l >= Level::kWarn ? stderr : stdout;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace ddplab::log

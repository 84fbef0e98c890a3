// Rank-aware logging: every line says which process wrote it, and info0() lets rank 0 speak for
// the job without N copies of the same line.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>

namespace ddplab::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

/// Lines below this level are dropped (DDPLAB_LOG_LEVEL=debug|info|warn|error, default info).
void set_level(Level level);
Level level();
/// Parses "debug", "info", "warn", "error"; throws ddplab::ConfigError otherwise.
Level parse_level(const std::string& name);

/// Writes one line "[rank R] message" to stderr (warn/error) or stdout, atomically per line.
void write(Level level, const std::string& message);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
/// Info line written by rank 0 only (or by a process without a rank).
template <typename... Args>
void info0(fmt::format_string<Args...> f, Args&&... args);

}  // namespace ddplab::log

#include "ddplab/error.h"

template <typename... Args>
void ddplab::log::info0(fmt::format_string<Args...> f, Args&&... args) {
  if (ddplab::process_rank() <= 0) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}

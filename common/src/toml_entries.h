// Reading a TOML table of entries ([[instance]] in prices.toml, [[link]] in links.toml) with
// errors that name the file, the line and the key. Internal to common/ (cost.cpp, forecast.cpp).
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "ddplab/error.h"

namespace ddplab::toml_util {

/// Parses `text` into `root` and returns each [[`name`]] table with its line. A syntax error is a
/// ConfigError "source:line:column: ..."; no entry, or one that is not a table, names them too.
inline std::vector<std::pair<const toml::table*, int>> toml_entries(toml::table& root, const std::string& text,
                                                                    const std::string& source, const char* name) {
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(
        fmt::format("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description()));
  }
  const auto* entries = root[name].as_array();
  if (!entries || entries->empty()) throw ConfigError(fmt::format("{}: no [[{}]] entries", source, name));
  std::vector<std::pair<const toml::table*, int>> out;
  for (const auto& node : *entries) {
    const int line = static_cast<int>(node.source().begin.line);
    const auto* t = node.as_table();
    if (!t) throw ConfigError(fmt::format("{}:{}: each [[{}]] must be a table", source, line, name));
    out.emplace_back(t, line);
  }
  return out;
}

/// The entry's non-empty string `key`; a ConfigError "source:line: [[name]] needs `key = "..."`".
inline std::string toml_string(const toml::table& t, const char* key, const std::string& source, int line,
                               const char* name) {
  const auto v = t[key].value<std::string>();
  if (!v || v->empty()) throw ConfigError(fmt::format("{}:{}: [[{}]] needs `{} = \"...\"`", source, line, name, key));
  return *v;
}

/// A ConfigError "source:line: what: unknown key 'k' (known: ...)" for the first key not in `known`.
inline void toml_known_keys(const toml::table& t, const std::set<std::string>& known, const std::string& source,
                            const std::string& what) {
  for (const auto& [key, value] : t) {
    if (!known.count(std::string(key.str()))) {
      throw ConfigError(fmt::format("{}:{}: {}: unknown key '{}' (known: {})", source, value.source().begin.line, what,
                                    key.str(), fmt::join(known, ", ")));
    }
  }
}

}  // namespace ddplab::toml_util

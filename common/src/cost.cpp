#include "ddplab/cost.h"

#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "ddplab/error.h"
#include "ddplab/prices_toml.h"

namespace ddplab::cost {

std::vector<Price> parse_prices(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(
        fmt::format("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description()));
  }
  const auto* entries = root["instance"].as_array();
  if (!entries || entries->empty()) throw ConfigError(fmt::format("{}: no [[instance]] entries", source));
  std::vector<Price> table;
  std::set<std::string> names;
  for (const auto& node : *entries) {
    const int line = static_cast<int>(node.source().begin.line);
    const auto* t = node.as_table();
    if (!t) throw ConfigError(fmt::format("{}:{}: each [[instance]] must be a table", source, line));
    auto str = [&](const char* key) {
      const auto v = (*t)[key].value<std::string>();
      if (!v || v->empty()) {
        throw ConfigError(fmt::format("{}:{}: [[instance]] needs `{} = \"...\"`", source, line, key));
      }
      return *v;
    };
    Price p;
    p.instance = str("name");
    p.devices_are = str("devices_are");
    p.source = str("source");
    p.as_of = str("as_of");
    const auto devices = (*t)["devices"].value<int64_t>();
    const auto usd = (*t)["usd_per_hour"].value<double>();
    if (!devices || *devices < 1) {
      throw ConfigError(
          fmt::format("{}:{}: instance '{}': devices must be a whole number >= 1", source, line, p.instance));
    }
    if (!usd || !(*usd > 0)) {
      throw ConfigError(
          fmt::format("{}:{}: instance '{}': usd_per_hour must be a number > 0", source, line, p.instance));
    }
    for (const auto& [key, value] : *t) {
      static const std::set<std::string> known = {"name", "devices", "devices_are", "usd_per_hour", "source", "as_of"};
      if (!known.count(std::string(key.str()))) {
        throw ConfigError(fmt::format("{}:{}: instance '{}': unknown key '{}' (known: {})", source,
                                      value.source().begin.line, p.instance, key.str(), fmt::join(known, ", ")));
      }
    }
    p.devices = static_cast<int>(*devices);
    p.usd_per_hour = *usd;
    if (!names.insert(p.instance).second) {
      throw ConfigError(fmt::format("{}:{}: instance '{}' is listed twice", source, line, p.instance));
    }
    table.push_back(std::move(p));
  }
  return table;
}

std::vector<Price> load_prices(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the price table", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_prices(text.str(), path);
}

const std::vector<Price>& kit_prices() {
  static const std::vector<Price> table = parse_prices(detail::kPricesToml, kKitPrices);
  return table;
}

std::vector<Price> prices_from(const std::string& path) { return path.empty() ? kit_prices() : load_prices(path); }

const Price& find_price(const std::vector<Price>& table, const std::string& instance, const std::string& path) {
  for (const auto& p : table) {
    if (p.instance == instance) return p;
  }
  std::vector<std::string> names;
  for (const auto& p : table) names.push_back(p.instance);
  throw ConfigError(fmt::format("{}: no instance '{}' (the table has: {})", path, instance, fmt::join(names, ", ")));
}

}  // namespace ddplab::cost

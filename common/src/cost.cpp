#include "ddplab/cost.h"

#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "ddplab/error.h"
#include "ddplab/prices_toml.h"
#include "toml_entries.h"

namespace ddplab::cost {

std::vector<Price> parse_prices(const std::string& text, const std::string& source) {
  toml::table root;
  std::vector<Price> table;
  std::set<std::string> names;
  for (const auto& entry : toml_util::toml_entries(root, text, source, "instance")) {
    const toml::table* t = entry.first;
    const int line = entry.second;
    auto str = [&](const char* key) { return toml_util::toml_string(*t, key, source, line, "instance"); };
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
    toml_util::toml_known_keys(*t, {"name", "devices", "devices_are", "usd_per_hour", "source", "as_of"}, source,
                               fmt::format("instance '{}'", p.instance));
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

#include "ddplab/config_file.h"

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace ddplab {
namespace {

/// The file CLI11 is reading now: the last value given to --config.
std::string current_file(const CLI::App* app) {
  const CLI::Option* opt = app->get_config_ptr();
  if (!opt) return "config";
  const auto files = opt->as<std::vector<std::string>>();
  return files.empty() ? std::string("config") : files.back();
}

/// A TOML value as the text CLI11 parses for a flag: strings as they are, booleans true/false,
/// numbers in full precision.
std::string as_input(const toml::node& v) {
  if (const auto* s = v.as_string()) return s->get();
  if (const auto* b = v.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* i = v.as_integer()) return std::to_string(i->get());
  if (const auto* f = v.as_floating_point()) return fmt::format("{}", f->get());
  return "";  // dates and times: no flag takes one (from_config refuses arrays and tables first)
}

}  // namespace

void add_config_file(CLI::App& app) {
  app.set_config("--config", "",
                 "TOML file of settings: keys named like the long flags (batch = 512); "
                 "the command line overrides it")
      ->envname("DDPLAB_CONFIG");
  app.config_formatter(std::make_shared<TomlConfig>(&app));
  app.allow_config_extras(CLI::config_extras_mode::error);
}

std::string TomlConfig::to_config(const CLI::App* app, bool default_also, bool, std::string) const {
  // The effective settings as TOML (CLI11's --help-all style dump), one `key = value` per option.
  toml::table t;
  for (const CLI::Option* o : app->get_options()) {
    if (o->get_lnames().empty() || !o->get_configurable()) continue;
    const std::string key = o->get_lnames().front();
    if (o->count() == 0 && !default_also) continue;
    const std::string v = o->count() > 0 ? o->results().back() : o->get_default_str();
    t.insert_or_assign(key, v);
  }
  std::ostringstream os;
  os << t;
  return os.str();
}

std::vector<CLI::ConfigItem> TomlConfig::from_config(std::istream& input) const {
  const std::string file = current_file(app_);
  std::stringstream text;
  text << input.rdbuf();
  toml::table root;
  try {
    root = toml::parse(text.str(), file);
  } catch (const toml::parse_error& e) {
    throw CLI::ConfigError(
        fmt::format("{}:{}:{}: {}", file, e.source().begin.line, e.source().begin.column, e.description()));
  }
  std::vector<CLI::ConfigItem> items;
  std::map<std::string, int64_t> seen;  // flag name -> line
  auto add = [&](const std::string& heading, const toml::key& key, const toml::node& value) {
    const int64_t line = static_cast<int64_t>(value.source().begin.line);
    std::string name(key.str());
    std::replace(name.begin(), name.end(), '_', '-');
    const std::string where =
        fmt::format("{}:{}: {}{}", file, line, heading.empty() ? "" : "[" + heading + "] ", key.str());
    if (value.is_table() || value.is_array()) {
      throw CLI::ConfigError(fmt::format("{}: expected a string, number or boolean (one flag's value)", where));
    }
    const CLI::Option* opt = app_->get_option_no_throw("--" + name);
    if (!opt || !opt->get_configurable()) {
      throw CLI::ConfigError(fmt::format("{}: no flag --{} (see --help)", where, name));
    }
    const auto [it, fresh] = seen.emplace(name, line);
    if (!fresh) throw CLI::ConfigError(fmt::format("{}: --{} is set already on line {}", where, name, it->second));
    CLI::ConfigItem item;
    item.name = name;
    item.inputs = {as_input(value)};
    items.push_back(std::move(item));
  };
  for (const auto& [key, value] : root) {
    if (const auto* table = value.as_table()) {
      for (const auto& [k, v] : *table) add(std::string(key.str()), k, v);
    } else {
      add("", key, value);
    }
  }
  return items;
}

}  // namespace ddplab

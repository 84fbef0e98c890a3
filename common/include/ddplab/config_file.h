// A TOML settings file for a program's flags (lab 09's training template; any lab program):
// `--config FILE` reads keys named like the long flags (`batch = 512`, `train_samples = 4096` or
// `train-samples`), optionally grouped in tables ([train], [data]: the table names are only
// headings). The command line wins over the file, the file over the DDPLAB_* environment, and that
// over the defaults. Parsed with toml++, fed to CLI11 as its config formatter, so every check a
// flag has applies to its value from the file too.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ddplab {

/// Adds `--config FILE` to `app`. A key that names no flag, a key given twice, an array or a
/// nested table is a CLI::ConfigError naming the file, line and key; a TOML syntax error names
/// the file, line and column. Call after every flag is registered or before parsing.
void add_config_file(CLI::App& app);

/// The CLI11 formatter behind add_config_file (exposed for tests). `app` is asked which file is
/// being read and which flags exist.
class TomlConfig : public CLI::Config {
 public:
  explicit TomlConfig(const CLI::App* app) : app_(app) {}
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  const CLI::App* app_;
};

}  // namespace ddplab

// The price table of the cost meter (lab 09, `ddplab forecast`, the grader's recomputation of a
// run's cost): on-demand prices of cloud instances, each entry with its source and the date it
// was read, kept as data (common/prices.toml; prices change, and an instructor can override the
// table with --prices).
#pragma once

#include <string>
#include <vector>

namespace ddplab::cost {

/// One entry of the price table.
struct Price {
  std::string instance;     ///< e.g. "p3.16xlarge"
  std::string devices_are;  ///< e.g. "8x V100 16 GB", "2 vCPUs, one rank each"
  int devices = 1;          ///< ranks one instance holds: its GPUs, or for a CPU instance its vCPUs
  double usd_per_hour = 0;  ///< on-demand price of one instance-hour
  std::string source;       ///< where the price was read
  std::string as_of;        ///< when (YYYY-MM-DD), or the snapshot it was read from
  double usd_per_device_hour() const { return usd_per_hour / devices; }
};

/// Every [[instance]] of the TOML file at `path`. Throws ConfigError naming the file, line and key
/// of an entry that lacks a field, repeats an instance, or has a non-positive price or device count.
std::vector<Price> load_prices(const std::string& path);

/// The entry named `instance`; a ConfigError naming `path` and listing the table's instances if
/// there is none.
const Price& find_price(const std::vector<Price>& table, const std::string& instance, const std::string& path);

/// The same from TOML text; `source` names it in errors (a path, or "the kit's price table").
std::vector<Price> parse_prices(const std::string& text, const std::string& source);

/// The kit's own table: common/prices.toml, compiled into the runtime (a sandboxed program reads
/// no source files). Its name in messages is kKitPrices.
const std::vector<Price>& kit_prices();
inline constexpr const char* kKitPrices = "the kit's price table (common/prices.toml)";

/// `path`'s table, or the kit's when `path` is empty.
std::vector<Price> prices_from(const std::string& path);

}  // namespace ddplab::cost

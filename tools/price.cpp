// `ddplab price REPORT...`: what a finished run cost, from its ranks' reports and the price table:
// device-hours (ranks x the slowest rank's training time), dollars, and dollars per million
// unique samples, the distinct samples counted from the reports' per-epoch digests as the grader
// counts them. Lab 09 prices lab 02's run without a sampler next to lab 03's with one: the
// seeds' bill, in this machine's cents.
#include <algorithm>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ddplab/cost.h"
#include "ddplab/data/shard.h"
#include "ddplab/error.h"
#include "ddplab/report.h"

namespace ddplab::tools {
namespace {

struct PriceOptions {
  std::vector<std::string> reports;
  std::string instance = "c6i.large";
  std::string prices;
  std::string json;
};

int run_price(const PriceOptions& o) {
  const auto table = cost::prices_from(o.prices);
  const cost::Price& price = cost::find_price(table, o.instance, o.prices.empty() ? cost::kKitPrices : o.prices);
  std::vector<nlohmann::json> reps;
  std::set<int> ranks;
  for (const auto& path : o.reports) {
    auto r = RunReport::load(path);
    const int rank = r.value("rank", -1);
    if (!ranks.insert(rank).second) throw ConfigError(fmt::format("{}: a second report of rank {}", path, rank));
    if (!reps.empty() && (r.value("lab", "") != reps.front().value("lab", "") ||
                          r.value("world_size", 0) != reps.front().value("world_size", 0))) {
      throw ConfigError(fmt::format("{}: the report of another run (lab {}, world size {}; the first report: {}, {})",
                                    path, r.value("lab", ""), r.value("world_size", 0), reps.front().value("lab", ""),
                                    reps.front().value("world_size", 0)));
    }
    r["_path"] = path;
    reps.push_back(std::move(r));
  }
  const int world = reps.front().value("world_size", 1);
  if (static_cast<int>(reps.size()) != world) {
    throw ConfigError(fmt::format("{} report(s) of a {}-rank run: pass one per rank (rank{{0..{}}}.json)", reps.size(),
                                  world, world - 1));
  }
  const auto& cfg = reps.front().at("config");
  uint64_t n = cfg.value("train_size", uint64_t{0});
  if (n == 0) n = data::read_metadata(cfg.at("data").get<std::string>()).train_count;

  double wall = 0;
  uint64_t processed = 0;
  size_t epochs = SIZE_MAX;
  for (const auto& r : reps) {
    wall = std::max(wall, r.at("phases").at("wall").get<double>());
    processed += r.at("samples").at("processed").get<uint64_t>();
    epochs = std::min(epochs, r.value("epochs", nlohmann::json::array()).size());
  }
  uint64_t unique = 0;
  bool exact = true, replicated = false;
  for (size_t e = 0; e < epochs; ++e) {
    std::vector<uint64_t> sets, samples;
    std::vector<std::vector<uint64_t>> seen;
    for (const auto& r : reps) {
      const auto& ep = r.at("epochs").at(e);
      const std::string where = fmt::format("{}: epochs.{}.", r.at("_path").get<std::string>(), e);
      sets.push_back(parse_hex64(ep.at("set_digest").get<std::string>(), where + "set_digest"));
      samples.push_back(ep.at("samples").get<uint64_t>());
      append_seen(ep, where + "seen", seen);
    }
    const auto u = epoch_unique_samples(sets, samples, n, seen);
    unique += u.unique;
    exact = exact && u.exact;
    replicated = replicated || u.replicated;
  }
  const double device_hours = world * wall / 3600;
  const double usd = device_hours * price.usd_per_device_hour();
  const double per_million = unique > 0 ? usd / (static_cast<double>(unique) / 1e6) : 0;
  fmt::print("price of {} on {} rank(s), billed as {} (${:.4f} a device-hour: ${} an instance-hour / {} devices; {})\n",
             reps.front().value("lab", "?"), world, price.instance, price.usd_per_device_hour(), price.usd_per_hour,
             price.devices, price.as_of);
  fmt::print("  training time {:.1f} s (the slowest rank) x {} rank(s) = {:.5f} device-hours -> ${:.6f}\n", wall, world,
             device_hours, usd);
  fmt::print("  samples processed {}, unique {}{} over {} epoch(s) of {}\n", processed, unique,
             replicated ? " (every rank saw the same samples: no sampler, each rank repeats the others' work)"
             : !exact   ? " (at most: the digests show overlap they cannot count)"
                        : "",
             epochs, n);
  fmt::print("  ${:.6f} per million unique samples; ${:.6f} per million processed\n", per_million,
             processed > 0 ? usd / (static_cast<double>(processed) / 1e6) : 0.0);
  if (!o.json.empty()) {
    const nlohmann::json j = {{"lab", reps.front().value("lab", "")},
                              {"ranks", world},
                              {"instance", price.instance},
                              {"usd_per_device_hour", price.usd_per_device_hour()},
                              {"wall_s", wall},
                              {"device_hours", device_hours},
                              {"usd", usd},
                              {"samples_processed", processed},
                              {"samples_unique", unique},
                              {"unique_exact", exact},
                              {"replicated", replicated},
                              {"usd_per_million_unique", per_million}};
    write_file_atomic(o.json, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

void setup_price(CLI::App& app) {
  auto o = std::make_shared<PriceOptions>();
  auto* sub = app.add_subcommand(
      "price",
      "What a finished run cost: device-hours, dollars and dollars per million unique samples, from its reports");
  sub->add_option("reports", o->reports, "Every rank's report of one run (rank0.json rank1.json ...)")->required();
  sub->add_option("--instance", o->instance, "The instance of the price table the run is billed as")
      ->capture_default_str();
  sub->add_option("--prices", o->prices, "Price table (TOML, the format of common/prices.toml; default: the kit's)");
  sub->add_option("--json", o->json, "Also write the figures to this JSON file");
  sub->callback([o] { exit_status() = run_price(*o); });
}

}  // namespace ddplab::tools

// `ddplab data gen | verify | stats | import criteo | export tsv`: make the ctr-small data set,
// check it byte by byte, show what is in it, and convert Criteo-layout text to and from shards.
// gen and import are also benchmarks: they print OK/FAILED against their rate targets but keep
// exit status 0, since the data they wrote is good either way.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "ddplab/data/criteo.h"
#include "ddplab/data/schema.h"
#include "ddplab/data/shard.h"
#include "ddplab/metrics.h"

namespace ddplab::tools {

namespace {

namespace d = ddplab::data;

// Generation target in samples/s per thread, where that rate is (train + test samples) / (wall
// seconds of generating and writing x generator threads): the disk counts, the setup does not.
constexpr double kTargetRatePerThread = 500000.0;
// Criteo import target: MB of text parsed per second per parsing thread (issue 16).
constexpr double kImportTargetMBps = 100.0;

// A whole number >= min; CLI11's own range checks print the bound as a 300-digit double.
CLI::Validator at_least(uint64_t min) {
  return CLI::Validator(
      [min](std::string& value) {
        const bool digits = !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
        if (digits && value.size() < 20 && std::stoull(value) >= min) return std::string();
        return fmt::format("{} is not a whole number >= {}", value, min);
      },
      "");  // no type decoration in --help: the option texts say what is allowed
}

struct GenOptions {
  d::GenerateOptions gen;
};

struct VerifyOptions {
  std::string dir;
};

struct StatsOptions {
  std::string dir;
};

struct ImportOptions {
  d::CriteoImportOptions imp;
  std::string map = "hash";
};

struct ExportOptions {
  std::string dir, out, split = "train";
  uint64_t limit = 0;
};

void run_import(ImportOptions& o) {
  o.imp.map = o.map == "vocabulary" ? d::CategoricalMap::kVocabulary : d::CategoricalMap::kHash;
  fmt::print("ddplab data import criteo: {} file(s), categoricals by {}, test fraction {:g} -> {}\n",
             o.imp.inputs.size(), o.map, o.imp.test_fraction, o.imp.out_dir);
  const d::CriteoImportResult r = d::import_criteo(o.imp);
  const bool ok = r.mb_per_s_per_thread >= kImportTargetMBps;
  fmt::print("  lines                  {} ({} malformed, skipped)\n", r.lines, r.skipped);
  fmt::print("  samples                train {}, test {}\n", r.meta.train_count, r.meta.test_count);
  fmt::print("  dense values clamped   {} (above {}, the shard format's range)\n", r.clamped, d::kMaxDenseCount);
  fmt::print("  click rate             train {:.4f}, test {:.4f}\n", r.meta.train_click_rate, r.meta.test_click_rate);
  fmt::print("  text                   {:.1f} MB in {:.3f} s of parsing on {} thread(s), {:.3f} s in all\n",
             static_cast<double>(r.bytes) / 1e6, r.parse_seconds, r.threads, r.seconds);
  fmt::print("  MB/s per thread        {:.1f} (target >= {:.0f}) {}\n", r.mb_per_s_per_thread, kImportTargetMBps,
             ok ? "OK" : "FAILED");
  fmt::print("wrote {} train and {} test shards and meta.json to {} (no teacher: its fields are 0)\n",
             r.meta.train_shards.size(), r.meta.test_shards.size(), o.imp.out_dir);
  fmt::print("import rate: {}\n", ok ? "OK" : "FAILED");
}

void run_export(const ExportOptions& o) {
  const uint64_t n = d::export_tsv(o.dir, o.split == "test" ? d::Split::kTest : d::Split::kTrain, o.out, o.limit);
  fmt::print("wrote {} {} samples of {} to {} in Criteo's layout\n", n, o.split, o.dir, o.out);
}

void run_gen(const GenOptions& o) {
  const d::GenerateOptions& g = o.gen;
  fmt::print("ddplab data gen: {} train + {} test samples, seed {}, shards of {} records -> {}\n", g.train, g.test,
             g.seed, g.shard_size, g.out_dir);
  const d::GenerateResult r = d::generate(g, [](const std::vector<float>& probs, const std::vector<float>& labels) {
    return std::make_pair(metrics::exact_auc(probs, labels), metrics::log_loss(probs, labels));
  });
  const d::Metadata& m = r.meta;
  const bool ok = r.samples_per_s_per_thread >= kTargetRatePerThread;
  fmt::print("  generator setup        {:.3f} s (teacher and bias calibration, not timed below)\n", r.setup_seconds);
  fmt::print("  threads                {}\n", r.threads);
  fmt::print(
      "  generate + write       {:.3f} s (of which hashing, writing and fsync: {:.3f} s summed over "
      "threads, fsync overlapped)\n",
      r.seconds, r.write_seconds);
  fmt::print("  samples/s per thread   {:.0f} (target >= {:.0f}) {}\n", r.samples_per_s_per_thread,
             kTargetRatePerThread, ok ? "OK" : "FAILED");
  fmt::print("  generator alone        {:.0f} samples per CPU second in fill (excludes waiting and I/O)\n",
             r.fill_samples_per_s_per_thread);
  fmt::print("  teacher bias           {:.4f}\n", m.teacher_bias);
  fmt::print("  teacher test AUC       {:.4f}\n", m.teacher_test_auc);
  fmt::print("  teacher test log-loss  {:.4f}\n", m.teacher_test_logloss);
  fmt::print("  click rate             train {:.4f}, test {:.4f}\n", m.train_click_rate, m.test_click_rate);
  fmt::print("wrote {} train and {} test shards and meta.json to {}\n", m.train_shards.size(), m.test_shards.size(),
             g.out_dir);
  fmt::print("generation rate: {}\n", ok ? "OK" : "FAILED");
}

void run_verify(const VerifyOptions& o) {
  // Dataset with verify_checksums is the full check: header, size, every record's fields, the
  // checksum, and each shard's seed and first index against meta.json. Any failure throws a
  // DataError naming the file (and offset), which main() prints with exit status 1.
  uint64_t shards = 0;
  uint64_t samples = 0;
  uint64_t seed = 0;
  for (const d::Split split : {d::Split::kTrain, d::Split::kTest}) {
    const d::Dataset ds(o.dir, split, /*verify_checksums=*/true);
    for (const d::ShardReader& s : ds.shards()) {
      fmt::print("OK  {:<6} {}  {} records from index {}, checksum {:016x}\n", d::split_name(split), s.path(), s.size(),
                 s.header().first_index, s.header().checksum);
    }
    shards += ds.shards().size();
    samples += ds.size();
    seed = ds.metadata().seed;
  }
  fmt::print("OK: {}: {} shards, {} samples, seed {}; headers, records and checksums are valid\n", o.dir, shards,
             samples, seed);
}

void run_stats(const StatsOptions& o) {
  const d::Dataset train(o.dir, d::Split::kTrain);
  const d::Dataset test(o.dir, d::Split::kTest);
  const d::SplitStats tr = d::compute_stats(train);
  const d::SplitStats te = d::compute_stats(test);
  const d::Metadata& m = train.metadata();
  fmt::print("data set {} (seed {}; teacher bias {:.4f}, test AUC {:.4f}, log-loss {:.4f})\n\n", o.dir, m.seed,
             m.teacher_bias, m.teacher_test_auc, m.teacher_test_logloss);
  fmt::print("{:<8}{:>12}{:>12}\n", "split", "count", "click rate");
  fmt::print("{:<8}{:>12}{:>12.4f}\n", "train", tr.count, tr.click_rate);
  fmt::print("{:<8}{:>12}{:>12.4f}\n\n", "test", te.count, te.click_rate);

  fmt::print("dense inputs log1p(x_j):\n");
  fmt::print("{:<8}{:>12}{:>12}{:>12}{:>12}\n", "j", "train mean", "train std", "test mean", "test std");
  for (int j = 0; j < d::kNumDense; ++j) {
    fmt::print("{:<8}{:>12.4f}{:>12.4f}{:>12.4f}{:>12.4f}\n", j, tr.dense_mean[j], tr.dense_std[j], te.dense_mean[j],
               te.dense_std[j]);
  }
  fmt::print("\ncategorical fields (top-id share: fraction of samples with the most frequent id):\n");
  fmt::print("{:<8}{:>12}{:>17}{:>17}{:>17}{:>17}\n", "field", "cardinality", "train distinct", "train top share",
             "test distinct", "test top share");
  for (int f = 0; f < d::kNumSparse; ++f) {
    fmt::print("{:<8}{:>12}{:>17}{:>17.4f}{:>17}{:>17.4f}\n", f, d::kCardinality[f], tr.distinct_ids[f],
               tr.top_id_share[f], te.distinct_ids[f], te.top_id_share[f]);
  }
}

}  // namespace

void setup_data(CLI::App& app) {
  CLI::App* data =
      app.add_subcommand("data", "Generate, verify, summarise, import and export the data sets of the labs");
  data->require_subcommand(1);

  auto gen_opts = std::make_shared<GenOptions>();
  CLI::App* gen = data->add_subcommand("gen",
                                       "Generate the data set (docs/concepts/workload.md); also benchmarks the "
                                       "generator (target 500k samples/s/thread)");
  gen->add_option("--out", gen_opts->gen.out_dir, "Output directory")->required();
  gen->add_option("--train", gen_opts->gen.train, "Training samples (indices [0, N))")
      ->capture_default_str()
      ->check(at_least(1));
  gen->add_option("--test", gen_opts->gen.test, "Test samples (indices [2^32, 2^32 + M))")
      ->capture_default_str()
      ->check(at_least(1));
  gen->add_option("--seed", gen_opts->gen.seed, "Data seed")->capture_default_str()->check(at_least(0));
  gen->add_option("--shard-size", gen_opts->gen.shard_size, "Records per shard (the last may hold fewer)")
      ->capture_default_str()
      ->check(at_least(1));
  gen->add_option("--threads", gen_opts->gen.threads,
                  "Generator threads, at most one per shard (0: all hardware threads)")
      ->capture_default_str()
      ->check(at_least(0));
  gen->callback([gen_opts] { run_gen(*gen_opts); });

  auto verify_opts = std::make_shared<VerifyOptions>();
  CLI::App* verify =
      data->add_subcommand("verify", "Check every shard of a data set: header, size, record fields and checksum");
  verify->add_option("DIR", verify_opts->dir, "Data set directory")->required();
  verify->callback([verify_opts] { run_verify(*verify_opts); });

  auto stats_opts = std::make_shared<StatsOptions>();
  CLI::App* stats = data->add_subcommand("stats", "Print per-split statistics of a data set");
  stats->add_option("DIR", stats_opts->dir, "Data set directory")->required();
  stats->callback([stats_opts] { run_stats(*stats_opts); });

  CLI::App* import = data->add_subcommand("import", "Convert click logs into the kit's shards");
  import->require_subcommand(1);
  auto import_opts = std::make_shared<ImportOptions>();
  CLI::App* criteo = import->add_subcommand(
      "criteo",
      "Criteo-layout TSV (label, I1-I13, C1-C26; plain or gzip) with DLRM's preprocessing; also benchmarks the "
      "parser (target 100 MB/s of text per thread)");
  criteo->add_option("FILE", import_opts->imp.inputs, "Input files, read in order as one stream")->required();
  criteo->add_option("--out", import_opts->imp.out_dir, "Output directory")->required();
  criteo
      ->add_option("--categoricals", import_opts->map,
                   "hash (hash mod the field's cardinality) or vocabulary (the most frequent hashes get ids)")
      ->capture_default_str()
      ->check(CLI::IsMember({"hash", "vocabulary"}));
  criteo->add_option("--min-count", import_opts->imp.min_count, "vocabulary: hashes seen fewer times map to id 0")
      ->capture_default_str()
      ->check(at_least(1));
  criteo
      ->add_option("--test-fraction", import_opts->imp.test_fraction,
                   "The last lines of the stream, this fraction of them, become the test split")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
  criteo->add_flag("--skip-malformed", import_opts->imp.skip_malformed,
                   "Count and skip malformed lines instead of stopping at the first");
  criteo->add_option("--threads", import_opts->imp.threads, "Parsing threads (0: all hardware threads)")
      ->capture_default_str()
      ->check(at_least(0));
  criteo->add_option("--shard-size", import_opts->imp.shard_size, "Records per shard (the last may hold fewer)")
      ->capture_default_str()
      ->check(at_least(1));
  criteo->callback([import_opts] { run_import(*import_opts); });

  CLI::App* exp = data->add_subcommand("export", "Write a data set in another format");
  exp->require_subcommand(1);
  auto export_opts = std::make_shared<ExportOptions>();
  CLI::App* tsv = exp->add_subcommand("tsv", "One split in Criteo's TSV layout (ids as 8 hex digits), atomically");
  tsv->add_option("DIR", export_opts->dir, "Data set directory")->required();
  tsv->add_option("--out", export_opts->out, "Output file")->required();
  tsv->add_option("--split", export_opts->split, "train or test")
      ->capture_default_str()
      ->check(CLI::IsMember({"train", "test"}));
  tsv->add_option("--limit", export_opts->limit, "Only the first N samples (0: all)")->capture_default_str();
  tsv->callback([export_opts] { run_export(*export_opts); });
}

}  // namespace ddplab::tools

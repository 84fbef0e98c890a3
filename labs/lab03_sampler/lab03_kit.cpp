// Lab 03's apparatus (see lab03_kit.h). Not edited by students.
#include "lab03_kit.h"

#include <algorithm>

#include <fmt/format.h>

#include "ddplab/dist/agree.h"
#include "ddplab/log.h"
#include "ddplab/report.h"

namespace lab03 {

using ddplab::SampleLedger;

SamplerConfig Flags::config(uint64_t seed) const {
  SamplerConfig c = sampler;
  c.seed = seed;
  c.mode = parse_shard_mode(shard);
  c.tail = parse_tail_policy(tail);
  return c;
}

void add_flags(ddplab::LabFlags& f, Flags& flags) {
  f.option("--shard", flags.shard, "How ranks split the order: strided or contiguous")
      ->check(CLI::IsMember({"strided", "contiguous"}));
  f.option("--tail", flags.tail, "Samples that do not fill a last round: pad or drop")
      ->check(CLI::IsMember({"pad", "drop"}));
  f.flag("--shuffle,!--no-shuffle", flags.sampler.shuffle, "Reshuffle every epoch (--no-shuffle: keep the base order)");
  f.flag("--stratify", flags.sampler.stratify, "Give every rank the same click rate (03.4)");
  f.option("--order", flags.order,
           "Base order of the samples: natural, or label-sorted (click logs grouped by outcome)")
      ->check(CLI::IsMember({"natural", "label-sorted"}));
  f.option("--adam", flags.adam,
           "Adam implementation: fused (the kit's one pass, row-sparse embedding gradients) or torch "
           "(torch::optim::Adam, dense gradients)")
      ->check(CLI::IsMember({"fused", "torch"}));
}

void add_probes(ddplab::LabProgram& program, const Flags& flags) {
  program.probe("03.1", "shard",
                [&flags](ddplab::ProbeContext&) { (void)shard({0}, 0, 1, parse_shard_mode(flags.shard)); });
  program.probe("03.2", "epoch_order",
                [&flags](ddplab::ProbeContext&) { (void)epoch_order(1, 0, 0, flags.sampler.shuffle); });
  program.probe("03.3", "fit_tail",
                [&flags](ddplab::ProbeContext&) { (void)fit_tail({0}, 1, parse_tail_policy(flags.tail)); });
  program.probe("03.4", "stratify", [&flags](ddplab::ProbeContext&) {
    (void)stratify({0, 1}, {0, 1}, 1, parse_shard_mode(flags.shard));
  });
}

nlohmann::json click_rates(ddplab::dist::Communicator& comm, const ddplab::LabRun& run, int64_t epoch,
                           const std::vector<uint64_t>& mine) {
  uint64_t positives = 0;
  for (uint64_t i : mine) positives += run.train()[i].label != 0;
  nlohmann::json out = nlohmann::json::array();
  std::string line;
  for (const auto& r : ddplab::dist::allgather_u64(comm, {mine.size(), positives})) {
    const double rate = r[0] ? static_cast<double>(r[1]) / static_cast<double>(r[0]) : 0.0;
    line += fmt::format("{}rank {}: {} samples, click rate {:.4f}", out.empty() ? "" : "; ", out.size(), r[0], rate);
    out.push_back({{"samples", r[0]}, {"positives", r[1]}, {"click_rate", rate}});
  }
  ddplab::log::info0("epoch {}: {}", epoch, line);
  return out;
}

Coverage coverage_of(const std::vector<std::vector<uint64_t>>& seen, const std::vector<uint64_t>& padded,
                     const std::vector<uint64_t>& dropped, uint64_t samples_per_rank, uint64_t n) {
  Coverage c;
  uint64_t digest_sum = 0;
  for (const auto& s : seen) {
    c.processed += s.at(0);
    digest_sum += s.at(1);
  }
  uint64_t expected = SampleLedger::range_set_digest(0, n);
  for (uint64_t i : padded) expected += SampleLedger::hash(i);
  for (uint64_t i : dropped) expected -= SampleLedger::hash(i);
  c.complete = c.processed == static_cast<uint64_t>(seen.size()) * samples_per_rank;
  c.covered = c.complete && digest_sum == expected;
  return c;
}

void record_sampler(ddplab::LabRun& run, const DistributedSampler& sampler, const std::string& order) {
  nlohmann::json sj = sampler.to_json();
  sj["order"] = order;
  run.report().json()["sampler"] = sj;
}

void epoch_coverage(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const ddplab::EpochSummary& done,
                    const DistributedSampler& sampler, uint64_t n, const nlohmann::json& rates) {
  const auto seen = ddplab::dist::allgather_u64(comm, {done.samples.count(), done.samples.set_digest()});
  const Coverage c = coverage_of(seen, sampler.padded_indices(), sampler.dropped_indices(), sampler.num_samples(), n);
  const uint64_t unique = c.covered ? n - sampler.dropped() : 0;
  const double secs = std::max(done.seconds, 1e-9);
  const int64_t epoch = done.epoch;
  nlohmann::json ej = {{"epoch", epoch},
                       {"seconds", secs},
                       {"processed_all_ranks", c.processed},
                       {"covered", c.covered},
                       {"order_digest", ddplab::hex64(sampler.order_digest())},
                       {"padded_indices", sampler.padded_indices()},
                       {"dropped_indices", sampler.dropped_indices()}};
  if (c.covered) ej["unique"] = unique;
  ej["per_rank"] = rates;
  nlohmann::json& sj = run.report().json()["sampler"];
  sj["epochs"].push_back(ej);
  for (const char* key : {"per_rank", "padded_indices", "dropped_indices"}) sj[key] = ej[key];
  if (!c.complete) {
    ddplab::log::info0("epoch {}: partial epoch (--max-steps): {} samples processed across {} rank(s) in {:.1f} s",
                       epoch, c.processed, seen.size(), secs);
    return;
  }
  run.report().verdict(
      "every_sample_once", c.covered,
      c.covered ? fmt::format("epoch {}: every sample exactly once across {} rank(s) ({} padded, {} dropped): {} "
                              "processed, {} unique in {:.1f} s = {:.0f} processed, {:.0f} unique samples/s",
                              epoch, seen.size(), sampler.padding(), sampler.dropped(), c.processed, unique, secs,
                              c.processed / secs, unique / secs)
                : fmt::format("epoch {}: the ranks' samples do NOT cover the training set exactly once: {} processed "
                              "for {} training samples (duplicates across ranks?)",
                              epoch, c.processed, n),
      {{"epoch", epoch}, {"processed", c.processed}, {"unique", unique}});
}

}  // namespace lab03

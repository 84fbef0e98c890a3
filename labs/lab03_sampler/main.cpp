// Lab 03 driver: data-parallel DeepFM with the student's DistributedSampler. Every rank joins the
// job, starts from rank 0's weights, takes its shard of one shared per-epoch order and averages
// gradients (the runtime's sparse sync: embedding rows by all-gather, the MLP by a bucketed
// all-reduce); the run shows, as numbers, that every sample is seen exactly once per epoch, how
// the tail was evened out, and each rank's click rate.
// Not edited by students.
#include <memory>

#include <fmt/format.h>

#include "sampler.h"

#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/train.h"

namespace {

using namespace ddplab;

/// Each rank's share of clicks this epoch (03.4's lesson), gathered, printed and returned for the
/// report. Collective.
nlohmann::json click_rates(dist::Communicator& comm, const LabRun& run, int64_t epoch,
                           const std::vector<uint64_t>& mine) {
  uint64_t positives = 0;
  for (uint64_t i : mine) positives += run.train()[i].label != 0;
  nlohmann::json out = nlohmann::json::array();
  std::string line;
  for (const auto& r : dist::allgather_u64(comm, {mine.size(), positives})) {
    const double rate = r[0] ? static_cast<double>(r[1]) / static_cast<double>(r[0]) : 0.0;
    line += fmt::format("{}rank {}: {} samples, click rate {:.4f}", out.empty() ? "" : "; ", out.size(), r[0], rate);
    out.push_back({{"samples", r[0]}, {"positives", r[1]}, {"click_rate", rate}});
  }
  log::info0("epoch {}: {}", epoch, line);
  return out;
}

/// The lesson in numbers: did the ranks together see every sample exactly once this epoch? The
/// ranks' set digests must add up to the digest of [0, n), plus the padded samples (seen twice),
/// minus the dropped ones (never seen). Collective. Prints the verdict and returns the report's
/// entry for the epoch.
nlohmann::json epoch_coverage(dist::Communicator& comm, const EpochSummary& done,
                              const lab03::DistributedSampler& sampler, uint64_t n) {
  const auto seen = dist::allgather_u64(comm, {done.samples.count(), done.samples.set_digest()});
  uint64_t processed = 0, digest_sum = 0;
  for (const auto& s : seen) {
    processed += s[0];
    digest_sum += s[1];
  }
  uint64_t expected = SampleLedger::range_set_digest(0, n);
  for (uint64_t i : sampler.padded_indices()) expected += SampleLedger::hash(i);
  for (uint64_t i : sampler.dropped_indices()) expected -= SampleLedger::hash(i);
  const bool complete = processed == static_cast<uint64_t>(seen.size()) * sampler.num_samples();
  const bool covered = complete && digest_sum == expected;
  const uint64_t unique = covered ? n - sampler.dropped() : 0;
  const double secs = std::max(done.seconds, 1e-9);
  const int64_t epoch = done.epoch;

  nlohmann::json ej = {{"epoch", epoch},
                       {"seconds", secs},
                       {"processed_all_ranks", processed},
                       {"covered", covered},
                       {"order_digest", hex64(sampler.order_digest())},
                       {"padded_indices", sampler.padded_indices()},
                       {"dropped_indices", sampler.dropped_indices()}};
  if (covered) {
    ej["unique"] = unique;
    log::info0(
        "epoch {}: every sample exactly once across {} rank(s) ({} padded, {} dropped): {} processed, {} "
        "unique in {:.1f} s = {:.0f} processed, {:.0f} unique samples/s",
        epoch, seen.size(), sampler.padding(), sampler.dropped(), processed, unique, secs, processed / secs,
        unique / secs);
  } else if (complete) {
    log::info0(
        "epoch {}: the ranks' samples do NOT cover the training set exactly once: {} processed for {} "
        "training samples (duplicates across ranks?)",
        epoch, processed, n);
  } else {
    log::info0("epoch {}: partial epoch (--max-steps): {} samples processed across {} rank(s) in {:.1f} s", epoch,
               processed, seen.size(), secs);
  }
  return ej;
}

}  // namespace

int main(int argc, char** argv) {
  lab03::SamplerConfig cfg;
  std::string shard = "strided", tail = "pad", order = "natural";
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 03: a DistributedSampler — every sample once per epoch, a fresh order, even tails";
  program.add_flags = [&](LabFlags& f) {
    f.option("--shard", shard, "How ranks split the order: strided or contiguous")
        ->check(CLI::IsMember({"strided", "contiguous"}));
    f.option("--tail", tail, "Samples that do not fill a last round: pad or drop")
        ->check(CLI::IsMember({"pad", "drop"}));
    f.flag("--shuffle,!--no-shuffle", cfg.shuffle, "Reshuffle every epoch (--no-shuffle: keep the base order)");
    f.flag("--stratify", cfg.stratify, "Give every rank the same click rate (03.4)");
    f.option("--order", order, "Base order of the samples: natural, or label-sorted (click logs grouped by outcome)")
        ->check(CLI::IsMember({"natural", "label-sorted"}));
  };
  program.body = [&](LabRun& run) {
    cfg.seed = run.options().seed;
    cfg.mode = lab03::parse_shard_mode(shard);
    cfg.tail = lab03::parse_tail_policy(tail);
    const uint64_t n = run.train_size();
    auto comm = run.join();

    // Each exercise once on a tiny input, in id order, so that a skeleton run lists every missing
    // one (03.4 is otherwise used only with --stratify); the sampler carries on without them.
    run.attempt([&] { (void)lab03::shard({0}, 0, 1, cfg.mode); });
    run.attempt([&] { (void)lab03::epoch_order(1, cfg.seed, 0, cfg.shuffle); });
    run.attempt([&] { (void)lab03::fit_tail({0}, 1, cfg.tail); });
    run.attempt([&] { (void)lab03::stratify({0, 1}, {0, 1}, 1, cfg.mode); });
    auto on_missing = [&](const NotImplemented& e) { run.not_attempted(e); };

    const bool sorted = order == "label-sorted";  // click logs grouped by outcome
    const std::vector<uint8_t> labels =
        cfg.stratify || sorted ? lab03::click_labels(run.train(), n) : std::vector<uint8_t>{};
    const std::vector<uint64_t> base = sorted ? lab03::label_sorted_order(labels) : std::vector<uint64_t>{};
    lab03::DistributedSampler sampler(n, run.rank(), run.world_size(), cfg, base, labels, on_missing);

    DeepFM model;
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kSparse, *comm, model->parameters());

    // Equal step counts on every rank are what keeps the collectives matched (03.3).
    dist::require_same_across_ranks(*comm, sampler.num_samples(), "sample counts",
                                    "the job would hang at a collective when the shorter rank runs out");
    const int64_t steps_per_epoch = run.steps_per_epoch(sampler.num_samples());
    run.start_training(model.ptr(), steps_per_epoch);
    log::info0("sampler: {}, order {}; {} steps per epoch", sampler.describe(), order, steps_per_epoch);

    nlohmann::json sj = sampler.to_json();
    sj["order"] = order;
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      sampler.set_epoch(epoch);  // a new shared order every epoch
      const nlohmann::json rates = click_rates(*comm, run, epoch, sampler.indices());
      data::BatchLoader loader(run.train(), sampler.indices(), run.batch(), run.device());
      const EpochSummary& done = run.run_epoch(epoch, loader, [&](const data::Batch& b) {
        return train_step(model, optimizer, b, run.timer(), sync.get());
      });
      sj["epochs"].push_back(epoch_coverage(*comm, done, sampler, n));
      sj["epochs"].back()["per_rank"] = rates;
    }
    // Per-rank click rates and padding of the last epoch, at the top for a quick look.
    if (!sj["epochs"].empty()) {
      for (const char* key : {"per_rank", "padded_indices", "dropped_indices"}) sj[key] = sj["epochs"].back()[key];
    }

    std::string digest;
    const auto params = dist::compare_parameters(*comm, *model, &digest);
    sj["params_identical"] = params.same();
    log::info0("parameters at the end: {} (rank 0: {})", params.describe(), digest);
    run.report().json()["sampler"] = sj;

    run.evaluate_on_rank0(model, *comm);
  };
  return run_lab(program, argc, argv);
}

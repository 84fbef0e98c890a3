// Lab 03 driver: data-parallel DeepFM with the student's DistributedSampler. Every rank joins the
// job, starts from rank 0's weights, takes its shard of one shared per-epoch order and averages
// gradients (the runtime's sparse sync: embedding rows by all-gather, the MLP by a bucketed
// all-reduce); the run shows, as numbers, that every sample is seen exactly once per epoch, how
// the tail was evened out, and each rank's click rate.
// Not edited by students.
#include <algorithm>
#include <memory>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "lab03.h"

#include "ddplab/dist/grad_sync.h"
#include "ddplab/dist/process_group.h"
#include "ddplab/evaluate.h"
#include "ddplab/log.h"
#include "ddplab/train.h"

namespace {

using ddplab::dist::Communicator;

/// Every rank's `mine` (same length on every rank), in rank order.
std::vector<std::vector<uint64_t>> gather_u64(Communicator& comm, const std::vector<uint64_t>& mine) {
  const auto n = static_cast<int64_t>(mine.size());
  torch::Tensor in = torch::empty({n}, torch::kInt64);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int64_t>(mine[static_cast<size_t>(i)]);
  std::vector<torch::Tensor> out(static_cast<size_t>(comm.size()));
  for (auto& o : out) o = torch::empty({n}, torch::kInt64);
  comm.allgather(out, in);
  std::vector<std::vector<uint64_t>> all;
  for (const auto& o : out) {
    std::vector<uint64_t> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<uint64_t>(o[i].item<int64_t>()));
    all.push_back(std::move(v));
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddplab;
  std::string shard_name = "strided", tail_name = "pad", order_name = "natural";
  bool no_shuffle = false, stratify = false;
  LabProgram program;
  program.name = "lab03";
  program.description = "Lab 03: a DistributedSampler — every sample once per epoch, a fresh order, even tails";
  program.add_flags = [&](CLI::App& app) {
    app.add_option("--shard", shard_name, "How ranks split the order: strided or contiguous")->capture_default_str();
    app.add_option("--tail", tail_name, "Samples that do not fill a last round: pad or drop")->capture_default_str();
    app.add_flag("--no-shuffle", no_shuffle, "Keep the base order every epoch (no reshuffle)");
    app.add_flag("--stratify", stratify, "Give every rank the same click rate (03.4)");
    app.add_option("--order", order_name, "Base order of the samples: natural, or label-sorted (click logs grouped by outcome)")
        ->capture_default_str();
  };
  program.body = [&](LabRun& run) {
    lab03::SamplerConfig cfg;
    cfg.shuffle = !no_shuffle;
    cfg.seed = run.options().seed;
    cfg.mode = lab03::parse_shard_mode(shard_name);
    cfg.tail = lab03::parse_tail_policy(tail_name);
    cfg.stratify = stratify;
    if (order_name != "natural" && order_name != "label-sorted") {
      throw ConfigError(fmt::format("--order '{}': expected natural or label-sorted", order_name));
    }
    const int world = run.world_size();
    const int rank = run.rank();
    const uint64_t n = run.train_size();
    const int64_t batch = run.options().batch;

    dist::ProcessGroupOptions po;
    po.timeout = std::chrono::milliseconds(static_cast<int64_t>(run.options().comm_timeout * 1000));
    std::shared_ptr<dist::ProcessGroup> comm = dist::ProcessGroup::join(run.environment(), run.device(), po);
    run.set_communicator(comm);

    // A missing exercise is reported once and the sampler carries on without it.
    std::set<std::string> missing;
    auto on_missing = [&](const NotImplemented& e) {
      if (missing.insert(e.exercise()).second) run.not_attempted(e);
    };
    // Probe each exercise once on a tiny input, in id order, so a skeleton run lists them all
    // (03.4 is otherwise only used with --stratify).
    auto probe = [&](auto&& call) {
      try {
        call();
      } catch (const NotImplemented& e) {
        on_missing(e);
      }
    };
    probe([&] { (void)lab03::shard({0}, 0, 1, cfg.mode); });
    probe([&] { (void)lab03::epoch_order(1, cfg.seed, 0, cfg.shuffle); });
    probe([&] { (void)lab03::fit_tail({0}, 1, cfg.tail); });
    probe([&] { (void)lab03::stratify({0, 1}, {0, 1}, 1, cfg.mode); });

    std::vector<uint8_t> labels;
    std::vector<uint64_t> base;
    if (stratify || order_name == "label-sorted") {
      labels.resize(n);
      for (uint64_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(run.train()[i].label != 0);
    }
    if (order_name == "label-sorted") {
      // Click logs grouped by outcome: all non-clicks, then all clicks, each in id order.
      base = data::sequential_order(n);
      std::stable_sort(base.begin(), base.end(), [&](uint64_t a, uint64_t b) { return labels[a] < labels[b]; });
    }
    lab03::DistributedSampler sampler(n, rank, world, cfg, base, labels, on_missing);

    DeepFM model;
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kSparse, *comm, model->parameters());

    // Equal step counts on every rank are what keeps the collectives matched (03.3).
    const auto counts = gather_u64(*comm, {sampler.num_samples()});
    for (const auto& c : counts) {
      if (c[0] != counts[0][0]) {
        throw Error(fmt::format("ranks hold different sample counts ({} on rank 0, {} here): the job would hang at "
                                "a collective when the shorter rank runs out",
                                counts[0][0], c[0]));
      }
    }
    const int64_t steps_per_epoch = (static_cast<int64_t>(sampler.num_samples()) + batch - 1) / batch;
    run.start_training(model.ptr(), steps_per_epoch);
    log::info0("sampler: shard {}, tail {} ({} padded, {} dropped), shuffle {}, stratify {}, order {}; {} samples x {} "
               "rank(s), {} steps per epoch",
               lab03::shard_mode_name(cfg.mode), lab03::tail_policy_name(cfg.tail), sampler.padding(),
               sampler.dropped(), cfg.shuffle ? "on" : "off", stratify ? "on" : "off", order_name,
               sampler.num_samples(), world, steps_per_epoch);

    nlohmann::json sj = {{"shard", lab03::shard_mode_name(cfg.mode)},
                         {"tail", lab03::tail_policy_name(cfg.tail)},
                         {"shuffle", cfg.shuffle},
                         {"stratify", stratify},
                         {"order", order_name},
                         {"num_samples", sampler.num_samples()},
                         {"padded", sampler.padding()},
                         {"dropped", sampler.dropped()}};
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      sampler.set_epoch(epoch);  // a new shared order every epoch
      const auto& mine = sampler.indices();
      uint64_t positives = 0;
      for (uint64_t i : mine) positives += run.train()[i].label != 0;
      const auto per_rank = gather_u64(*comm, {mine.size(), positives});

      run.begin_epoch(epoch);
      SampleLedger ledger;
      data::BatchLoader loader(run.train(), mine, batch, run.device());
      data::Batch b;
      while (run.next_batch(loader, b)) {
        auto& timer = run.timer();
        optimizer.zero_grad();
        torch::Tensor loss;
        {
          auto s = timer.scope(Phase::kForward);
          loss = torch::binary_cross_entropy_with_logits(model->forward(b.dense, b.rows), b.labels);
        }
        sync->before_backward();
        {
          auto s = timer.scope(Phase::kBackward);
          loss.backward();
        }
        {
          auto s = timer.scope(Phase::kComm);
          sync->finish();
        }
        {
          auto s = timer.scope(Phase::kOptimizer);
          optimizer.step();
        }
        ledger.add(b.indices);
        run.end_step(b, loss.item<double>());
      }
      run.end_epoch();

      // Coverage: the ranks' set digests add up to the digest of [0, n), plus the padded samples
      // seen twice, minus the dropped ones never seen.
      const double secs = run.report().json()["epochs"].back()["seconds"].get<double>();
      const auto seen = gather_u64(*comm, {ledger.count(), ledger.set_digest()});
      uint64_t processed = 0, digest_sum = 0;
      for (const auto& s : seen) {
        processed += s[0];
        digest_sum += s[1];
      }
      uint64_t expected = SampleLedger::range_set_digest(0, n);
      for (uint64_t i : sampler.padded_indices()) expected += SampleLedger::hash(i);
      for (uint64_t i : sampler.dropped_indices()) expected -= SampleLedger::hash(i);
      const bool complete = processed == static_cast<uint64_t>(per_rank.size()) * mine.size();
      const bool covered = complete && digest_sum == expected;
      const uint64_t unique = covered ? n - sampler.dropped() : 0;

      nlohmann::json ej = {{"epoch", epoch},
                           {"seconds", secs},
                           {"processed_all_ranks", processed},
                           {"covered", covered},
                           {"padded_indices", sampler.padded_indices()},
                           {"dropped_indices", sampler.dropped_indices()}};
      std::string rates;
      for (size_t r = 0; r < per_rank.size(); ++r) {
        const double rate = per_rank[r][0] ? static_cast<double>(per_rank[r][1]) / static_cast<double>(per_rank[r][0]) : 0.0;
        ej["per_rank"].push_back({{"samples", per_rank[r][0]}, {"positives", per_rank[r][1]}, {"click_rate", rate}});
        rates += fmt::format("{}rank {}: {} samples, click rate {:.4f}", r ? "; " : "", r, per_rank[r][0], rate);
      }
      log::info0("epoch {}: {}", epoch, rates);
      if (covered) {
        ej["unique"] = unique;
        log::info0("epoch {}: every sample exactly once across {} rank(s) ({} padded, {} dropped): {} processed, {} "
                   "unique in {:.1f} s = {:.0f} processed, {:.0f} unique samples/s",
                   epoch, world, sampler.padding(), sampler.dropped(), processed, unique, secs,
                   secs > 0 ? static_cast<double>(processed) / secs : 0.0,
                   secs > 0 ? static_cast<double>(unique) / secs : 0.0);
      } else if (complete) {
        log::info0("epoch {}: the ranks' samples do NOT cover the training set exactly once: {} processed for {} "
                   "training samples (duplicates across ranks?)",
                   epoch, processed, n);
      } else {
        log::info0("epoch {}: partial epoch (--max-steps): {} samples processed across {} rank(s) in {:.1f} s", epoch,
                   processed, world, secs);
      }
      sj["epochs"].push_back(ej);
    }
    // Per-rank click rates and padding of the last epoch, at the top for a quick look.
    if (!sj["epochs"].empty()) {
      sj["per_rank"] = sj["epochs"].back()["per_rank"];
      sj["padded_indices"] = sj["epochs"].back()["padded_indices"];
      sj["dropped_indices"] = sj["epochs"].back()["dropped_indices"];
    }

    const std::string digest = parameter_digest(*model);
    const auto digests = gather_u64(*comm, {std::stoull(digest, nullptr, 16)});
    bool same = true;
    for (const auto& d : digests) same = same && d[0] == digests[0][0];
    sj["params_identical"] = same;
    log::info0("parameters at the end: {} on all {} rank(s) (rank 0: {})", same ? "identical" : "DIFFERENT", world,
               digest);
    run.report().json()["sampler"] = sj;

    // Every rank holds the same model; rank 0 evaluates for the job.
    if (rank == 0) run.set_eval(evaluate_model(model, run.test(), run.eval_size(), batch, run.device()));
    comm->barrier();
  };
  return run_lab(program, argc, argv);
}

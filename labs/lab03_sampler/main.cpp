// Lab 03 driver: data-parallel DeepFM with the student's DistributedSampler. Every rank joins the
// job, starts from rank 0's weights, takes its shard of one shared per-epoch order and averages
// gradients (the runtime's sparse sync: embedding rows by all-gather, the MLP by a bucketed
// all-reduce); the run shows, as numbers, that every sample is seen exactly once per epoch, how
// the tail was evened out, and each rank's click rate (lab03_kit.h). Adam is the kit's one-pass
// FusedAdam with row-sparse embedding gradients (--adam torch: torch's Adam on dense gradients; the
// same numbers, a costlier step on every rank: docs/concepts/gradient-sync.md).
// Not edited by students.
#include "lab03_kit.h"
#include "sampler.h"

#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/fused_adam.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/train.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  lab03::Flags f;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 03: a DistributedSampler — every sample once per epoch, a fresh order, even tails";
  program.add_flags = [&](LabFlags& flags) { lab03::add_flags(flags, f); };
  lab03::add_probes(program, f);  // each exercise once, so a skeleton run lists every missing one
  program.body = [&](LabRun& run) {
    const uint64_t n = run.train_size();
    auto comm = run.join();
    // The sampler: the student's four exercises composed (sampler.h); a stub met mid-run is
    // recorded as not attempted and the sampler carries on without it.
    const bool sorted = f.order == "label-sorted";  // click logs grouped by outcome
    const auto cfg = f.config(run.options().seed);
    const std::vector<uint8_t> labels =
        cfg.stratify || sorted ? lab03::click_labels(run.train(), n) : std::vector<uint8_t>{};
    const std::vector<uint64_t> base = sorted ? lab03::label_sorted_order(labels) : std::vector<uint64_t>{};
    lab03::DistributedSampler sampler(n, run.rank(), run.world_size(), cfg, base, labels,
                                      [&](const NotImplemented& e) { run.not_attempted(e); });

    DeepFMOptions model_options;
    // Row-sparse table gradients need the one-pass Adam on the CPU (the sparse sync takes them).
    model_options.sparse_gradients = f.adam == "fused" && run.device().is_cpu();
    DeepFM model(model_options);
    run.replicate(*model, *comm);
    auto optimizer = optim::make_adam(f.adam, model->parameters(), torch::optim::AdamOptions(run.lr()));
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kSparse, *comm, model->parameters());

    // Equal step counts on every rank are what keeps the collectives matched (03.3).
    dist::require_same_across_ranks(*comm, sampler.num_samples(), "sample counts",
                                    "the job would hang at a collective when the shorter rank runs out");
    const int64_t steps_per_epoch = run.steps_per_epoch(sampler.num_samples());
    run.start_training(model.ptr(), steps_per_epoch);
    log::info0("sampler: {}, order {}; {} steps per epoch", sampler.describe(), f.order, steps_per_epoch);

    lab03::record_sampler(run, sampler, f.order);
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      sampler.set_epoch(epoch);  // a new shared order every epoch
      const auto rates = lab03::click_rates(*comm, run, epoch, sampler.indices());
      data::BatchLoader loader(run.train(), sampler.indices(), run.batch(), run.device());
      const EpochSummary& done = run.run_epoch(epoch, loader, [&](const data::Batch& b) {
        return train_step(model, *optimizer, b, run.timer(), sync.get());
      });
      lab03::epoch_coverage(run, *comm, done, sampler, n, rates);  // every sample once? the verdict
    }
    run.end_of_training(model.ptr(), *comm);
  };
  return run_lab(program, argc, argv);
}

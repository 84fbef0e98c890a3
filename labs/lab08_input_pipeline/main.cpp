// Lab 08 driver: data-parallel DeepFM fed from Criteo-layout text. The starting program parses
// the text on the training thread, batch by batch (--loader sync); the student's prefetching
// loader (08.1) makes batches on worker threads ahead of the step, and shard-aware reading (08.2)
// has each rank read only its byte range of the file. --source binary trains on the kit's binary
// shards instead, the lesson's end: convert once, then no text pipeline is needed. The run prints
// the step's data wait and busy fraction, how far ahead the loader ran, the bytes each rank read,
// and whether any loader thread outlived its loader (lab08_kit.h).
// Not edited by students.
#include <memory>

#include "lab08.h"
#include "lab08_kit.h"

#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/staging.h"
#include "ddplab/train.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  lab08::Flags f;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 08: the input pipeline — text parsed on the training thread, prefetched, sharded";
  program.add_flags = [&](LabFlags& flags) { lab08::add_flags(flags, f); };
  lab08::add_probes(program);
  program.body = [&](LabRun& run) {
    lab08::check_flags(f);
    auto comm = run.join();
    const int rank = run.rank(), world = run.world_size();
    const int64_t B = run.batch();

    // ---- this rank's samples: its lines of the text (08.2), or its block of the binary shards ----
    std::unique_ptr<data::TextFile> file;
    lab08::Shard shard;
    std::vector<uint64_t> binary_order;
    if (f.from_text()) {
      file = std::make_unique<data::TextFile>(lab08::training_text(*comm, run, f));
      const bool by_range = f.read == "range" && !run.without("08.2", "every rank parses the whole file");
      shard = lab08::shard_text(run, *comm, *file, by_range);
    } else {
      const uint64_t per = run.train_size() / static_cast<uint64_t>(world);
      shard.steps = static_cast<int64_t>(per) / B;
      for (uint64_t i = 0; i < static_cast<uint64_t>(shard.steps * B); ++i)
        binary_order.push_back(static_cast<uint64_t>(rank) * per + i);
      log::info0("binary shards: each rank reads its block of {} samples, {} steps of {}", per, shard.steps, B);
    }
    if (shard.steps < 1) throw ConfigError(fmt::format("the data holds less than one batch of {} per rank", B));

    DeepFM model;
    run.replicate(*model, *comm);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kSparse, *comm, model->parameters());
    run.start_training(model.ptr(), shard.steps);

    const bool prefetch = f.from_text() && f.loader == "prefetch" && run.has("08.1");
    std::string how = !f.from_text() ? "binary shards, read on the training thread"
                      : prefetch
                          ? fmt::format("text, prefetching loader ({} workers, queue depth {})", f.workers, f.depth)
                          : "text, parsed on the training thread";
    if (f.from_text() && f.loader == "prefetch" && !prefetch) how += " (08.1 not attempted)";
    log::info0("input: {}", how);

    // 08.3: on CUDA the batch goes to the device through pinned buffers on a side stream (not run
    // on a GPU yet); on the CPU there is nothing to copy.
    DeviceStager stager(run.device());
    std::unique_ptr<lab08::TextBatches> batches;  // the same batches every epoch: made when asked for
    if (file) {
      batches = std::make_unique<lab08::TextBatches>(*file, std::move(shard.lines), B, shard.steps, shard.keep_every,
                                                     shard.keep_every > 1 ? rank : 0);
    }
    lab08::LoaderFigures loaders;
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      std::unique_ptr<lab08::WatchedSource> watched;  // per epoch: how far ahead this epoch's loader ran
      std::unique_ptr<data::Loader> loader;
      if (batches) {
        watched = std::make_unique<lab08::WatchedSource>(*batches);
        std::unique_ptr<data::Loader> text_loader;
        if (prefetch) {
          text_loader = std::make_unique<lab08::PrefetchLoader>(*watched, f.workers, f.depth);
        } else {
          text_loader = std::make_unique<lab08::SyncLoader>(*watched);
        }
        loader = std::make_unique<lab08::WatchedLoader>(std::move(text_loader), *watched);  // counts what it hands out
      } else {
        loader = std::make_unique<data::BatchLoader>(run.train(), binary_order, B, run.device());
      }
      run.run_epoch(epoch, *loader, [&](const data::Batch& b) {
        const data::Batch& on_device = stager.active() && file ? stager.stage(b) : b;
        return train_step(model, optimizer, on_device, run.timer(), sync.get());
      });
      loader.reset();  // stops and joins the loader's threads
      if (watched) loaders.add(*watched);
    }
    lab08::report(run, *comm, f, prefetch, file.get(), shard, loaders);  // section "input" + verdicts
    run.end_of_training(model.ptr(), *comm);
  };
  return run_lab(program, argc, argv);
}

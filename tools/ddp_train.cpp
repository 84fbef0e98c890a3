// ddp_train: the kit's reference data-parallel trainer. Every rank starts from rank 0's weights,
// takes its slice of each global batch of one shared shuffle, and averages gradients with the
// chosen rung of the sync ladder; so N ranks x batch B follow one process at batch N x B.
// Run it under any launcher: ddplab launch -n 2 -- ddp_train --data data/ctr-small --sync overlap
#include <memory>

#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/train.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  std::string sync_name = "bucketed";
  LabProgram program;
  program.name = "ddp_train";
  program.description = "Reference data-parallel DeepFM trainer (sharded global batches, averaged gradients)";
  program.add_flags = [&](LabFlags& f) {
    f.option("--sync", sync_name, "Gradient sync: per-param, bucketed, overlap or sparse");
  };
  program.body = [&](LabRun& run) {
    const auto strategy = dist::parse_sync_strategy(sync_name);
    auto comm = run.join();
    DeepFM model;
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    auto sync = dist::make_grad_sync(strategy, *comm, model->parameters());

    const int64_t B = run.batch();
    const int64_t G = run.global_batch();
    // Whole global batches only, so every rank takes the same number of steps (no rank waits at a
    // collective for a peer that has run out of data); the dropped tail is < one global batch.
    const int64_t steps = static_cast<int64_t>(run.train_size()) / G;
    if (steps == 0)
      throw ConfigError(fmt::format("--train-samples {} is smaller than one global batch of {}", run.train_size(), G));
    run.start_training(model.ptr(), steps);
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      const auto order = data::shuffled_order(run.train_size(), run.options().seed, static_cast<uint64_t>(epoch));
      // This rank's slice [rank * B, (rank + 1) * B) of every global batch.
      data::BatchLoader loader(run.train(), data::global_batch_slice(order, steps, B, run.rank(), run.world_size()), B,
                               run.device());
      run.run_epoch(epoch, loader,
                    [&](const data::Batch& b) { return train_step(model, optimizer, b, run.timer(), sync.get()); });
    }
    run.evaluate_on_rank0(model, *comm);
  };
  return run_lab(program, argc, argv);
}

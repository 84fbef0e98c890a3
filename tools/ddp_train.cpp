// ddp_train: the kit's reference data-parallel trainer. Every rank starts from rank 0's weights,
// takes its slice of each global batch of one shared shuffle, and averages gradients with the
// chosen rung of the sync ladder; so N ranks x batch B follow one process at batch N x B.
// Run it under any launcher: ddplab launch -n 2 -- ddp_train --data data/ctr-small --sync overlap
// Its optimizer is the kit's one-pass Adam (torch::optim::Adam's algorithm, --adam torch for that
// one), with row-sparse embedding gradients where nothing needs them dense: alone (one rank has
// nothing to average, so no sync runs) and under the sparse rung; the training split held in memory
// (--data-mapped reads it through the file mapping, as the labs do). Issue 18 measured these.
#include <memory>

#include "ddplab/dist/grad_sync.h"
#include "ddplab/fused_adam.h"
#include "ddplab/lab.h"
#include "ddplab/train.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  std::string sync_name = "bucketed";
  std::string adam = "fused";
  bool in_memory = true;
  LabProgram program;
  program.name = "ddp_train";
  program.description = "Reference data-parallel DeepFM trainer (sharded global batches, averaged gradients)";
  program.add_flags = [&](LabFlags& f) {
    f.option("--sync", sync_name, "Gradient sync: per-param, bucketed, overlap or sparse");
    f.option("--adam", adam, "Adam implementation: fused (the kit's one pass) or torch (torch::optim::Adam)")
        ->check(CLI::IsMember({"fused", "torch"}));
    f.flag("--data-in-memory,!--data-mapped", in_memory,
           "Hold the training split in this process's memory (huge pages; up to 2 GB) instead of reading it "
           "through the file mapping");
  };
  program.body = [&](LabRun& run) {
    const auto strategy = dist::parse_sync_strategy(sync_name);
    if (in_memory) run.hold_training_data_in_memory();
    auto comm = run.join();
    const bool alone = comm->size() == 1;
    DeepFMOptions model_options;
    // Row-sparse gradients need the one-pass Adam on the CPU, and a sync that takes them.
    model_options.sparse_gradients =
        adam == "fused" && run.device().is_cpu() && (alone || strategy == dist::SyncStrategy::kSparse);
    DeepFM model(model_options);
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    auto optimizer = optim::make_adam(adam, model->parameters(), torch::optim::AdamOptions(run.lr()));
    // Alone, the local gradient is the average: no sync, no one-rank collectives.
    auto sync = alone ? nullptr : dist::make_grad_sync(strategy, *comm, model->parameters());

    const int64_t steps = run.whole_global_batches();  // the same on every rank
    run.start_training(model.ptr(), steps);
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      auto loader = run.global_batch_loader(epoch, steps);  // this rank's slice of every global batch
      run.run_epoch(epoch, *loader,
                    [&](const data::Batch& b) { return train_step(model, *optimizer, b, run.timer(), sync.get()); });
    }
    run.evaluate_on_rank0(model, *comm);
  };
  return run_lab(program, argc, argv);
}

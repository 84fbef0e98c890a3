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

    const int64_t steps = run.whole_global_batches();  // the same on every rank
    run.start_training(model.ptr(), steps);
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      auto loader = run.global_batch_loader(epoch, steps);  // this rank's slice of every global batch
      run.run_epoch(epoch, *loader,
                    [&](const data::Batch& b) { return train_step(model, optimizer, b, run.timer(), sync.get()); });
    }
    run.evaluate_on_rank0(model, *comm);
  };
  return run_lab(program, argc, argv);
}

// Lab 10 driver: data-parallel DeepFM whose ranks stop repeating what they all hold. --shard none
// is DDP + Adam: every rank keeps the whole model's gradients and Adam's two moments. zero1 splits
// Adam's state over the ranks (the partition of 10.1, the step of 10.2), zero2 the gradients too
// (10.3), and --checkpoint saves the shards and loads them at another world size (10.4). The
// report's "sharding" section holds each rank's measured bytes and the traffic of every
// collective; --parity trains a DDP + Adam copy alongside. Not edited by students.
#include "lab10_kit.h"

#include "ddplab/deepfm.h"
#include "ddplab/lab.h"
#include "ddplab/train.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  lab10::Flags f;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 10: sharding Adam's state (ZeRO-1) and the gradients (ZeRO-2) over the ranks";
  program.add_flags = [&](LabFlags& flags) { lab10::add_flags(flags, f); };
  lab10::add_probes(program);
  program.body = [&](LabRun& run) {
    auto comm = run.join();
    DeepFM model;
    run.replicate(*model, *comm);  // rank 0's weights everywhere
    // The partition (10.1) and this rank's shard of Adam (10.2), or the whole Adam for --shard none.
    lab10::Sharded sharded(run, *comm, f, model->parameters());
    const int64_t steps = run.whole_global_batches();
    run.start_training(model.ptr(), steps);
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      run.run_epoch(epoch, *run.global_batch_loader(epoch, steps), [&](const data::Batch& batch) {
        // The usual step; only the update differs: the mode's collectives and Adam on a shard.
        return timed_step(run.timer(), sharded.zeroer(), nullptr,
                          sharded.parts([&] { return batch_loss(model, batch); }));
      });
    }
    sharded.report(run);  // section "sharding"; verdicts partition_exact, state_within_budget, ...
    if (f.checkpoint) sharded.check_checkpoint(run);  // verdict reshard_identical
    run.end_of_training(model.ptr(), *comm);          // verdict params_identical, the evaluation
  };
  return run_lab(program, argc, argv);
}

// Lab 07 driver: DeepFM split across ranks, measured against data parallel. --mode dp trains
// data-parallel (the baseline; --recompute runs the MLP through the student's recomputation,
// 07.4); --mode split puts the embeddings and the FM on rank 0 and the MLP on rank 1 (the
// student's split_step, 07.1); --mode pipeline runs that split as a GPipe pipeline of
// --micro-batches (07.2); --mode sharded gives each rank some of the 26 tables, exchanges lookups
// with all-to-all and keeps the MLP data-parallel (07.3). Every mode measures what the handout
// asks about (lab07_kit.h): the bytes each step moves against the formula, each rank's idle time,
// and the tensor memory of each rank, held to --device-memory-mb when given. At the end every rank
// holds the whole trained model, evaluated and saved as a plain DeepFM. Not edited by students.
#include "lab07.h"
#include "lab07_kit.h"

#include "ddplab/amp.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/optim.h"
#include "ddplab/step.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  lab07::Flags f;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 07: the model-parallel trap — layer split, pipeline, table-wise sharding, recomputation";
  program.add_flags = [&](LabFlags& flags) { lab07::add_flags(flags, f); };
  lab07::add_probes(program);
  program.body = [&](LabRun& run) {
    // Counts every tensor of this rank from here on: the model, its gradients, the optimizer's
    // state and each step's activations (CPU: the allocator's reports; CUDA: not yet run).
    memory::Tracker tracker(run.device().is_cuda());
    auto comm = run.join();
    const int world = run.world_size(), rank = run.rank();
    lab07::check_flags(f, world, run.batch());
    if (f.mode == "pipeline") run.without("07.2", "the split runs one micro-batch per step");
    const bool recompute = f.recompute && !run.without("07.4", "the MLP keeps its activations");

    DeepFM model(f.model_options());
    run.replicate(*model, *comm);
    if (recompute) lab07::measure_recompute(run, model, run.batch());
    // This rank's parameters: all of them (dp), its stage's (split), or the dense ones and its
    // tables (sharded).
    const lab07::Placement place = lab07::place(model, f, rank, world, run.batch());
    // The batch one step trains on: the split's two stages share one batch of --batch; data
    // parallel and sharded ranks each take --batch of a global batch of world x --batch.
    const int64_t step_batch = f.split() ? run.batch() : run.batch() * world;
    const double lr = run.options().effective_lr(step_batch);
    auto optimizer = optim::make(f.optimizer, place.params, lr);
    std::unique_ptr<dist::GradSync> sync;
    if (!f.split()) sync = dist::make_grad_sync(dist::SyncStrategy::kBucketed, *comm, place.dense);

    const int64_t steps = static_cast<int64_t>(run.train_size() / static_cast<uint64_t>(step_batch));
    if (steps == 0) {
      throw ConfigError(
          fmt::format("--train-samples {} is smaller than one step's {} samples", run.train_size(), step_batch));
    }
    run.start_training(model.ptr(), steps);
    lab07::StepMemory mem(tracker, f.device_memory_mb);
    lab07::Stages stages(model, run.timer(), mem, f.micro());

    // Data parallel and sharded: the forward written out, so that the MLP can be recomputed and the
    // sharded lookup replace the tables.
    const int64_t D = f.embedding_dim;
    auto dp_forward = [&](const data::Batch& b) {
      amp::AutocastGuard cast(run.device().type(), f.autocast);
      torch::Tensor e, first;
      if (f.sharded()) {
        std::vector<torch::Tensor> gathered(static_cast<size_t>(world));
        for (auto& g : gathered) g = torch::empty_like(b.rows);
        comm->allgather(gathered, b.rows);
        const torch::Tensor e1 = lab07::sharded_lookup(*comm, place.layout, place.shard, torch::cat(gathered));
        e = e1.slice(2, 0, D);
        first = e1.select(2, D).sum(1) + model->dense_linear->forward(b.dense).squeeze(1);
      } else {
        e = model->embedding->forward(b.rows);
        first = model->first_order->forward(b.rows).sum({1, 2}) + model->dense_linear->forward(b.dense).squeeze(1);
      }
      const torch::Tensor deep_in = torch::cat({e.flatten(1), b.dense}, 1);
      const torch::Tensor deep = recompute ? lab07::recompute(model->mlp, deep_in) : model->mlp->forward(deep_in);
      torch::Tensor loss =
          torch::binary_cross_entropy_with_logits(first + DeepFMImpl::fm_interaction(e) + deep.squeeze(1), b.labels);
      mem.note_held();
      return loss;
    };

    const dist::StatsWindow traffic(*comm);  // the training loop's collectives only
    int64_t steps_taken = 0;
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      // Model-parallel stages see the same batch; data-parallel ranks their slice of the global batch.
      const auto order = data::shuffled_order(run.train_size(), run.options().seed, static_cast<uint64_t>(epoch));
      data::BatchLoader loader(run.train(),
                               f.split() ? data::global_batch_slice(order, steps, run.batch(), 0, 1)
                                         : data::global_batch_slice(order, steps, run.batch(), rank, world),
                               run.batch(), run.device());
      run.run_epoch(epoch, loader, [&](const data::Batch& batch) {
        optimizer->zero_grad();
        mem.begin_step();  // after zero_grad, which may free the last step's gradients
        double loss = 0;
        if (f.split()) {
          stages.begin(batch);
          loss = f.micro() > 1 && run.has("07.2") ? lab07::pipeline_step(*comm, stages.fns(), f.micro())
                                                  : lab07::split_step(*comm, stages.fns());
          loss = stages.end(*comm, loss, *optimizer);  // the last stage's loss shared; the update
        } else {
          loss = timed_step(run.timer(), *optimizer, sync.get(), plain_parts([&] { return dp_forward(batch); }));
        }
        mem.end_step(steps_taken++, rank, place.params, *optimizer);
        return loss;
      });
    }
    lab07::report(run, *comm, f, place, *optimizer,
                  {steps_taken, step_batch, lr, &traffic, &mem, stages.gpipe_order()});
    lab07::assemble(model, *comm, f, place);  // every rank gets the whole trained model
    run.end_of_training(model.ptr(), *comm);
  };
  return run_lab(program, argc, argv);
}

// ddp_train: the kit's reference data-parallel trainer. Every rank starts from rank 0's weights,
// takes its slice of each global batch of one shared shuffle, and averages gradients with the
// chosen rung of the sync ladder; so N ranks x batch B follow one process at batch N x B.
// Run it under any launcher: ddplab launch -n 2 -- ddp_train --data data/ctr-small --sync overlap
#include <memory>

#include "ddplab/dist/grad_sync.h"
#include "ddplab/dist/process_group.h"
#include "ddplab/evaluate.h"
#include "ddplab/log.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  std::string sync_name = "bucketed";
  LabProgram program;
  program.name = "ddp_train";
  program.description = "Reference data-parallel DeepFM trainer (sharded global batches, averaged gradients)";
  program.add_flags = [&](CLI::App& app) {
    app.add_option("--sync", sync_name, "Gradient sync: per-param, bucketed, overlap or sparse")->capture_default_str();
  };
  program.body = [&](LabRun& run) {
    const auto strategy = dist::parse_sync_strategy(sync_name);
    dist::ProcessGroupOptions po;
    po.timeout = std::chrono::milliseconds(static_cast<int64_t>(run.options().comm_timeout * 1000));
    std::shared_ptr<dist::ProcessGroup> comm = dist::ProcessGroup::join(run.environment(), run.device(), po);
    run.set_communicator(comm);
    run.report().json()["config"]["sync"] = dist::sync_strategy_name(strategy);

    DeepFM model;
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    auto sync = dist::make_grad_sync(strategy, *comm, model->parameters());

    const int64_t B = run.options().batch;
    const int64_t G = run.global_batch();
    const int64_t rank = run.rank();
    // Whole global batches only, so every rank takes the same number of steps (no rank waits at a
    // collective for a peer that has run out of data); the dropped tail is < one global batch.
    const int64_t steps = static_cast<int64_t>(run.train_size()) / G;
    if (steps == 0) throw ConfigError(fmt::format("--train-samples {} is smaller than one global batch of {}", run.train_size(), G));
    run.start_training(model.ptr(), steps);
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      run.begin_epoch(epoch);
      const auto order = data::shuffled_order(run.train_size(), run.options().seed, static_cast<uint64_t>(epoch));
      std::vector<uint64_t> mine;
      mine.reserve(static_cast<size_t>(steps * B));
      for (int64_t k = 0; k < steps; ++k) {
        const auto first = order.begin() + k * G + rank * B;
        mine.insert(mine.end(), first, first + B);
      }
      data::BatchLoader loader(run.train(), std::move(mine), B, run.device());
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
          auto s = timer.scope(Phase::kComm);  // what backward did not hide
          sync->finish();
        }
        {
          auto s = timer.scope(Phase::kOptimizer);
          optimizer.step();
        }
        run.end_step(b, loss.item<double>());
      }
      run.end_epoch();
    }
    // Every rank holds the same model; rank 0 evaluates for the job.
    if (rank == 0) run.set_eval(evaluate_model(model, run.test(), run.eval_size(), B, run.device()));
    comm->barrier();
  };
  return run_lab(program, argc, argv);
}

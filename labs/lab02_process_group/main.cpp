// Lab 02 driver: N processes started by a launcher. Each rank builds its own model (seeded with
// --seed + rank, like the incident's script), joins the job with the student's environment,
// starts from rank 0's weights and averages gradients — and, with no sampler yet, every rank
// trains on the WHOLE training set, so the run ends by putting a number on that waste.
// Not edited by students.
#include "lab02.h"
#include "lab02_kit.h"

#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/train.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  LabProgram program;
  bool own_batches = false;
  program.name = DDPLAB_LAB_NAME;
  // A grading flag: with every rank on the same batches, a sync that leaves some gradient out (or
  // none at all) still ends with equal replicas. With their own batches they stay equal only if
  // 02.3 averages every gradient.
  program.add_flags = [&](LabFlags& f) {
    f.flag("--own-batches", own_batches,
           "Each rank shuffles with --seed + rank, so ranks see different batches (the grader's test of 02.3)");
  };
  program.description = "Lab 02: a process group — same start, averaged gradients, and (no sampler yet) N x the work";
  program.body = [&own_batches](LabRun& run) {
    const int world = run.world_size();
    // 02.1: the job, joined with the student's environment; without it, N independent trainers.
    // (Not a structured binding: lambdas below capture `comm`, which C++17 allows only for variables.)
    const auto joined_group = lab02::join_with_student_environment(run);
    const std::shared_ptr<dist::ProcessGroup> comm = joined_group.first;
    const bool joined = joined_group.second, talking = joined || world == 1;

    // The incident's initialisation: each process seeds its own model differently.
    torch::manual_seed(run.options().seed + static_cast<uint64_t>(run.rank()));
    DeepFM model;
    model->to(run.device());
    // 02.2: everyone starts from rank 0's weights — a fact only ranks that talk can establish.
    run.attempt([&] { lab02::broadcast_parameters(*comm, *model); });
    if (talking) {
      const auto start = dist::compare_parameters(*comm, *model);
      run.report().verdict("start_params_identical", start.same(), "parameters at the start: " + start.describe());
    }

    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    // 02.3 as the step's gradient sync. Until it exists each rank keeps its own gradients.
    bool averaging = true;
    auto sync = dist::make_function_sync(*comm, model->parameters(), [&] {
      averaging = averaging && run.attempt([&] { lab02::average_gradients(*comm, *model); });
    });
    const uint64_t n = run.train_size();
    run.start_training(model.ptr(), run.steps_per_epoch(n));
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      // No sampler: every rank walks the WHOLE training set, in the same shuffled order (each in its
      // own with --own-batches).
      const uint64_t seed = run.options().seed + (own_batches ? static_cast<uint64_t>(run.rank()) : 0);
      data::BatchLoader loader(run.train(), data::shuffled_order(n, seed, static_cast<uint64_t>(epoch)), run.batch(),
                               run.device());
      const EpochSummary& done = run.run_epoch(epoch, loader, [&](const data::Batch& b) {
        return train_step(model, optimizer, b, run.timer(), sync.get());
      });
      if (talking) lab02::epoch_bill(run, *comm, done);  // processed vs unique samples: the waste
    }
    lab02::record_job(run, joined, averaging);

    // Rank 0's model speaks for the job (which is only right when all ranks hold the same one).
    if (talking) {
      run.end_of_training(model.ptr(), *comm);
      return;
    }
    log::info0(
        "how many of the {} ranks' samples were unique, and whether their parameters agree, cannot be known: "
        "the ranks never talk (02.1); compare params.final_digest in the ranks' reports",
        world);
    // N independent trainers: every rank evaluates its own model, to show that they differ.
    const EvalResult own = evaluate_model(model, run.test(), run.eval_size(), run.batch(), run.device());
    log::info("test AUC of rank {}'s own model: {:.4f} (log-loss {:.4f})", run.rank(), own.auc, own.logloss);
    if (run.rank() == 0) run.set_eval(own);
    run.finish_together();
  };
  return run_lab(program, argc, argv);
}

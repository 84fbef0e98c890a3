// Lab 04 driver: data-parallel DeepFM whose gradients travel by the rung --sync picks — the
// runtime's one allreduce per tensor (the oracle), or the student's buckets reduced after backward
// (04.1) or launched from hooks during backward (04.2). Every collective a step issues is checked
// against the bucket layout as it starts (lab04_kit.h, SyncWatch), so the run reports, per step,
// how many went out, how many bytes, in which order, when each started relative to backward, and
// how much of the step waited for them (the exposed communication). --unused-branch adds a branch
// some ranks skip on some steps (04.3). Not edited by students.
#include "lab04.h"
#include "lab04_kit.h"

#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/optim.h"
#include "ddplab/step.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  lab04::Flags f;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description =
      "Lab 04: gradient sync by buckets, overlapped with backward, and parameters a step does not use";
  program.add_flags = [&](LabFlags& flags) { lab04::add_flags(flags, f); };
  lab04::add_probes(program);  // each exercise once on a two-layer model, before the job starts
  program.body = [&](LabRun& run) {
    auto comm = run.join();
    // DeepFM, or DeepFM with 04.3's branch; every rank starts from rank 0's weights. Plain SGD by
    // default: the grader compares the weights with the oracle's, and Adam would hide a gradient
    // summed instead of averaged (m / sqrt(v) does not change when g is scaled).
    lab04::Model model(f.unused_every);
    run.replicate(*model.module(), *comm);
    auto optimizer = optim::make(f.optimizer, model.module()->parameters(), run.lr());
    const std::vector<torch::Tensor> params = model.module()->parameters();

    // The rung. A student class that is not written yet falls back to the oracle, so the run
    // still trains (and ends "not attempted").
    std::unique_ptr<dist::GradSync> sync;
    lab04::OverlapSync* overlap = nullptr;
    const bool written = run.attempt([&] { sync = lab04::make_rung(f, *comm, params, &overlap); });
    if (!sync) sync = dist::make_grad_sync(dist::SyncStrategy::kPerParam, *comm, params);
    lab04::SyncWatch watch(*comm, *sync, overlap);  // every collective, checked against the layout

    const int64_t steps = run.whole_global_batches();
    run.start_training(model.module(), steps);
    log::info0("sync {}{}: {} bucket(s) of {}{}", f.sync, written ? "" : " (not written yet: per-param instead)",
               sync->buckets().size(), lab04::list_mb(watch.expected()),
               f.unused_every > 0 ? fmt::format("; branch skipped when (step + rank) % {} == 0, find_unused {}",
                                                f.unused_every, f.find_unused ? "on" : "off")
                                  : "");
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      run.run_epoch(epoch, *run.global_batch_loader(epoch, steps), [&](const data::Batch& batch) {
        // The kit's step (step.h); the sync's before_backward is DDP's prepare_for_backward (in
        // forward; find_unused's graph walk happens there), its finish() the exposed communication.
        const int64_t s = run.global_step();
        const bool skip = model.skips(s, run.rank());
        const double loss =
            timed_step(run.timer(), *optimizer, sync.get(), watch.parts(s, [&] { return model.loss(batch, skip); }));
        watch.after_step(s, run.timer().current_step(), skip);
        if (run.options().log_every > 0 && (s + 1) % run.options().log_every == 0) log::info0("{}", watch.step_line(s));
        return loss;
      });
    }
    lab04::report(run, *comm, f, written, *model.module(), *sync, watch);
    run.end_of_training(model.module(), *comm);
  };
  return run_lab(program, argc, argv);
}

// Lab 06 driver: data-parallel DeepFM at large global batches. The global batch is the student's
// derive_global_batch (06.3) of the launcher's world size, --batch per rank and --accumulate k
// micro-batches per optimizer step, taken by the student's Accumulator under no_sync (06.2). The
// optimizer has two parameter groups, {embeddings, dense layers}, whose learning rates follow the
// student's schedules (06.1): --lr at --base-batch, scaled by --lr-rule (dense) and
// --embedding-rule, with --warmup-steps of linear warm-up. The run prints the global batch, the
// rules and the learning rates, and checks what it can see from outside (lab06_kit.h,
// AccumulationWatch): the groups of micro-steps and the divisor of each loss, one gradient sync per
// optimizer step, and a schedule that counts optimizer steps. Not edited by students.
#include <algorithm>

#include "lab06.h"
#include "lab06_kit.h"

#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  lab06::Flags f;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 06: large global batches — learning-rate rules, warm-up, gradient accumulation";
  program.lr_scaling_flag = false;  // --lr-rule and the student's schedules set the rate
  program.add_flags = [&](LabFlags& flags) { lab06::add_flags(flags, f); };
  lab06::add_probes(program);
  program.body = [&](LabRun& run) {
    auto comm = run.join();
    // 06.3: the global batch and the schedules, from the job (the driver's own without 06.3).
    const lab06::Plan plan = lab06::make_plan(run, f);
    const bool schedules = !run.without("06.1", "every step at --lr, unscaled");
    const bool accumulate = !run.without("06.2", "one micro-batch per optimizer step, no accumulation");

    DeepFM model;
    run.replicate(*model, *comm);
    auto optimizer = lab06::make_optimizer(f, model, run.options().lr);  // {embeddings, dense}, each scheduled
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kBucketed, *comm, model->parameters());
    // Micro-steps: whole micro-batches of world x B (the runtime's global batch, k not counted);
    // every rank takes the same number.
    const int64_t micro_steps = run.whole_global_batches();
    run.start_training(model.ptr(), micro_steps);
    std::unique_ptr<lab06::Accumulator> acc;
    if (accumulate) acc = std::make_unique<lab06::Accumulator>(*sync, f.accumulate);
    lab06::AccumulationWatch watch(model, *optimizer, *sync, run.timer(), plan, schedules);
    const dist::StatsWindow traffic(*comm);
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      // --max-steps ends the run inside an epoch: the accumulator is told the micro-steps it gets.
      int64_t this_epoch = micro_steps;
      if (run.options().max_steps > 0) {
        this_epoch = std::clamp(run.options().max_steps - watch.micro_steps(), int64_t{0}, micro_steps);
      }
      if (this_epoch == 0) break;
      if (acc) acc->begin_epoch(this_epoch);
      run.run_epoch(epoch, *run.global_batch_loader(epoch, micro_steps), [&](const data::Batch& batch) {
        watch.next(batch);
        return acc ? acc->micro_step(watch.fns()) : watch.plain_step();
      });
    }
    watch.report(run, f, plan, accumulate, traffic.calls(dist::Op::kAllreduce), traffic.bytes(dist::Op::kAllreduce));
    run.end_of_training(model.ptr(), *comm);
  };
  return run_lab(program, argc, argv);
}

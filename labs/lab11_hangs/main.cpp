// Lab 11 driver: data-parallel DeepFM whose job can be made to hang, and the tools that turn a
// hang into an error naming its cause. Every collective goes through a communicator that
// fingerprints it (11.1: the ranks compare what they issue before every K-th collective) and
// records it (11.2: the flight recorder, dumped and merged when a collective times out). --fault
// injects one of the bugs that hang real jobs; --join lets ranks whose data ran out keep the
// others company (11.3); every M steps the ranks' phase times name a straggler (11.4, with
// --slow-rank/--slow-ms). Not edited by students.
#include "lab11_kit.h"

#include "ddplab/deepfm.h"
#include "ddplab/lab.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  lab11::Flags f;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 11: a job that hangs: fingerprints, a flight recorder, uneven inputs and stragglers";
  program.add_flags = [&](LabFlags& flags) { lab11::add_flags(flags, f); };
  lab11::add_probes(program);
  program.body = [&](LabRun& run) {
    lab11::drop_missing(run, f);  // a skeleton trains without the tools it does not have yet
    auto group = run.join();
    // Every collective below is fingerprinted (11.1) and recorded (11.2) on its way to the group.
    lab11::Watched comm(*group, f, lab11::flight_dir(run));
    lab11::Faults faults(run, comm, f);  // what --fault injects, and what the tools must name
    DeepFM model;
    run.replicate(*model, comm);
    lab11::Trainer trainer(run, comm, f, model, faults);
    faults.expect([&] {  // verdict desync_named or hang_named when the job stops
      run.start_training(model.ptr(), run.whole_global_batches());
      for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) trainer.train_epoch(epoch);
      trainer.report();                        // section "hangs"; join_weighted, straggler_named
      run.end_of_training(model.ptr(), comm);  // verdict params_identical, the evaluation
    });
  };
  return run_lab(program, argc, argv);
}

// Lab 01 driver: train DeepFM on one process for the requested epochs, evaluate on the test
// split next to the teacher's AUC, and write the run report. Not edited by students.
#include "lab01.h"

#include "ddplab/lab.h"
#include "ddplab/log.h"

int main(int argc, char** argv) {
  ddplab::LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 01: a measured single-process DeepFM baseline";
  program.body = [](ddplab::LabRun& run) {
    ddplab::DeepFM model;
    model->to(run.device());
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    run.start_training(model.ptr(), run.steps_per_epoch(run.train_size()));

    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      // One fresh permutation per epoch, the same on every machine for a given --seed.
      ddplab::data::BatchLoader loader(run.train(),
                                       ddplab::data::shuffled_order(run.train_size(), run.options().seed, epoch),
                                       run.batch(), run.device());
      try {
        run.run_epoch(epoch, loader, [&](const ddplab::data::Batch& b) {
          return lab01::train_step(model, optimizer, b, run.timer());  // your 01.1
        });
      } catch (const ddplab::NotImplemented& e) {
        // Keep going to the evaluation so the run reports every missing exercise at once.
        run.not_attempted(e);
        break;
      }
    }

    run.attempt([&] { run.set_eval(lab01::evaluate(model, run.test(), run.eval_size(), run.batch(), run.device())); });
  };
  return ddplab::run_lab(program, argc, argv);
}

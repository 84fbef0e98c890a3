// Lab 01 driver: train DeepFM on one process for the requested epochs, evaluate on the test
// split next to the teacher's AUC, and write the run report. Not edited by students.
#include "lab01.h"

#include "ddplab/log.h"

int main(int argc, char** argv) {
  ddplab::LabProgram program;
  program.name = "lab01";
  program.description = "Lab 01: a measured single-process DeepFM baseline";
  program.body = [](ddplab::LabRun& run) {
    ddplab::DeepFM model;
    model->to(run.device());
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    const int64_t batch = run.options().batch;
    const int64_t steps_per_epoch = (static_cast<int64_t>(run.train_size()) + batch - 1) / batch;
    run.start_training(model.ptr(), steps_per_epoch);

    bool trained = true;
    for (int64_t epoch = 0; epoch < run.options().epochs && trained; ++epoch) {
      run.begin_epoch(epoch);
      // One fresh permutation per epoch, the same on every machine for a given --seed.
      ddplab::data::BatchLoader loader(run.train(),
                                       ddplab::data::shuffled_order(run.train_size(), run.options().seed, epoch),
                                       batch, run.device());
      ddplab::data::Batch b;
      while (run.next_batch(loader, b)) {
        double loss = 0.0;
        try {
          loss = lab01::train_step(model, optimizer, b, run.timer());
        } catch (const ddplab::NotImplemented& e) {
          // Keep going to the evaluation so the run reports every missing exercise at once.
          run.timer().cancel_step();
          run.not_attempted(e);
          trained = false;
          break;
        }
        run.end_step(b, loss);
      }
      if (trained) run.end_epoch();
    }

    try {
      run.set_eval(lab01::evaluate(model, run.test(), run.eval_size(), batch, run.device()));
    } catch (const ddplab::NotImplemented& e) {
      run.not_attempted(e);
    }
  };
  return ddplab::run_lab(program, argc, argv);
}

// Lab 01 exercises: the training step and the evaluation of the single-process baseline.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <vector>

#include "lab01.h"
#include "ddplab/error.h"
#include "ddplab/metrics.h"

namespace lab01 {

double train_step(ddplab::DeepFM& model, torch::optim::Optimizer& optimizer, const ddplab::data::Batch& batch,
                  ddplab::StepTimer& timer) {
  // BEGIN STUDENT CODE (01.1: training step)
  throw ddplab::NotImplemented("01.1", "train_step: zero the gradients, forward + loss, backward, optimizer step");
  // END STUDENT CODE
}

ddplab::EvalResult evaluate(ddplab::DeepFM& model, const ddplab::data::Dataset& test, uint64_t count,
                            int64_t batch_size, torch::Device device) {
  // BEGIN STUDENT CODE (01.2: evaluation)
  throw ddplab::NotImplemented("01.2", "evaluate: probabilities for the test samples, then exact AUC and log-loss");
  // END STUDENT CODE
}

}  // namespace lab01

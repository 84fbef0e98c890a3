// Lab 02 exercises: find your place in the job from the launcher's environment, start every rank
// from rank 0's weights, and average gradients so the ranks stay one model.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "lab02.h"
#include "ddplab/error.h"

namespace lab02 {

ddplab::dist::Environment environment_from_launcher() {
  // BEGIN STUDENT CODE (02.1: rank and world size from the environment)
  throw ddplab::NotImplemented("02.1", "environment_from_launcher: read RANK, WORLD_SIZE, ... with std::getenv");
  // END STUDENT CODE
}

void broadcast_parameters(ddplab::dist::Communicator& comm, torch::nn::Module& model) {
  // BEGIN STUDENT CODE (02.2: same start on every rank)
  throw ddplab::NotImplemented("02.2", "broadcast_parameters: every parameter and buffer from rank 0");
  // END STUDENT CODE
}

void average_gradients(ddplab::dist::Communicator& comm, torch::nn::Module& model) {
  // BEGIN STUDENT CODE (02.3: average the gradients)
  throw ddplab::NotImplemented("02.3", "average_gradients: allreduce each gradient, then divide by the world size");
  // END STUDENT CODE
}

}  // namespace lab02

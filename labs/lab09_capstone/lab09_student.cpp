// Lab 09 exercises: the checkpoint a job resumes from (09.1 writes it, 09.2 reads it back or
// refuses it) and the cost meter with its budget alarm (09.3). Contracts: lab09.h. Edit only
// between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "lab09.h"

#include "ddplab/error.h"

namespace lab09 {

void save_checkpoint([[maybe_unused]] const std::string& path, [[maybe_unused]] const Checkpoint& c,
                     [[maybe_unused]] const torch::nn::Module& model,
                     [[maybe_unused]] const torch::optim::Optimizer& optimizer) {
  // BEGIN STUDENT CODE (09.1: a checkpoint written so that no reader ever sees part of one)
  throw ddplab::NotImplemented("09.1", "save_checkpoint: write the checkpoint so that no reader sees part of one");
  // END STUDENT CODE
}

Checkpoint load_checkpoint([[maybe_unused]] const std::string& path, [[maybe_unused]] const JobIdentity& expected,
                           [[maybe_unused]] torch::nn::Module& model,
                           [[maybe_unused]] torch::optim::Optimizer& optimizer) {
  // BEGIN STUDENT CODE (09.2: read a checkpoint back, or refuse it and change nothing)
  throw ddplab::NotImplemented("09.2", "load_checkpoint: read a checkpoint back, or refuse it and change nothing");
  // END STUDENT CODE
}

Spend meter([[maybe_unused]] const Price& price, [[maybe_unused]] const Position& at,
            [[maybe_unused]] uint64_t samples_per_epoch, [[maybe_unused]] int64_t epochs) {
  // BEGIN STUDENT CODE (09.3: what the job has cost and will cost)
  throw ddplab::NotImplemented("09.3", "meter: what the job has cost and will cost");
  // END STUDENT CODE
}

bool over_budget([[maybe_unused]] double budget_usd, [[maybe_unused]] const Spend& now,
                 [[maybe_unused]] double usd_per_step, [[maybe_unused]] double reserve_usd) {
  // BEGIN STUDENT CODE (09.3: the budget alarm)
  throw ddplab::NotImplemented("09.3", "over_budget: the budget alarm");
  // END STUDENT CODE
}

}  // namespace lab09

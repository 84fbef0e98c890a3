// Pieces the `ddplab bench` subcommands share.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "ddplab/data/loader.h"

namespace ddplab::tools {

/// A pool of `count` distinct real batches drawn from the workload's generator, starting at
/// sample id `first_sample`, so a benchmark needs no data set on disk and still trains on the
/// workload's id distribution. Ranks pass different `first_sample`s to train on different samples.
std::vector<data::Batch> synthetic_batches(int64_t batch, int count, torch::Device device, uint64_t first_sample = 0);

}  // namespace ddplab::tools

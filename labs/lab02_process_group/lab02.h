// Lab 02 (process group): the functions the student implements in lab02_student.cpp. The driver
// (main.cpp) and the tests call only these; the runtime's own versions (dist/env.h,
// dist::broadcast_module, dist/grad_sync.h) are what later labs use.
#pragma once

#include <torch/torch.h>

#include "ddplab/dist/communicator.h"
#include "ddplab/dist/env.h"

namespace lab02 {

/// Exercise 02.1: where this process sits in the job, read from the launcher's environment
/// (torchrun's variables, which `ddplab launch` sets too) with std::getenv. Nothing hard-coded.
///
/// Contract:
///  - RANK and WORLD_SIZE unset: a single process {rank 0, world 1, local 0/1, source "single",
///    no rendezvous address (master_addr "", master_port 0)}.
///  - otherwise source "torchrun" and: RANK and WORLD_SIZE both required; LOCAL_RANK optional
///    (default RANK), LOCAL_WORLD_SIZE optional (default WORLD_SIZE); MASTER_ADDR and MASTER_PORT
///    required when WORLD_SIZE > 1, read when set otherwise. node_rank stays 0.
///  - every number is a plain non-negative decimal integer; WORLD_SIZE and LOCAL_WORLD_SIZE are
///    at least 1; MASTER_PORT is 1..65535; RANK < WORLD_SIZE; LOCAL_RANK < LOCAL_WORLD_SIZE.
///  - any violation throws ddplab::ConfigError whose message names the variable and its value
///    ("RANK='two' is not a non-negative integer"), or the missing variable ("MASTER_PORT is not
///    set"): a clear error at start-up instead of a job that hangs at the rendezvous.
ddplab::dist::Environment environment_from_launcher();

/// Exercise 02.2: make every rank start from rank 0's model.
///
/// Contract: overwrite every parameter AND every buffer of `model`, in place, with rank 0's
/// values using comm.broadcast (not dist::broadcast_module); record nothing for autograd
/// (torch::NoGradGuard). Tensors keep their identity (an optimizer holding them must see the new
/// values). Every rank calls it with the same architecture.
void broadcast_parameters(ddplab::dist::Communicator& comm, torch::nn::Module& model);

/// Exercise 02.3: after backward, make every parameter's gradient the AVERAGE over ranks.
///
/// Contract: for every parameter that has a gradient (p.grad().defined()), one blocking
/// comm.allreduce (an in-place SUM over ranks) of that gradient, then divide it by comm.size()
/// (Gloo has no average operation). Parameters without a gradient are left alone; every rank
/// must hold gradients for the same parameters. Afterwards every rank holds the same gradients,
/// so identical parameters stay identical after the optimizer step.
void average_gradients(ddplab::dist::Communicator& comm, torch::nn::Module& model);

}  // namespace lab02

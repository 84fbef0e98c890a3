// A world of one without a transport: every collective leaves its data as a one-rank job would
// (all-reduce and broadcast: unchanged; all-gather, all-to-all and reduce-scatter: a copy), point-to-point does
// nothing. Counts, observes and traces its calls like any communicator. For probes that try a student's exercise once
// before the job starts (lab.h, LabProgram::probe) and for tests of code that only needs a communicator.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "ddplab/dist/communicator.h"

namespace ddplab::dist {

class Loopback final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce(torch::Tensor& t) override;
  void broadcast(torch::Tensor& t, int root) override;
  void allgather(std::vector<torch::Tensor>& out, const torch::Tensor& in) override;
  void all_to_all(torch::Tensor& out, const torch::Tensor& in) override;
  void all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                  const std::vector<int64_t>& in_splits) override;
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in) override;
  void send(const torch::Tensor& t, int dst, int tag = 0) override;
  void recv(torch::Tensor& t, int src, int tag = 0) override;
  void barrier() override;
};

}  // namespace ddplab::dist

// The world-of-one communicator (see loopback.h).
#include "ddplab/dist/loopback.h"

#include "ddplab/error.h"
#include "ddplab/memory.h"

namespace ddplab::dist {

void Loopback::allreduce(torch::Tensor& t) { Recorder r(*this, Op::kAllreduce, memory::bytes_of(t)); }

void Loopback::broadcast(torch::Tensor& t, int root) {
  DDPLAB_CHECK(root == 0, "broadcast from rank " + std::to_string(root) + " in a world of one");
  Recorder r(*this, Op::kBroadcast, memory::bytes_of(t));
}

void Loopback::allgather(std::vector<torch::Tensor>& out, const torch::Tensor& in) {
  DDPLAB_CHECK(out.size() == 1,
               "allgather in a world of one takes one output tensor, not " + std::to_string(out.size()));
  Recorder r(*this, Op::kAllgather, memory::bytes_of(in));
  out[0].copy_(in);
}

void Loopback::all_to_all(torch::Tensor& out, const torch::Tensor& in) {
  Recorder r(*this, Op::kAllToAll, memory::bytes_of(in));
  out.copy_(in);
}

void Loopback::all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>&,
                          const std::vector<int64_t>&) {
  Recorder r(*this, Op::kAllToAll, memory::bytes_of(in));
  out.copy_(in);
}

void Loopback::reduce_scatter(torch::Tensor& out, const torch::Tensor& in) {
  Recorder r(*this, Op::kReduceScatter, memory::bytes_of(in));
  out.copy_(in.view_as(out));
}

void Loopback::send(const torch::Tensor& t, int, int) { Recorder r(*this, Op::kSend, memory::bytes_of(t)); }

void Loopback::recv(torch::Tensor& t, int, int) { Recorder r(*this, Op::kRecv, memory::bytes_of(t)); }

void Loopback::barrier() { Recorder r(*this, Op::kBarrier, 0); }

}  // namespace ddplab::dist

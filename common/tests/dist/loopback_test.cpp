// The world of one (dist/loopback.h): collectives leave data as a one-rank job would and are
// counted and observed like a real transport's; a statistics window sees only its own calls.
#include "ddplab/dist/loopback.h"

#include <gtest/gtest.h>

#include "ddplab/error.h"

namespace {

using ddplab::dist::Op;

TEST(Loopback, CollectivesLeaveDataAsOneRankWouldAndAreCountedAndObserved) {
  ddplab::dist::Loopback comm;
  std::vector<Op> seen;
  comm.set_observer([&](Op op, int64_t, int64_t) { seen.push_back(op); });
  torch::Tensor t = torch::arange(4, torch::kFloat32);
  comm.allreduce(t);
  comm.broadcast(t, 0);
  EXPECT_TRUE(torch::equal(t, torch::arange(4, torch::kFloat32)));
  std::vector<torch::Tensor> out{torch::zeros({4})};
  comm.allgather(out, t);
  EXPECT_TRUE(torch::equal(out[0], t));
  torch::Tensor a2a = torch::zeros({4});
  comm.all_to_all(a2a, t);
  EXPECT_TRUE(torch::equal(a2a, t));
  torch::Tensor rs = torch::zeros({4});
  comm.reduce_scatter(rs, t);
  EXPECT_TRUE(torch::equal(rs, t));
  comm.send(t, 0);
  comm.recv(t, 0);
  comm.barrier();
  EXPECT_EQ(seen, (std::vector<Op>{Op::kAllreduce, Op::kBroadcast, Op::kAllgather, Op::kAllToAll, Op::kReduceScatter,
                                   Op::kSend, Op::kRecv, Op::kBarrier}));
  EXPECT_EQ(comm.stats().ops[static_cast<size_t>(Op::kAllreduce)].bytes, 16);
  EXPECT_EQ(comm.stats().total_calls(), 8);
  EXPECT_THROW(comm.broadcast(t, 1), ddplab::Error);  // no rank 1 in a world of one
  std::vector<torch::Tensor> two{torch::zeros({4}), torch::zeros({4})};
  EXPECT_THROW(comm.allgather(two, t), ddplab::Error);
}

TEST(RingBytes, AnAllReduceSendsWhatAReduceScatterAndAnAllGatherSendTogether) {
  using ddplab::dist::ring_bytes;
  const int64_t s = 1200;  // bytes of the whole buffer, divisible by 1..4 ranks
  for (int n = 1; n <= 4; ++n) {
    EXPECT_EQ(ring_bytes(Op::kAllreduce, s, n),
              ring_bytes(Op::kReduceScatter, s, n) + ring_bytes(Op::kAllgather, s / n, n))
        << n << " ranks";
  }
  EXPECT_EQ(ring_bytes(Op::kAllreduce, s, 2), 1200);  // 2 (N-1)/N = 1 at two ranks
  EXPECT_EQ(ring_bytes(Op::kAllreduce, s, 4), 1800);  // 2 x 3/4
  EXPECT_EQ(ring_bytes(Op::kAllgather, 300, 4), 900);
  EXPECT_EQ(ring_bytes(Op::kAllreduce, s, 1), 0) << "one rank sends nothing";
  EXPECT_EQ(ring_bytes(Op::kRecv, s, 4), 0);
}

TEST(StatsWindow, CountsOnlyWhatHappenedSinceItOpened) {
  ddplab::dist::Loopback comm;
  torch::Tensor t = torch::zeros({8});  // 32 bytes
  comm.allreduce(t);                    // before the window: not counted
  ddplab::dist::StatsWindow w(comm);
  EXPECT_EQ(w.calls(Op::kAllreduce), 0);
  for (int i = 0; i < 3; ++i) comm.allreduce(t);
  comm.broadcast(t, 0);
  EXPECT_EQ(w.calls(Op::kAllreduce), 3);
  EXPECT_EQ(w.bytes(Op::kAllreduce), 96);
  EXPECT_EQ(w.bytes_per(Op::kAllreduce, 3), 32);
  EXPECT_EQ(w.bytes_per(Op::kAllreduce, 0), 0);
  EXPECT_EQ(w.bytes(Op::kBroadcast), 32);
  EXPECT_GE(w.seconds(Op::kAllreduce), 0.0);
  w.restart();
  EXPECT_EQ(w.calls(Op::kAllreduce), 0);
}

}  // namespace

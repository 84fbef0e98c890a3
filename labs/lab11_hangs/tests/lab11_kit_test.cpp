// Lab 11's kit: the ring's reader, the calls' description, and the checking communicator with its
// tools off (a plain forwarder). These pass on the skeleton and the solution alike.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lab11_kit.h"
#include "ddplab/dist/loopback.h"

namespace {

using ddplab::dist::Op;
using ddplab::flight::Entry;
using ddplab::flight::State;

TEST(Lab11Kit, InOrderSkipsEmptySlotsAndSortsBySeq) {
  lab11::Ring ring;
  ring.slots.resize(4);
  ring.slots[0] = Entry{7, Op::kAllreduce, {2}, "float", 0, -1, State::kEnqueued};
  ring.slots[2] = Entry{5, Op::kBroadcast, {2}, "float", 0, 1, State::kCompleted};
  const auto e = lab11::in_order(ring);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].seq, 5);
  EXPECT_EQ(e[1].seq, 7);
}

TEST(Lab11Kit, ACallSaysItsReductionOnlyForReducingCollectives) {
  const auto a = lab11::call_of(Op::kAllreduce, torch::zeros({3, 2}));
  EXPECT_EQ(a.reduce, lab11::Reduce::kSum);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(lab11::describe(a), "allreduce float[3,2]");
  EXPECT_EQ(lab11::call_of(Op::kAllgather, torch::zeros({1}, torch::kLong)).reduce, lab11::Reduce::kNone);
  EXPECT_EQ(lab11::call_of(Op::kReduceScatter, torch::zeros({4})).reduce, lab11::Reduce::kSum);
}

TEST(Lab11Kit, WithItsToolsOffTheCommunicatorForwardsAndCountsEveryCollective) {
  ddplab::dist::Loopback inner;
  lab11::Flags f;
  f.fingerprint_every = 0;
  f.flight = 0;
  lab11::Watched comm(inner, f, "");
  torch::Tensor t = torch::full({3}, 2.0f);
  comm.allreduce(t);
  comm.broadcast(t, 0);
  std::vector<torch::Tensor> out{torch::zeros({3})};
  comm.allgather(out, t);
  comm.barrier();
  EXPECT_TRUE(torch::equal(out[0], torch::full({3}, 2.0f)));
  EXPECT_EQ(comm.next_seq(), 4);
  EXPECT_EQ(comm.stats().total_calls(), 4);
  EXPECT_EQ(comm.stats().ops[static_cast<size_t>(Op::kAllreduce)].bytes, 12);
  EXPECT_EQ(comm.checks(), 0);
}

}  // namespace

// The tensor-memory tracker (the measured "device memory" of lab 07 on CPU).
#include <thread>

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddplab/memory.h"

namespace {

using ddplab::memory::Tracker;

TEST(MemoryBytes, CountsDefinedTensorsByTheirElementSize) {
  EXPECT_EQ(ddplab::memory::bytes_of(std::vector<torch::Tensor>{}), 0);
  EXPECT_EQ(ddplab::memory::bytes_of(torch::Tensor()), 0);
  EXPECT_EQ(ddplab::memory::bytes_of(torch::zeros({3, 4}, torch::kFloat64)), 96);
  EXPECT_EQ(ddplab::memory::bytes_of({torch::zeros({3, 4}), torch::Tensor(), torch::zeros({5}, torch::kInt64),
                                      torch::zeros({2}, torch::kBFloat16)}),
            48 + 40 + 4);
}

TEST(MemoryTracker, CountsTheLiveBytesOfTensorsAndTheirPeak) {
  Tracker t;
  EXPECT_EQ(t.live_bytes(), 0);
  torch::Tensor a = torch::empty({1000}, torch::kFloat);  // 4,000 bytes
  EXPECT_EQ(t.live_bytes(), 4000);
  {
    torch::Tensor b = torch::empty({250, 4}, torch::kDouble);  // 8,000 bytes, freed at the brace
    EXPECT_EQ(t.live_bytes(), 12000);
  }
  EXPECT_EQ(t.live_bytes(), 4000);
  EXPECT_EQ(t.peak_bytes(), 12000);
  t.reset_peak();
  EXPECT_EQ(t.peak_bytes(), 4000);
  EXPECT_GE(t.events(), 3);
}

TEST(MemoryTracker, SeesWhatAutogradSavesForBackwardAndFreesAfterIt) {
  // relu keeps its output for backward, the linear layer's output (relu's input) is freed once
  // relu has run: the activations held between forward and backward are one [512, 1000] tensor.
  torch::nn::Linear lin(1000, 1000);
  torch::Tensor x = torch::randn({512, 1000});
  Tracker t;
  torch::Tensor y = torch::relu(lin->forward(x)).sum();
  const int64_t held = t.live_bytes();
  EXPECT_GE(held, 512 * 1000 * 4);
  EXPECT_LT(held, 2 * 512 * 1000 * 4) << "the linear output should not be kept";
  EXPECT_GE(t.peak_bytes(), 2 * 512 * 1000 * 4) << "both outputs existed while relu ran";
  y.backward();
  y = torch::Tensor();
  // What stays: the parameters' gradients (allocated under the tracker), nothing of the graph.
  const int64_t grads = (lin->weight.numel() + lin->bias.numel()) * 4;
  EXPECT_EQ(t.live_bytes(), grads);
}

TEST(MemoryTracker, CountsWhatOtherThreadsMakeAndFree) {
  // A process's tensors are its device memory, whichever thread holds the last reference: Gloo's
  // worker threads often free a collective's tensors after the caller has let go of them.
  Tracker t;
  torch::Tensor elsewhere;
  std::thread([&] { elsewhere = torch::empty({1 << 16}); }).join();
  EXPECT_EQ(t.live_bytes(), (1 << 16) * 4) << "made on another thread";
  torch::Tensor here = torch::empty({1000});
  std::thread([moved = std::move(here)]() mutable { moved = torch::Tensor(); }).join();
  EXPECT_EQ(t.live_bytes(), (1 << 16) * 4) << "made here, freed on another thread";
  elsewhere = torch::Tensor();
  EXPECT_EQ(t.live_bytes(), 0);
}

TEST(MemoryTracker, LetsKernelsAllocateRawMemoryThroughIt) {
  // c10's raw_allocate (ideep's bfloat16 matrix products allocate their scratch through it) needs
  // the allocator's DataPtr to have the memory as its context: lab 07's autocast run aborted on an
  // INTERNAL ASSERT in c10/core/Allocator.h while the tracker was in front of the CPU allocator.
  Tracker t;
  c10::Allocator* cpu = c10::GetCPUAllocator();
  void* raw = cpu->raw_allocate(4096);
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(t.live_bytes(), 4096);
  cpu->raw_deallocate(raw);
  EXPECT_EQ(t.live_bytes(), 0);
  torch::Tensor a = torch::randn({64, 64}).to(torch::kBFloat16), b = torch::randn({64, 64}).to(torch::kBFloat16);
  torch::Tensor c = torch::matmul(a, b);  // through oneDNN where this LibTorch has it
  EXPECT_EQ(c.scalar_type(), torch::kBFloat16);
  c = a = b = torch::Tensor();
  EXPECT_EQ(t.live_bytes(), 0);
}

TEST(MemoryTracker, ATrackerCountsFromItsStart) {
  { Tracker first; }  // the counting allocator is in place from the first tracker on
  torch::Tensor before = torch::empty({1000});
  Tracker t;
  before = torch::Tensor();
  EXPECT_EQ(t.live_bytes(), -4000) << "the free of an earlier tensor shows as a drop below the start";
  Tracker u;
  torch::Tensor c = torch::empty({100});
  EXPECT_EQ(u.live_bytes(), 400);
}

}  // namespace

// The tensor-memory tracker (the measured "device memory" of lab 07 on CPU).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddplab/memory.h"

namespace {

using ddplab::memory::Tracker;

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

TEST(MemoryTracker, IgnoresOtherThreadsAndStopsWhenDestroyed) {
  Tracker t;
  torch::Tensor elsewhere;
  std::thread([&] { elsewhere = torch::empty({1 << 16}); }).join();
  EXPECT_EQ(t.live_bytes(), 0) << "a tensor made on another thread is that thread's";
  int64_t after = 0;
  {
    Tracker inner;  // replaces the outer one on this thread until it ends
    torch::Tensor c = torch::empty({100});
    after = inner.live_bytes();
  }
  EXPECT_EQ(after, 400);
}

}  // namespace

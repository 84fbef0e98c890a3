// DeviceStager on a CPU device: a no-op that hands the batch back untouched (its CUDA path needs a
// GPU and has not run yet).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddplab/error.h"
#include "ddplab/staging.h"

namespace {

TEST(DeviceStager, OnTheCpuTheBatchIsHandedBackUntouched) {
  ddplab::DeviceStager stager(torch::kCPU);
  EXPECT_FALSE(stager.active());
  ddplab::data::Batch b;
  b.dense = torch::ones({4, 13});
  b.rows = torch::zeros({4, 26}, torch::kInt64);
  b.labels = torch::ones({4});
  b.indices = {7, 8, 9, 10};
  const void* dense = b.dense.data_ptr();
  const ddplab::data::Batch out = stager.stage(b);
  EXPECT_EQ(out.dense.data_ptr(), dense) << "no copy on the CPU";
  EXPECT_EQ(out.rows.data_ptr(), b.rows.data_ptr());
  EXPECT_EQ(out.indices, b.indices);
  EXPECT_FALSE(out.dense.is_pinned());
}

TEST(DeviceStager, NeedsAtLeastOneSlot) { EXPECT_THROW(ddplab::DeviceStager(torch::kCPU, 0), ddplab::Error); }

}  // namespace

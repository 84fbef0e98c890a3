// Copies CPU batches to the run's device so that the copy overlaps the step (lab 08, 08.3): pinned
// host buffers allocated once and reused, non_blocking copies on a side stream, the step's stream
// waiting for the copy. Written against c10's device-generic streams and events, so it compiles
// with any LibTorch; on a CPU device it is a no-op (nothing to copy, and a CPU-only LibTorch
// cannot pin memory). The CUDA path has NOT been run yet (docs/walkthroughs/lab08_input_pipeline.md).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "ddplab/data/loader.h"

namespace ddplab {

class DeviceStager {
 public:
  /// `slots`: pinned buffers reused in turn (two let one copy run while the next batch is staged).
  explicit DeviceStager(torch::Device device, int slots = 2);
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  /// False on a CPU device: stage() then returns its batch as it is.
  bool active() const noexcept { return impl_ != nullptr; }
  /// The batch on the device. On CUDA: waits until the slot's previous copy has left its pinned
  /// buffers, fills them (reallocating only for a larger batch), issues the copies on the side
  /// stream with non_blocking, makes the current stream wait for them, and marks the device
  /// tensors as used by the current stream (record_stream), so the caching allocator does not
  /// hand their memory out before the step has used them.
  data::Batch stage(data::Batch batch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddplab

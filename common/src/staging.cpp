// DeviceStager (staging.h). The CUDA path uses c10's device-generic Stream, Event and guard
// implementation, so this file compiles against a CPU-only LibTorch; it has not run on a GPU yet.
#include "ddplab/staging.h"

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <thread>
#include <utility>

#include "ddplab/error.h"

namespace ddplab {

struct DeviceStager::Impl {
  struct Slot {
    torch::Tensor dense, rows, labels;   // pinned host buffers
    std::unique_ptr<c10::Event> copied;  // recorded on the side stream after the slot's copies
  };
  torch::Device device;
  c10::impl::VirtualGuardImpl guard;
  c10::Stream side;
  std::vector<Slot> slots;
  size_t next = 0;

  Impl(torch::Device d, int n)
      : device(d), guard(d.type()), side(guard.getStreamFromGlobalPool(d)), slots(static_cast<size_t>(n)) {}

  /// A pinned host tensor like `t` with at least its rows, reusing `buf` when it is big enough.
  static torch::Tensor fill(torch::Tensor& buf, const torch::Tensor& t) {
    if (!buf.defined() || buf.size(0) < t.size(0) || buf.scalar_type() != t.scalar_type()) {
      buf = torch::empty(t.sizes(), t.options().pinned_memory(true));
    }
    torch::Tensor view = buf.narrow(0, 0, t.size(0));
    view.copy_(t);
    return view;
  }
};

DeviceStager::DeviceStager(torch::Device device, int slots) {
  if (slots < 1) throw Error("DeviceStager: slots must be at least 1");
  if (!device.is_cpu()) impl_ = std::make_unique<Impl>(device, slots);
}

DeviceStager::~DeviceStager() = default;

data::Batch DeviceStager::stage(data::Batch batch) {
  if (!impl_) return batch;
  Impl& m = *impl_;
  Impl::Slot& s = m.slots[m.next++ % m.slots.size()];
  if (s.copied) {
    while (!s.copied->query()) std::this_thread::yield();  // its pinned buffers are still being read
  } else {
    s.copied = std::make_unique<c10::Event>(m.device.type());
  }
  const torch::Tensor dense = Impl::fill(s.dense, batch.dense);
  const torch::Tensor rows = Impl::fill(s.rows, batch.rows);
  const torch::Tensor labels = Impl::fill(s.labels, batch.labels);
  const c10::Stream current = m.guard.getStream(m.device);
  {
    c10::StreamGuard on_side(m.side);
    batch.dense = dense.to(m.device, /*non_blocking=*/true);
    batch.rows = rows.to(m.device, true);
    batch.labels = labels.to(m.device, true);
    s.copied->record(m.side);
  }
  s.copied->block(current);  // the step's kernels wait for the copies, the host does not
  batch.dense.record_stream(current);
  batch.rows.record_stream(current);
  batch.labels.record_stream(current);
  return batch;
}

}  // namespace ddplab

// Lab 05 exercises: an autocast scope (05.1), a dynamic loss scaler with GradScaler's rules
// (05.2), and ranks that skip the same steps (05.3). Contracts: lab05.h.
// Edit only between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <fmt/format.h>

#include "lab05.h"

namespace lab05 {

bool share_found_inf(bool local, ddplab::dist::Communicator* comm) {
  // BEGIN STUDENT CODE (05.3: every rank sees every rank's inf)
  throw ddplab::NotImplemented("05.3", "share_found_inf: every rank sees every rank's inf");
  // END STUDENT CODE
}

AutocastScope::AutocastScope(torch::DeviceType device, torch::ScalarType dtype, bool enabled) : device_(device) {
  // BEGIN STUDENT CODE (05.1: enter the scope)
  throw ddplab::NotImplemented("05.1", "AutocastScope: save the state, enable autocast, count the nesting");
  // END STUDENT CODE
}

AutocastScope::~AutocastScope() noexcept(false) {
  // BEGIN STUDENT CODE (05.1: leave the scope)
  throw ddplab::NotImplemented("05.1", "~AutocastScope: clear the cache when the outermost scope ends, restore");
  // END STUDENT CODE
}

LossScaler::LossScaler(const ScalerOptions& options, ddplab::dist::Communicator* comm)
    : options_(options), comm_(comm), scale_(options.init_scale) {
  // BEGIN STUDENT CODE (05.2: the options GradScaler accepts)
  throw ddplab::NotImplemented("05.2", "LossScaler: reject the options GradScaler rejects");
  // END STUDENT CODE
}

torch::Tensor LossScaler::scale(const torch::Tensor& loss) const {
  // BEGIN STUDENT CODE (05.2: scale the loss)
  throw ddplab::NotImplemented("05.2", "LossScaler::scale: the loss times the scale");
  // END STUDENT CODE
}

void LossScaler::unscale(const std::vector<torch::Tensor>& params) {
  bool found = false;
  // BEGIN STUDENT CODE (05.2: unscale once, find inf and NaN)
  throw ddplab::NotImplemented("05.2", "LossScaler::unscale: once per step, 1 / scale in double, find inf/NaN");
  // END STUDENT CODE
  found_inf_ = share_found_inf(found, comm_);
}

bool LossScaler::step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params) {
  // BEGIN STUDENT CODE (05.2: step unless a gradient overflowed)
  throw ddplab::NotImplemented("05.2", "LossScaler::step: unscale if needed, skip on inf/NaN");
  // END STUDENT CODE
}

void LossScaler::update() {
  // BEGIN STUDENT CODE (05.2: grow or back off the scale)
  throw ddplab::NotImplemented("05.2", "LossScaler::update: GradScaler's growth and backoff");
  // END STUDENT CODE
}

}  // namespace lab05

// Phase and step accounting for the training loop.
#include "ddplab/timer.h"

#include <algorithm>

#include "ddplab/error.h"
#include "ddplab/trace.h"

namespace ddplab {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kDataWait: return "data_wait";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kComm: return "comm";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kCount: break;
  }
  return "unknown";
}

StepTimer::Scope::Scope(StepTimer& timer, Phase phase) : timer_(timer), phase_(phase), start_(Clock::now()) {}

StepTimer::Scope::~Scope() {
  timer_.sync();
  const auto end = Clock::now();
  timer_.add(phase_, std::chrono::duration<double>(end - start_).count());
  timer_.record(phase_, start_, end);
  if (timer_.trace_ != nullptr) timer_.trace_->phase(phase_name(phase_), start_, end);
}

StepTimer::StepTimer() = default;

void StepTimer::add(Phase p, double seconds) {
  DDPLAB_CHECK(p != Phase::kCount, "StepTimer::add: not a phase");
  totals_[static_cast<int>(p)] += seconds;
  if (in_step_) open_.phases[static_cast<int>(p)] += seconds;
}

void StepTimer::record(Phase p, Clock::time_point start, Clock::time_point end) {
  if (!in_step_) return;
  const int i = static_cast<int>(p);
  if (open_.began[i] == Clock::time_point{}) open_.began[i] = start;
  open_.ended[i] = std::max(open_.ended[i], end);
}

void StepTimer::begin_step() {
  step_start_ = Clock::now();
  if (!started_) {
    first_ = step_start_;
    started_ = true;
  }
  in_step_ = true;
  open_ = StepRecord{};
  open_.start = step_start_;
  if (trace_ != nullptr) trace_->begin_step(step_start_);
}

void StepTimer::cancel_step() {
  in_step_ = false;
  if (trace_ != nullptr) trace_->cancel_step();
}

void StepTimer::end_step() {
  DDPLAB_CHECK(in_step_, "StepTimer::end_step without begin_step");
  sync();
  last_end_ = Clock::now();
  steps_.push_back(std::chrono::duration<double>(last_end_ - step_start_).count());
  step_phases_.push_back(open_.phases);
  open_.end = last_end_;
  open_.seconds = steps_.back();
  last_ = open_;
  in_step_ = false;
  if (trace_ != nullptr) trace_->end_step(last_end_);
}

double StepTimer::wall() const {
  if (!started_ || steps_.empty()) return 0.0;
  return std::chrono::duration<double>(last_end_ - first_).count();
}

double StepTimer::compute() const {
  return total(Phase::kForward) + total(Phase::kBackward) + total(Phase::kOptimizer);
}

std::vector<double> StepTimer::phase_per_step(Phase p) const {
  DDPLAB_CHECK(p != Phase::kCount, "StepTimer::phase_per_step: not a phase");
  std::vector<double> v;
  v.reserve(step_phases_.size());
  for (const auto& s : step_phases_) v.push_back(s[static_cast<int>(p)]);
  return v;
}

void StepTimer::reset() {
  totals_.fill(0.0);
  steps_.clear();
  step_phases_.clear();
  open_ = last_ = StepRecord{};
  started_ = in_step_ = false;
}

double seconds_since(StepTimer::Clock::time_point start) {
  return std::chrono::duration<double>(StepTimer::Clock::now() - start).count();
}

double median(std::vector<double> values) {
  DDPLAB_CHECK(!values.empty(), "median of an empty sample");
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  double m = values[mid];
  if (values.size() % 2 == 0) {
    m = (m + *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid))) / 2.0;
  }
  return m;
}

}  // namespace ddplab

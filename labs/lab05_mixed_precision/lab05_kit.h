// Lab 05's apparatus: the kit's code around the student's autocast scope, loss scaler and shared
// inf check, read-only for students and unit-tested in tests/lab05_kit_test.cpp. The driver's
// flags; the probes; and Precision, the per-step bookkeeping of mixed precision: fp16 gradient
// storage emulated on a CPU build (and, per parameter, what it flushes to zero at scale 1 and at
// the scaler's scale), overflows injected into one rank's gradient, the steps the scaler skipped
// and its scale after each update, reported as the "amp" section and two verdicts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "lab05.h"

#include "ddplab/lab.h"

namespace lab05 {

/// The driver's own flags.
struct Flags {
  bool autocast = false, loss_scaling = false, emulate_fp16 = false;
  int64_t inject_every = 0, growth_interval = 2000;
  double init_scale = 65536.0;
  std::string autocast_dtype = "auto";
  /// The low precision of --autocast on `device`.
  torch::ScalarType low(torch::DeviceType device) const;
  ScalerOptions scaler_options() const;
};
void add_flags(ddplab::LabFlags& f, Flags& flags);

/// Each exercise once on a tiny model, in a world of one.
void add_probes(ddplab::LabProgram& program);

/// Mixed precision's bookkeeping over a run, for `params` (a model's named parameters).
class Precision {
 public:
  Precision(const Flags& flags, const std::vector<std::pair<std::string, torch::Tensor>>& named);

  /// After backward, on this rank's own gradients, in the order the lesson needs: fp16 storage
  /// (emulated), an overflow injected at step `step` into rank `rank` of `world` (every
  /// --inject-overflow steps, rank (step / K) mod world), then the scaler's unscale - its inf check.
  void after_backward(int64_t step, int rank, int world, LossScaler* scaler);
  /// What backward starts from: `scaled`, the scaler's scale(loss). Records the scale it actually
  /// applied (scaled / loss, measured), which the underflow figures use: the scaler's own
  /// scale_value() would credit a scale() that does not scale.
  torch::Tensor applied(const torch::Tensor& loss, torch::Tensor scaled);
  /// After the update: whether step `step` was taken, and the scale now.
  void after_update(int64_t step, bool stepped, double scale);

  double applied_scale() const noexcept { return applied_scale_; }
  const std::vector<int64_t>& skipped() const noexcept { return skipped_; }
  const std::vector<int64_t>& injected() const noexcept { return injected_; }
  /// Whether the skipped steps are exactly the steps an overflow was injected into (on any rank).
  bool skips_match_injected() const;
  /// Over every parameter: non-zero gradient elements fp16 flushes at scale 1 and at the scale used.
  double fraction_unscaled() const;
  double fraction_scaled() const;

  /// The report's "amp" section, and the verdicts `skips_match_injected` (with a scaler) and
  /// `underflow_falls` (with --emulate-fp16-grads), printed on rank 0.
  void report(ddplab::LabRun& run, const LossScaler* scaler, torch::ScalarType low) const;

 private:
  struct Underflow {
    std::string name;
    int64_t nonzero = 0, flushed_unscaled = 0, flushed_scaled = 0, overflow_scaled = 0;
  };
  Flags flags_;
  std::vector<torch::Tensor> params_;
  std::vector<Underflow> underflow_;
  std::vector<double> scales_;
  std::vector<int64_t> skipped_, injected_, injected_here_;
  double applied_scale_ = 1.0;  ///< the last step's scale as applied (applied())
};

}  // namespace lab05

// Lab 05's apparatus (see lab05_kit.h). Not edited by students.
#include "lab05_kit.h"

#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/amp.h"
#include "ddplab/log.h"

namespace lab05 {

namespace amp = ddplab::amp;

torch::ScalarType Flags::low(torch::DeviceType device) const {
  if (autocast_dtype == "float16") return torch::kHalf;
  if (autocast_dtype == "bfloat16") return torch::kBFloat16;
  return amp::low_precision_dtype(device);
}

ScalerOptions Flags::scaler_options() const {
  ScalerOptions o;
  o.init_scale = init_scale;
  o.growth_interval = growth_interval;
  return o;
}

void add_flags(ddplab::LabFlags& f, Flags& flags) {
  f.flag("--autocast", flags.autocast, "Forward pass in the device's low precision (bfloat16 on CPU, float16 on CUDA)");
  f.option("--autocast-dtype", flags.autocast_dtype,
           "The low precision of --autocast: auto (bfloat16 on CPU, float16 on CUDA), float16 or bfloat16")
      ->check(CLI::IsMember({"auto", "float16", "bfloat16"}));
  f.flag("--loss-scaling", flags.loss_scaling, "Scale the loss, unscale the gradients, skip steps with inf/NaN (05.2)");
  f.flag("--emulate-fp16-grads", flags.emulate_fp16,
         "Round every gradient through float16 after backward, and report what it flushes to zero");
  f.option("--inject-overflow", flags.inject_every,
           "Every K steps, one rank's gradient gets an inf before the inf check (0: never)")
      ->check(CLI::NonNegativeNumber);
  f.option("--init-scale", flags.init_scale, "The loss scaler's initial scale (GradScaler: 65536)")
      ->check(CLI::PositiveNumber);
  f.option("--growth-interval", flags.growth_interval,
           "Steps without inf/NaN before the scale doubles (GradScaler: 2000)")
      ->check(CLI::PositiveNumber);
}

void add_probes(ddplab::LabProgram& program) {
  program.probe("05.1", "AutocastScope",
                [](ddplab::ProbeContext&) { AutocastScope s(torch::kCPU, torch::kBFloat16, false); });
  program.probe("05.2", "LossScaler", [](ddplab::ProbeContext&) {
    torch::nn::Linear lin(2, 1);
    torch::optim::SGD opt(lin->parameters(), torch::optim::SGDOptions(0.1));
    LossScaler scaler;
    scaler.scale(lin->forward(torch::ones({1, 2})).sum()).backward();
    scaler.step(opt, lin->parameters());
    scaler.update();
  });
  program.probe("05.3", "share_found_inf", [](ddplab::ProbeContext&) { (void)share_found_inf(true, nullptr); });
}

Precision::Precision(const Flags& flags, const std::vector<std::pair<std::string, torch::Tensor>>& named)
    : flags_(flags) {
  for (const auto& [name, p] : named) {
    params_.push_back(p);
    underflow_.push_back(Underflow{name});
  }
}

torch::Tensor Precision::applied(const torch::Tensor& loss, torch::Tensor scaled) {
  const double l = loss.detach().item<double>(), s = scaled.detach().item<double>();
  applied_scale_ = l != 0 && std::isfinite(s / l) ? s / l : 1.0;
  return scaled;
}

void Precision::after_backward(int64_t step, int rank, int world, LossScaler* scaler) {
  // The scale the gradients carry is the one scale() applied, measured, not what the scaler says.
  const double scale = scaler != nullptr ? applied_scale_ : 1.0;
  if (flags_.emulate_fp16) {
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& g = params_[i].mutable_grad();
      if (!g.defined()) continue;
      const auto at1 = amp::fp16_loss(g, 1.0 / scale), at_scale = amp::fp16_loss(g, 1.0);
      underflow_[i].nonzero += at_scale.nonzero;
      underflow_[i].flushed_unscaled += at1.flushed;
      underflow_[i].flushed_scaled += at_scale.flushed;
      underflow_[i].overflow_scaled += at_scale.overflow;
      amp::round_through_fp16_(g);
    }
  }
  const int64_t k = flags_.inject_every;
  const bool inject = k > 0 && step % k == k - 1;
  if (inject) injected_.push_back(step);
  if (inject && rank == (step / k) % world) {
    torch::NoGradGuard no_grad;
    params_.at(0).mutable_grad().view(-1)[0] = std::numeric_limits<float>::infinity();
    injected_here_.push_back(step);
  }
  if (scaler != nullptr) scaler->unscale(params_);  // the inf check on this rank's own gradients
}

void Precision::after_update(int64_t step, bool stepped, double scale) {
  if (!stepped) skipped_.push_back(step);
  scales_.push_back(scale);
}

bool Precision::skips_match_injected() const {
  return std::set<int64_t>(skipped_.begin(), skipped_.end()) == std::set<int64_t>(injected_.begin(), injected_.end());
}

namespace {
double share(int64_t n, int64_t of) { return of > 0 ? static_cast<double>(n) / static_cast<double>(of) : 0.0; }
}  // namespace

double Precision::fraction_unscaled() const {
  int64_t nz = 0, n = 0;
  for (const auto& u : underflow_) nz += u.nonzero, n += u.flushed_unscaled;
  return share(n, nz);
}

double Precision::fraction_scaled() const {
  int64_t nz = 0, n = 0;
  for (const auto& u : underflow_) nz += u.nonzero, n += u.flushed_scaled;
  return share(n, nz);
}

void Precision::report(ddplab::LabRun& run, const LossScaler* scaler, torch::ScalarType low) const {
  auto& rep = run.report();
  nlohmann::json aj = {{"autocast", flags_.autocast},
                       {"dtype", flags_.autocast ? c10::toString(low) : "Float"},
                       {"loss_scaling", flags_.loss_scaling},
                       {"emulate_fp16_grads", flags_.emulate_fp16},
                       {"inject_overflow", flags_.inject_every},
                       {"skipped_steps", skipped_},
                       {"injected_steps", injected_},
                       {"injected_here", injected_here_},
                       {"scales", scales_}};
  if (scaler != nullptr) {
    aj["scaler"] = scaler->state();
    const bool match = skips_match_injected();
    rep.verdict("skips_match_injected", match,
                fmt::format("loss scaler: skipped {} of {} steps; overflows injected into {} step(s) across the "
                            "ranks: {}; scale now {}",
                            skipped_.size(), run.global_step(), injected_.size(),
                            match ? "every injected overflow skipped its step, and nothing else"
                                  : "the skipped steps do NOT match the injected ones",
                            scaler->scale_value()),
                {{"skipped", skipped_}, {"injected", injected_}});
    if (!match) {
      ddplab::log::warn("rank {} skipped steps [{}], injected [{}]", run.rank(), fmt::join(skipped_, ", "),
                        fmt::join(injected_, ", "));
    }
  }
  if (flags_.emulate_fp16) {
    int64_t overflow = 0;
    for (const auto& u : underflow_) {
      overflow += u.overflow_scaled;
      aj["underflow"].push_back({{"param", u.name},
                                 {"nonzero", u.nonzero},
                                 {"flushed_unscaled", u.flushed_unscaled},
                                 {"flushed_scaled", u.flushed_scaled},
                                 {"overflow_scaled", u.overflow_scaled},
                                 {"fraction_unscaled", share(u.flushed_unscaled, u.nonzero)},
                                 {"fraction_scaled", share(u.flushed_scaled, u.nonzero)}});
      ddplab::log::info0("  fp16 gradients of {:<22} {:>7.3f} % flushed to zero at scale 1, {:>7.3f} % at the scaler's",
                         u.name, 100 * share(u.flushed_unscaled, u.nonzero), 100 * share(u.flushed_scaled, u.nonzero));
    }
    const double f1 = fraction_unscaled(), f2 = fraction_scaled();
    aj["fraction_unscaled"] = f1;
    aj["fraction_scaled"] = f2;
    aj["overflow_scaled"] = overflow;
    const bool falls = scaler != nullptr && f2 < f1;
    rep.verdict("underflow_falls", falls,
                fmt::format("fp16 gradients: {:.3f} % of non-zero gradient elements flush to zero at scale 1, {:.3f} % "
                            "at the scale used ({} overflowed to inf): {}",
                            100 * f1, 100 * f2, overflow,
                            scaler == nullptr ? "no loss scaling in this run"
                            : falls           ? "underflow falls with loss scaling"
                                              : "loss scaling does NOT reduce underflow"),
                {{"fraction_unscaled", f1}, {"fraction_scaled", f2}});
  }
  rep.json()["amp"] = aj;
}

}  // namespace lab05

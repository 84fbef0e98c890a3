// Lab 05 driver: data-parallel DeepFM in mixed precision. --autocast runs the forward pass in the
// device's low precision (bfloat16 on CPU) inside the student's AutocastScope; --loss-scaling puts
// the student's LossScaler around backward and the optimizer step. Because a CPU build of
// LibTorch has no fp16 matmul, --emulate-fp16-grads rounds every gradient through float16 after
// backward (fp16 gradient storage) and reports, per layer, how many gradient elements that
// flushes to zero at scale 1 and at the scaler's scale. --inject-overflow K puts an inf into one
// rank's gradient every K steps, before the (local) inf check and the gradient all-reduce.
// Not edited by students.
#include <algorithm>
#include <limits>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lab05.h"

#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/train.h"

namespace {

using namespace ddplab;

/// Per parameter: gradient elements that fp16 storage flushes to zero, without and with scaling.
struct Underflow {
  std::string name;
  int64_t nonzero = 0, flushed_unscaled = 0, flushed_scaled = 0, overflow_scaled = 0;
  double fraction(int64_t n) const { return nonzero > 0 ? static_cast<double>(n) / static_cast<double>(nonzero) : 0; }
};

/// Each exercise once on a tiny model, so that a skeleton run lists every missing one; a failure
/// other than a stub is reported and met again in training.
void probe_exercises(LabRun& run) {
  run.probe("AutocastScope (05.1)", [] { lab05::AutocastScope s(torch::kCPU, torch::kBFloat16, false); });
  run.probe("LossScaler (05.2)", [] {
    torch::nn::Linear lin(2, 1);
    torch::optim::SGD opt(lin->parameters(), torch::optim::SGDOptions(0.1));
    lab05::LossScaler scaler;
    scaler.scale(lin->forward(torch::ones({1, 2})).sum()).backward();
    scaler.step(opt, lin->parameters());
    scaler.update();
  });
  run.probe("share_found_inf (05.3)", [] { (void)lab05::share_found_inf(true, nullptr); });
}

}  // namespace

int main(int argc, char** argv) {
  bool autocast = false, loss_scaling = false, emulate_fp16 = false;
  int64_t inject_every = 0, growth_interval = 2000;
  double init_scale = 65536.0;
  std::string autocast_dtype = "auto";
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 05: mixed precision — an autocast scope, a dynamic loss scaler, ranks that agree";
  program.add_flags = [&](LabFlags& f) {
    f.flag("--autocast", autocast, "Forward pass in the device's low precision (bfloat16 on CPU, float16 on CUDA)");
    f.option("--autocast-dtype", autocast_dtype,
             "The low precision of --autocast: auto (bfloat16 on CPU, float16 on CUDA), float16 or bfloat16")
        ->check(CLI::IsMember({"auto", "float16", "bfloat16"}));
    f.flag("--loss-scaling", loss_scaling, "Scale the loss, unscale the gradients, skip steps with inf/NaN (05.2)");
    f.flag("--emulate-fp16-grads", emulate_fp16,
           "Round every gradient through float16 after backward, and report what it flushes to zero");
    f.option("--inject-overflow", inject_every,
             "Every K steps, one rank's gradient gets an inf before the inf check (0: never)")
        ->check(CLI::NonNegativeNumber);
    f.option("--init-scale", init_scale, "The loss scaler's initial scale (GradScaler: 65536)")
        ->check(CLI::PositiveNumber);
    f.option("--growth-interval", growth_interval, "Steps without inf/NaN before the scale doubles (GradScaler: 2000)")
        ->check(CLI::PositiveNumber);
  };
  program.body = [&](LabRun& run) {
    probe_exercises(run);
    auto comm = run.join();
    DeepFM model;
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    const std::vector<torch::Tensor> params = model->parameters();
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kBucketed, *comm, params);
    const torch::DeviceType device = run.device().type();
    const torch::ScalarType low = autocast_dtype == "auto"      ? amp::low_precision_dtype(device)
                                  : autocast_dtype == "float16" ? torch::kHalf
                                                                : torch::kBFloat16;

    std::unique_ptr<lab05::LossScaler> scaler;
    if (loss_scaling) {
      lab05::ScalerOptions o;
      o.init_scale = init_scale;
      o.growth_interval = growth_interval;
      run.attempt([&] { scaler = std::make_unique<lab05::LossScaler>(o, comm.get()); });
    }
    std::vector<Underflow> underflow;
    for (const auto& item : model->named_parameters()) underflow.push_back(Underflow{item.key()});

    const int64_t steps = run.whole_global_batches();
    run.start_training(model.ptr(), steps);
    log::info0("precision: forward in {}{}{}", autocast ? c10::toString(low) : "float32",
               scaler ? fmt::format(", loss scaling from {}", scaler->scale_value()) : ", no loss scaling",
               emulate_fp16 ? ", gradients stored as float16 (emulated)" : "");

    std::vector<double> scales;
    std::vector<int64_t> skipped, injected, injected_here;
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      auto loader = run.global_batch_loader(epoch, steps);
      run.run_epoch(epoch, *loader, [&](const data::Batch& batch) {
        const int64_t s = run.global_step();
        StepTimer& timer = run.timer();
        optimizer.zero_grad();
        torch::Tensor loss;
        {
          auto scope = timer.scope(Phase::kForward);
          std::optional<lab05::AutocastScope> cast;
          if (autocast) cast.emplace(device, low);
          loss = torch::binary_cross_entropy_with_logits(model->forward(batch.dense, batch.rows), batch.labels);
        }
        sync->before_backward(loss);
        {
          auto scope = timer.scope(Phase::kBackward);
          (scaler ? scaler->scale(loss) : loss).backward();
        }
        {
          auto scope = timer.scope(Phase::kOptimizer);  // the precision bookkeeping between backward and step
          const double scale = scaler ? scaler->scale_value() : 1.0;
          if (emulate_fp16) {
            for (size_t i = 0; i < params.size(); ++i) {
              torch::Tensor& g = params[i].mutable_grad();
              if (!g.defined()) continue;
              const auto at1 = amp::fp16_loss(g, 1.0 / scale), at_scale = amp::fp16_loss(g, 1.0);
              underflow[i].nonzero += at_scale.nonzero;
              underflow[i].flushed_unscaled += at1.flushed;
              underflow[i].flushed_scaled += at_scale.flushed;
              underflow[i].overflow_scaled += at_scale.overflow;
              amp::round_through_fp16_(g);
            }
          }
          const bool inject = inject_every > 0 && s % inject_every == inject_every - 1;
          if (inject) injected.push_back(s);
          if (inject && run.rank() == (s / inject_every) % run.world_size()) {
            torch::NoGradGuard no_grad;
            params[0].mutable_grad().view(-1)[0] = std::numeric_limits<float>::infinity();
            injected_here.push_back(s);
          }
          if (scaler) scaler->unscale(params);  // the inf check on this rank's own gradients
        }
        {
          auto scope = timer.scope(Phase::kComm);
          sync->finish();
        }
        {
          auto scope = timer.scope(Phase::kOptimizer);
          if (scaler) {
            if (!scaler->step(optimizer, params)) skipped.push_back(s);
            scaler->update();
            scales.push_back(scaler->scale_value());
          } else {
            optimizer.step();
          }
        }
        return loss.item<double>();
      });
    }

    // The report's "amp" section and the verdicts the grader reads.
    nlohmann::json aj = {{"autocast", autocast},
                         {"dtype", autocast ? c10::toString(low) : "Float"},
                         {"loss_scaling", loss_scaling},
                         {"emulate_fp16_grads", emulate_fp16},
                         {"inject_overflow", inject_every},
                         {"skipped_steps", skipped},
                         {"injected_steps", injected},
                         {"injected_here", injected_here},
                         {"scales", scales}};
    if (scaler) aj["scaler"] = scaler->state();
    const int64_t done = run.global_step();
    if (scaler) {
      const std::set<int64_t> a(skipped.begin(), skipped.end()), b(injected.begin(), injected.end());
      const bool match = a == b;
      aj["skips_match_injected"] = match;
      log::info0(
          "loss scaler: skipped {} of {} steps; overflows injected into {} step(s) across the ranks: {}; scale "
          "now {}",
          skipped.size(), done, injected.size(),
          match ? "every injected overflow skipped its step, and nothing else"
                : "the skipped steps do NOT match the injected ones",
          scaler->scale_value());
      if (!match)
        log::warn("rank {} skipped steps [{}], injected [{}]", run.rank(), fmt::join(skipped, ", "),
                  fmt::join(injected, ", "));
    }
    if (emulate_fp16) {
      int64_t nz = 0, fu = 0, fs = 0, ov = 0;
      for (const auto& u : underflow) {
        nz += u.nonzero;
        fu += u.flushed_unscaled;
        fs += u.flushed_scaled;
        ov += u.overflow_scaled;
        aj["underflow"].push_back({{"param", u.name},
                                   {"nonzero", u.nonzero},
                                   {"flushed_unscaled", u.flushed_unscaled},
                                   {"flushed_scaled", u.flushed_scaled},
                                   {"overflow_scaled", u.overflow_scaled},
                                   {"fraction_unscaled", u.fraction(u.flushed_unscaled)},
                                   {"fraction_scaled", u.fraction(u.flushed_scaled)}});
        log::info0("  fp16 gradients of {:<22} {:>7.3f} % flushed to zero at scale 1, {:>7.3f} % at the scaler's",
                   u.name, 100 * u.fraction(u.flushed_unscaled), 100 * u.fraction(u.flushed_scaled));
      }
      const double f1 = nz ? static_cast<double>(fu) / nz : 0, f2 = nz ? static_cast<double>(fs) / nz : 0;
      aj["fraction_unscaled"] = f1;
      aj["fraction_scaled"] = f2;
      aj["overflow_scaled"] = ov;
      log::info0(
          "fp16 gradients: {:.3f} % of non-zero gradient elements flush to zero at scale 1, {:.3f} % at the "
          "scale used ({} overflowed to inf): {}",
          100 * f1, 100 * f2, ov,
          !scaler   ? "no loss scaling in this run"
          : f2 < f1 ? "underflow falls with loss scaling"
                    : "loss scaling does NOT reduce underflow");
    }
    std::string digest;
    const auto same = dist::compare_parameters(*comm, *model, &digest);
    aj["params_identical"] = same.same();
    log::info0("parameters at the end: {} (rank 0: {})", same.describe(), digest);
    run.report().json()["amp"] = aj;
    run.evaluate_on_rank0(model, *comm);
  };
  return run_lab(program, argc, argv);
}

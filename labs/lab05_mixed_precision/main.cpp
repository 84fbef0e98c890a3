// Lab 05 driver: data-parallel DeepFM in mixed precision. --autocast runs the forward pass in the
// device's low precision (bfloat16 on CPU) inside the student's AutocastScope; --loss-scaling puts
// the student's LossScaler around backward and the optimizer step. Because a CPU build of
// LibTorch has no fp16 matmul, --emulate-fp16-grads rounds every gradient through float16 after
// backward (fp16 gradient storage) and reports, per layer, how many gradient elements that
// flushes to zero at scale 1 and at the scaler's scale. --inject-overflow K puts an inf into one
// rank's gradient every K steps, before the (local) inf check and the gradient all-reduce
// (lab05_kit.h, Precision). Not edited by students.
#include <optional>

#include "lab05.h"
#include "lab05_kit.h"

#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/step.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  lab05::Flags f;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 05: mixed precision — an autocast scope, a dynamic loss scaler, ranks that agree";
  program.add_flags = [&](LabFlags& flags) { lab05::add_flags(flags, f); };
  lab05::add_probes(program);
  program.body = [&](LabRun& run) {
    auto comm = run.join();
    DeepFM model;
    run.replicate(*model, *comm);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kBucketed, *comm, model->parameters());
    const torch::DeviceType device = run.device().type();
    const torch::ScalarType low = f.low(device);
    // The scaler shares its inf check with the other ranks through `comm` (05.3).
    std::unique_ptr<lab05::LossScaler> scaler;
    if (f.loss_scaling)
      run.attempt([&] { scaler = std::make_unique<lab05::LossScaler>(f.scaler_options(), comm.get()); });
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
    lab05::Precision precision(f, named);

    const int64_t steps = run.whole_global_batches();
    run.start_training(model.ptr(), steps);
    log::info0("precision: forward in {}{}{}", f.autocast ? c10::toString(low) : "float32",
               scaler ? fmt::format(", loss scaling from {}", scaler->scale_value()) : ", no loss scaling",
               f.emulate_fp16 ? ", gradients stored as float16 (emulated)" : "");
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      run.run_epoch(epoch, *run.global_batch_loader(epoch, steps), [&](const data::Batch& batch) {
        const int64_t s = run.global_step();
        StepParts parts;
        parts.loss = [&] {  // the forward in the student's autocast scope
          std::optional<lab05::AutocastScope> cast;
          if (f.autocast) cast.emplace(device, low);
          return torch::binary_cross_entropy_with_logits(model->forward(batch.dense, batch.rows), batch.labels);
        };
        if (scaler) {
          parts.to_backward = [&](const torch::Tensor& loss) { return precision.applied(loss, scaler->scale(loss)); };
        }
        // On this rank's own gradients, before the all-reduce: fp16 storage, an injected overflow,
        // and the scaler's unscale with its inf check (shared with the other ranks).
        parts.after_backward = [&] { precision.after_backward(s, run.rank(), run.world_size(), scaler.get()); };
        if (scaler) {
          parts.optimizer_step = [&] {
            const bool stepped = scaler->step(optimizer, model->parameters());
            scaler->update();
            precision.after_update(s, stepped, scaler->scale_value());
            return stepped;
          };
        }
        return timed_step(run.timer(), optimizer, sync.get(), parts);
      });
    }
    precision.report(run, scaler.get(), low);  // section "amp", verdicts skips_match_injected, underflow_falls
    run.end_of_training(model.ptr(), *comm);
  };
  return run_lab(program, argc, argv);
}

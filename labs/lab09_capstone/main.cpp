// Lab 09 driver: the team's training template. Data-parallel DeepFM with everything the seeds'
// engineers ended up with, each settable in one TOML file (--config) or on the command line:
// the shared shuffle cut into global batches (the sampler, set_epoch included), a rung of the
// gradient-sync ladder (--sync), bf16 autocast (--precision), the linear LR rule with warm-up,
// gradient accumulation, dropout on the dense features (--input-dropout, drawn from the job's
// generator), the kit's one-pass Adam (--adam; row-sparse table gradients under --sync sparse on
// the CPU), and the progress line with throughput, memory and cost so far. On top,
// the student's pieces: checkpoints every --checkpoint-every steps, on SIGTERM and at a budget
// stop, written by 09.1 and resumed from by 09.2 (--resume, --resume-from), and the cost meter
// and budget alarm of 09.3 (--instance, --prices, --budget-usd). The apparatus around them is in
// lab09_template.h. Not edited by students.
#include <signal.h>

#include <cstdio>
#include <optional>

#include "lab09.h"
#include "lab09_template.h"

#include "ddplab/amp.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/fused_adam.h"
#include "ddplab/grad_scaler.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/step.h"
#include "ddplab/train.h"

int main(int argc, char** argv) {
  using namespace ddplab;
  lab09::Settings s;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description =
      "Lab 09: the training template — one config, checkpoints and resume, a cost meter and a budget alarm";
  program.add_flags = [&](LabFlags& f) { lab09::add_flags(f, s); };
  lab09::add_probes(program);
  program.body = [&](LabRun& run) {
    auto comm = run.join();
    const int W = run.world_size();
    const bool rank0 = run.rank() == 0;
    const bool save = !run.without("09.1", "no checkpoints are written");
    const bool load = !run.without("09.2", "the job cannot resume and starts from step 0");
    const bool meter = !run.without("09.3", "no cost meter and no budget alarm");
    if (s.budget_usd > 0 && !meter && rank0) log::warn("--budget-usd {} is ignored without 09.3", s.budget_usd);
    const cost::Price price = lab09::billed_price(s, W, rank0);
    lab09::check_precision(s, run.device());

    DeepFMOptions mo;
    mo.embedding_dim = s.embedding_dim;
    // Row-sparse table gradients need the one-pass Adam on the CPU and the sync that takes them.
    mo.sparse_gradients = s.adam == "fused" && run.device().is_cpu() && s.sync == "sparse";
    DeepFM model(mo);
    run.replicate(*model, *comm);
    const int64_t K = s.accumulate, B = run.batch();
    const int64_t global_batch = W * B * K;
    const double target_lr = run.options().effective_lr(global_batch);
    const auto adam = optim::make_adam(s.adam, model->parameters(), torch::optim::AdamOptions(target_lr));
    torch::optim::Optimizer& optimizer = *adam;
    auto sync = dist::make_grad_sync(dist::parse_sync_strategy(s.sync), *comm, model->parameters());
    // fp16: the loss scaler, one decision to skip a step for every rank.
    std::optional<amp::GradScaler> scaler;
    if (s.fp16()) scaler.emplace(amp::GradScalerOptions{}, comm.get());
    amp::GradScaler* const scaler_ptr = scaler ? &*scaler : nullptr;

    const lab09::JobIdentity job{lab09::model_signature(*model), W, B, K, run.options().seed, run.train_size()};
    const int64_t micro_per_epoch = run.whole_global_batches();  // global batches of W x B
    const int64_t steps_per_epoch = micro_per_epoch / K;         // optimizer steps of W x B x K
    if (steps_per_epoch < 1) {
      throw ConfigError(fmt::format("--accumulate {}: an epoch holds only {} global batch(es) of {} x {} samples", K,
                                    micro_per_epoch, W, B));
    }
    const int64_t epochs = run.options().epochs;
    const uint64_t samples_per_epoch = static_cast<uint64_t>(steps_per_epoch * global_batch);
    log::info0(
        "template: {} rank(s) x batch {} x {} micro-batch(es) = global batch {}; {} optimizer steps an epoch; "
        "lr {:g} ({}), warm-up {} step(s); sync {}; {}",
        W, B, K, global_batch, steps_per_epoch, target_lr, run.options().lr_scaling ? "linear rule" : "unscaled",
        s.warmup_steps, s.sync, s.precision);

    // ---- resume: the position a checkpoint holds, or step 0 ----
    const auto dir = lab09::checkpoint_dir(run, s);
    const lab09::Resumed resumed = lab09::resume(run, *comm, s, dir, job, *model, optimizer, scaler_ptr, load, save);
    lab09::Position pos = resumed.at;

    // ---- checkpoints, the clock, the meter ----
    lab09::watch_sigterm();
    lab09::JobClock clock(W, resumed.at.device_seconds);
    lab09::Checkpointer checkpoints(dir, s.keep_checkpoints, save, job, *model, optimizer, scaler_ptr, *comm);
    auto checkpoint = [&] {
      pos.device_seconds = clock.device_seconds();
      checkpoints.write(pos);
      pos.device_seconds = clock.device_seconds();
    };
    auto spend = [&] { return meter ? lab09::meter(price, pos, samples_per_epoch, epochs) : lab09::Spend{}; };
    if (resumed.from.empty() && pos.step == 0) checkpoint();  // a job killed early resumes from here

    run.start_training(model.ptr(), steps_per_epoch * K);
    const bool first_attempt = resumed.from.empty() && run.environment().restart_count == 0;
    std::string stopped;  // "", "budget", "SIGTERM", "max-steps"
    for (int64_t epoch = pos.epoch; epoch < epochs && stopped.empty(); ++epoch) {
      // This rank's slice of every global batch of the epoch's shuffle, from where the job stands.
      auto order = data::global_batch_slice(data::shuffled_order(run.train_size(), run.options().seed, epoch),
                                            steps_per_epoch * K, B, run.rank(), W);
      order.erase(order.begin(), order.begin() + pos.step_in_epoch * K * B);
      data::BatchLoader loader(run.train(), std::move(order), B, run.device());
      run.begin_epoch(epoch);
      for (int64_t k = pos.step_in_epoch; k < steps_per_epoch; ++k) {
        clock.begin_step();
        const double lr = lab09::warmup_lr(target_lr, s.warmup_steps, pos.step);
        for (auto& g : optimizer.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(lr);
        optimizer.zero_grad();
        // K micro-batches, the gradients synced on the last (no_sync on the others), one update.
        bool whole = true;
        for (int64_t m = 0; m < K && whole; ++m) {
          data::Batch batch;
          whole = run.next_batch(loader, batch);
          if (!whole) break;
          batch.dense = lab09::input_dropout(batch.dense, s.input_dropout);  // draws from the generator
          StepParts parts;
          parts.loss = [&] {
            amp::AutocastGuard cast(run.device().type(), s.autocast(), s.low());
            return batch_loss(model, batch) / static_cast<double>(K);
          };
          if (scaler) {
            parts.to_backward = [&](const torch::Tensor& loss) { return scaler->scale(loss); };
            // Skipped on every rank if any saw inf/NaN.
            parts.optimizer_step = [&] { return scaler->step(optimizer, model->parameters()); };
          }
          const double loss = timed_micro_step(run.timer(), optimizer, sync.get(), parts, m + 1 == K);
          run.end_step(batch, loss * static_cast<double>(K));
        }
        if (!whole) {  // --max-steps (counted in micro-batches) ended the run inside this step
          stopped = "max-steps";
          break;
        }
        ++pos.step;
        ++pos.step_in_epoch;
        pos.samples += static_cast<uint64_t>(global_batch);
        if (pos.step_in_epoch == steps_per_epoch) {  // the position a resume starts from
          pos.epoch = epoch + 1;
          pos.step_in_epoch = 0;
        }
        pos.device_seconds = clock.device_seconds();
        clock.end_step();

        if (rank0 && s.sigterm_at_step > 0 && pos.step == s.sigterm_at_step) ::raise(SIGTERM);
        // Every rank stops at the same step: rank 0's budget decision and any rank's SIGTERM.
        const lab09::Spend now = spend();
        const bool over = rank0 && meter && lab09::budget_stop(s, price, W, now, clock, checkpoints);
        stopped = lab09::agree_to_stop(*comm, lab09::sigterm_received(), over);
        if (rank0 && meter && run.options().log_every > 0 && pos.step % run.options().log_every == 0) {
          lab09::print_cost(now, price, epochs);
        }
        const bool periodic = s.checkpoint_every > 0 && pos.step % s.checkpoint_every == 0;
        if (periodic || !stopped.empty()) checkpoint();
        if (stopped.empty() && first_attempt && s.kill_at_step > 0 && pos.step == s.kill_at_step && rank0) {
          log::warn("--kill-at-step {}: rank 0 kills itself (SIGKILL)", s.kill_at_step);
          std::fflush(nullptr);
          ::raise(SIGKILL);
        }
        if (!stopped.empty()) break;
      }
      run.end_epoch();
    }
    pos.device_seconds = clock.device_seconds();
    lab09::report(run, s, price,
                  {stopped, pos, resumed.at, resumed.from, spend(), samples_per_epoch, epochs, meter, save},
                  checkpoints, dir, scaler_ptr);
    run.end_of_training(model.ptr(), *comm);
  };
  return run_lab(program, argc, argv);
}

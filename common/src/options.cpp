// Shared lab flags with environment fallbacks, and their validation.
#include "ddplab/options.h"

#include <fmt/format.h>

#include "ddplab/error.h"
#include "ddplab/log.h"

namespace ddplab {

double LabOptions::effective_lr(int64_t global_batch) const {
  return lr_scaling ? lr * static_cast<double>(global_batch) / 512.0 : lr;
}

namespace {
/// `pattern` with every "{rank}" replaced by `rank`.
std::string with_rank(std::string p, int rank) {
  const std::string r = std::to_string(rank);
  for (auto pos = p.find("{rank}"); pos != std::string::npos; pos = p.find("{rank}", pos + r.size()))
    p.replace(pos, 6, r);
  return p;
}
}  // namespace

std::string LabOptions::report_path(const std::string& lab, int rank) const {
  if (report.empty()) return fmt::format("runs/{}/rank{}.json", lab, rank);
  return with_rank(report, rank);
}

std::string LabOptions::trace_path(int rank) const { return trace.empty() ? std::string() : with_rank(trace, rank); }

nlohmann::json LabOptions::to_json() const {
  return {{"data", data},
          {"epochs", epochs},
          {"batch", batch},
          {"lr", lr},
          {"lr_scaling", lr_scaling},
          {"threads", threads},
          {"device", device},
          {"seed", seed},
          {"log_every", log_every},
          {"max_steps", max_steps},
          {"same_init", same_init},
          {"comm_timeout", comm_timeout},
          {"backend", backend},
          {"train_samples", train_samples},
          {"eval_samples", eval_samples},
          {"trace", trace},
          {"trace_steps", trace_steps}};
}

void add_lab_options(CLI::App& app, LabOptions& o) {
  app.add_option("--data", o.data, "Data set folder written by `ddplab data gen`")
      ->envname("DDPLAB_DATA")
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "Passes over the training split")
      ->envname("DDPLAB_EPOCHS")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "Per-rank batch size")->envname("DDPLAB_BATCH")->capture_default_str();
  app.add_option("--lr", o.lr, "Adam learning rate at a global batch of 512")
      ->envname("DDPLAB_LR")
      ->capture_default_str();
  app.add_flag("--lr-scaling,!--no-lr-scaling", o.lr_scaling, "Scale the learning rate linearly with the global batch")
      ->envname("DDPLAB_LR_SCALING")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "Intra-op threads per rank")->envname("DDPLAB_THREADS")->capture_default_str();
  app.add_option("--device", o.device, "cpu, cuda, cuda:N or auto")->envname("DDPLAB_DEVICE")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of model initialisation and shuffling")
      ->envname("DDPLAB_SEED")
      ->capture_default_str();
  app.add_flag("--same-init,!--rank-init", o.same_init,
               "Seed the model with --seed on every rank (--rank-init: --seed + rank, as independent trainers do)")
      ->envname("DDPLAB_SAME_INIT")
      ->capture_default_str();
  app.add_option("--comm-timeout", o.comm_timeout, "Seconds before a collective or the rendezvous fails")
      ->envname("DDPLAB_COMM_TIMEOUT")
      ->capture_default_str();
  app.add_option("--backend", o.backend,
                 "Collectives: auto (gloo on CPU, nccl on CUDA), gloo, nccl, or mpi (ranks started by mpirun: shared "
                 "memory between the ranks of a machine)")
      ->check(CLI::IsMember({"auto", "gloo", "mpi", "nccl"}))
      ->envname("DDPLAB_BACKEND")
      ->capture_default_str();
  app.add_option("--report", o.report, "Run report path; {rank} is replaced by the rank [runs/<lab>/rank<R>.json]")
      ->envname("DDPLAB_REPORT");
  app.add_option("--log-every", o.log_every, "Progress line every N steps (0: off)")
      ->envname("DDPLAB_LOG_EVERY")
      ->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "Stop after N training steps (0: full epochs)")
      ->envname("DDPLAB_MAX_STEPS")
      ->capture_default_str();
  app.add_option("--train-samples", o.train_samples, "Use only the first N training samples (0: all)")
      ->envname("DDPLAB_TRAIN_SAMPLES")
      ->capture_default_str();
  app.add_option("--eval-samples", o.eval_samples, "Evaluate on the first N test samples (0: all)")
      ->envname("DDPLAB_EVAL_SAMPLES")
      ->capture_default_str();
  app.add_option("--save-model", o.save_model, "Save the final parameters to this file (rank 0)")
      ->envname("DDPLAB_SAVE_MODEL");
  app.add_option("--log-level", o.log_level, "debug, info, warn or error")
      ->envname("DDPLAB_LOG_LEVEL")
      ->capture_default_str();
  app.add_option("--trace", o.trace,
                 "Write a timeline (Chrome Trace Event JSON, for Perfetto) here; {rank} is replaced by the rank")
      ->envname("DDPLAB_TRACE");
  app.add_option("--trace-steps", o.trace_steps, "Timeline keeps the first N and the last N steps (0: all)")
      ->envname("DDPLAB_TRACE_STEPS")
      ->capture_default_str();
}

void validate(const LabOptions& o) {
  auto fail = [](const std::string& flag, const auto& value, const char* need) {
    throw ConfigError(fmt::format("{} {}: {}", flag, value, need));
  };
  if (o.epochs < 1) fail("--epochs", o.epochs, "must be at least 1");
  if (o.batch < 1) fail("--batch", o.batch, "must be at least 1");
  if (!(o.lr > 0.0)) fail("--lr", o.lr, "must be positive");
  if (o.threads < 1) fail("--threads", o.threads, "must be at least 1");
  if (o.log_every < 0) fail("--log-every", o.log_every, "must be 0 (off) or positive");
  if (!(o.comm_timeout > 0.0)) fail("--comm-timeout", o.comm_timeout, "must be positive");
  if (o.max_steps < 0) fail("--max-steps", o.max_steps, "must be 0 (no limit) or positive");
  if (o.trace_steps < 0) fail("--trace-steps", o.trace_steps, "must be 0 (every step) or positive");
  log::parse_level(o.log_level);
}

}  // namespace ddplab

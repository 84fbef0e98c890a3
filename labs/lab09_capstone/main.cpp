// Lab 09 driver: the team's training template. Data-parallel DeepFM with everything the seeds'
// engineers ended up with, each settable in one TOML file (--config) or on the command line:
// the shared shuffle cut into global batches (the sampler, set_epoch included), a rung of the
// gradient-sync ladder (--sync), bf16 autocast (--precision), the linear LR rule with warm-up,
// gradient accumulation, and the progress line with throughput, memory and cost so far. On top,
// the student's pieces: checkpoints every --checkpoint-every steps, on SIGTERM and at a budget
// stop, written by 09.1 and resumed from by 09.2 (--resume, --resume-from), and the cost meter
// and budget alarm of 09.3 (--instance, --prices, --budget-usd). Not edited by students.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include "lab09.h"

#include "ddplab/amp.h"
#include "ddplab/config_file.h"
#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/grad_scaler.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/train.h"

namespace {

using namespace ddplab;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<int> g_sigterm{0};
extern "C" void on_sigterm(int) { g_sigterm.store(1); }

struct Settings {
  std::string sync = "bucketed", precision = "fp32";
  int64_t accumulate = 1, warmup_steps = 0, embedding_dim = 16;
  std::string checkpoint_dir;  // "": checkpoints/ next to the report
  int64_t checkpoint_every = 0, keep_checkpoints = 2;
  bool resume = false;
  std::string resume_from;
  std::string instance = "c6i.large", prices;
  double budget_usd = 0;
  int64_t kill_at_step = 0, sigterm_at_step = 0;
};

/// Checkpoint files are step-<8 digits>.pt; anything else in the folder (the writer's temporary
/// files, which start with '.') is not one.
std::string checkpoint_name(int64_t step) { return fmt::format("step-{:08d}.pt", step); }

std::vector<fs::path> checkpoints_in(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  static const std::regex name("step-[0-9]{8}\\.pt");
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && std::regex_match(e.path().filename().string(), name)) found.push_back(e.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

/// The checkpoint --resume/--resume-from names: the file itself, or the newest in a folder.
std::optional<fs::path> latest_checkpoint(const fs::path& from) {
  std::error_code ec;
  if (fs::is_regular_file(from, ec)) return from;
  const auto all = checkpoints_in(from);
  if (all.empty()) return std::nullopt;
  return all.back();
}

/// Autocast to `dtype` for the scope (the lab 05 guard, the kit's version); off for fp32.
class Autocast {
 public:
  Autocast(bool on, torch::DeviceType device, torch::ScalarType dtype) : on_(on), device_(device) {
    if (!on_) return;
    previous_ = amp::autocast_enabled(device_);
    amp::set_autocast_enabled(device_, true);
    amp::set_autocast_dtype(device_, dtype);
    amp::increment_nesting();
  }
  ~Autocast() {
    if (!on_) return;
    if (amp::decrement_nesting() == 0) amp::clear_cache();
    amp::set_autocast_enabled(device_, previous_);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_, previous_ = false;
  torch::DeviceType device_;
};

/// Which exercises the submission has, each tried once on something tiny before training, so a
/// skeleton's run lists every missing one and trains without them.
struct Present {
  bool save = false, load = false, meter = false;
};

Present probe_exercises(LabRun& run, const fs::path& scratch) {
  Present p;
  torch::nn::Linear lin(2, 1);
  torch::optim::Adam adam(lin->parameters(), torch::optim::AdamOptions(1e-3));
  lab09::Checkpoint c;
  c.job.model = lab09::model_signature(*lin);
  c.rng = lab09::rng_state();
  const fs::path file = scratch / fmt::format("probe-rank{}.pt", run.rank());
  fs::create_directories(scratch);
  p.save = run.probe("the checkpoint writer (09.1)", [&] { lab09::save_checkpoint(file.string(), c, *lin, adam); });
  if (p.save) {
    p.load =
        run.probe("the checkpoint reader (09.2)", [&] { lab09::load_checkpoint(file.string(), c.job, *lin, adam); });
  } else {
    // Nothing to read without 09.1: a file that is not a checkpoint is enough to reach a stub.
    write_file_atomic(file.string(), "not a checkpoint");
    p.load = run.probe("the checkpoint reader (09.2)", [&] {
      try {
        lab09::load_checkpoint(file.string(), c.job, *lin, adam);
      } catch (const lab09::CheckpointError&) {
      }
    });
  }
  std::error_code ec;
  fs::remove(file, ec);
  p.meter = run.probe("the cost meter (09.3)", [] {
    const lab09::Spend s = lab09::meter(cost::kit_prices().front(), lab09::Position{}, 1, 1);
    (void)lab09::over_budget(1.0, s, 0.0, 0.0);
  });
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description =
      "Lab 09: the training template — one config, checkpoints and resume, a cost meter and a budget alarm";
  program.add_flags = [&](LabFlags& f) {
    f.option("--sync", s.sync, "Gradient sync: per-param, bucketed, overlap or sparse")
        ->check(CLI::IsMember({"per-param", "bucketed", "overlap", "sparse"}));
    f.option("--precision", s.precision,
             "fp32; bf16 (autocast, no loss scaling needed); fp16 (autocast with the loss scaler: CUDA only)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
    f.option("--accumulate", s.accumulate, "Micro-batches of --batch per optimizer step")->check(CLI::PositiveNumber);
    f.option("--warmup-steps", s.warmup_steps, "Optimizer steps of linear warm-up to the scaled learning rate")
        ->check(CLI::NonNegativeNumber);
    f.option("--embedding-dim", s.embedding_dim, "DeepFM's embedding dimension")->check(CLI::PositiveNumber);
    f.option("--checkpoint-dir", s.checkpoint_dir, "Where checkpoints go (default: checkpoints/ next to the report)");
    f.option("--checkpoint-every", s.checkpoint_every,
             "Write a checkpoint every N optimizer steps (0: only at the start, on SIGTERM and at a budget stop)")
        ->check(CLI::NonNegativeNumber);
    f.option("--keep-checkpoints", s.keep_checkpoints, "Checkpoints kept in --checkpoint-dir (older ones are removed)")
        ->check(CLI::PositiveNumber);
    f.flag("--resume", s.resume, "Resume from the newest checkpoint in --checkpoint-dir, if there is one");
    f.option("--resume-from", s.resume_from, "Resume from this checkpoint file, or the newest in this folder");
    f.option("--instance", s.instance, "The instance of the price table the job is billed as (--prices)");
    f.option("--prices", s.prices, "Price table (TOML, the format of common/prices.toml; default: the kit's)");
    f.option("--budget-usd", s.budget_usd,
             "Stop cleanly, with a checkpoint, before the spend passes this many dollars (0: no budget)")
        ->check(CLI::NonNegativeNumber);
    f.option("--kill-at-step", s.kill_at_step,
             "Testing: rank 0 kills itself (SIGKILL) after this optimizer step, in a first attempt only")
        ->check(CLI::NonNegativeNumber);
    f.option("--sigterm-at-step", s.sigterm_at_step,
             "Testing: rank 0 sends itself SIGTERM after this optimizer step (as a preemption would)")
        ->check(CLI::NonNegativeNumber);
    add_config_file(f.app());
  };
  program.body = [&](LabRun& run) {
    auto comm = run.join();
    const int W = run.world_size();
    const bool rank0 = run.rank() == 0;
    const fs::path report_dir = fs::absolute(run.options().report_path(run.lab(), run.rank())).parent_path();
    const fs::path ckpt_dir =
        fs::absolute(s.checkpoint_dir.empty() ? report_dir / "checkpoints" : fs::path(s.checkpoint_dir))
            .lexically_normal();
    const Present have = probe_exercises(run, report_dir / "tmp");
    if (!have.save)
      if (rank0) log::warn("09.1 not attempted: no checkpoints are written");
    if (!have.load)
      if (rank0) log::warn("09.2 not attempted: the job cannot resume and starts from step 0");
    if (!have.meter)
      if (rank0) log::warn("09.3 not attempted: no cost meter and no budget alarm");
    if (s.budget_usd > 0 && !have.meter)
      if (rank0) log::warn("--budget-usd {} is ignored without 09.3", s.budget_usd);

    const std::string prices_name = s.prices.empty() ? cost::kKitPrices : s.prices;
    const auto table = cost::prices_from(s.prices);
    const cost::Price price = cost::find_price(table, s.instance, prices_name);
    if (W > price.devices && rank0) {
      log::warn("{} ranks on {} ({} devices an instance): billed as {} device-hours a wall-clock hour", W,
                price.instance, price.devices, W);
    }
    const auto strategy = dist::parse_sync_strategy(s.sync);
    const bool fp16 = s.precision == "fp16";
    const bool autocast = s.precision != "fp32";
    const torch::ScalarType low = fp16 ? torch::kHalf : torch::kBFloat16;
    if (fp16 && !run.device().is_cuda()) {
      throw ConfigError(
          "--precision fp16: LibTorch's CPU autocast runs bfloat16 only (1.13; a CPU has no fp16 matrix product): use "
          "bf16 on the CPU; fp16 with the loss scaler is for a CUDA device (not yet run on a GPU)");
    }

    DeepFMOptions mo;
    mo.embedding_dim = s.embedding_dim;
    DeepFM model(mo);
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    const int64_t K = s.accumulate, B = run.batch();
    const int64_t global_batch = W * B * K;
    const double target_lr = run.options().effective_lr(global_batch);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(target_lr));
    auto sync = dist::make_grad_sync(strategy, *comm, model->parameters());
    // fp16: the loss scaler, one decision to skip a step for every rank.
    std::optional<amp::GradScaler> scaler;
    if (fp16) scaler.emplace(amp::GradScalerOptions{}, comm.get());

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

    // ---- resume ----
    lab09::Position pos;
    std::string resumed_from;
    const std::string from = !s.resume_from.empty() ? s.resume_from : (s.resume ? ckpt_dir.string() : "");
    if (!from.empty()) {
      const auto file = latest_checkpoint(from);
      if (!file) {
        if (!s.resume_from.empty()) throw lab09::CheckpointError(fmt::format("{}: no checkpoint there", from));
        log::info0("resume: no checkpoint in {} yet: starting from step 0", from);
      } else if (!have.load) {
        if (rank0) log::warn("resume: {} is not read (09.2 not attempted): starting from step 0", file->string());
      } else {
        const lab09::Checkpoint c = lab09::load_checkpoint(file->string(), job, *model, optimizer);
        pos = c.at;
        lab09::set_rng_state(c.rng);
        if (scaler && pos.loss_scale > 0) scaler->load(pos.loss_scale, pos.scale_growth_tracker);
        resumed_from = fs::absolute(*file).lexically_normal().string();
        log::info0("resumed from {}: step {} (epoch {}, step {} of it), {} samples, {:.4f} device-hours billed before",
                   resumed_from, pos.step, pos.epoch, pos.step_in_epoch, pos.samples, pos.device_seconds / 3600);
      }
    }
    // A job writes its checkpoints into a folder of its own: one that holds another job's would mix
    // the two (and the older files would be pruned as this job's).
    if (const auto there = checkpoints_in(ckpt_dir);
        have.save && !there.empty() && (resumed_from.empty() || fs::path(resumed_from).parent_path() != ckpt_dir)) {
      throw ConfigError(fmt::format(
          "--checkpoint-dir {} holds checkpoints of another job ({} ... {}): pass --resume to continue that job, or "
          "give this one a folder of its own",
          ckpt_dir.string(), there.front().filename().string(), there.back().filename().string()));
    }
    dist::require_same_across_ranks(*comm, static_cast<uint64_t>(pos.step), "the steps resumed from",
                                    "every rank must resume from the same checkpoint");
    const lab09::Position resumed_at = pos;

    // ---- checkpoints, the clock, the meter ----
    ::signal(SIGTERM, on_sigterm);
    const auto attempt_start = Clock::now();
    auto bill = [&] {
      pos.device_seconds =
          resumed_at.device_seconds + W * std::chrono::duration<double>(Clock::now() - attempt_start).count();
    };
    double last_checkpoint_s = 0, slowest_bytes_per_s = 0;
    // A checkpoint's size once Adam holds its two moments: three times the model's tensors.
    double checkpoint_bytes = 0;
    for (const auto& t : lab09::model_tensors(*model)) checkpoint_bytes += 3.0 * t.numel() * t.element_size();
    std::string last_checkpoint;
    int64_t checkpoints_written = 0;
    auto write_checkpoint = [&] {
      if (!have.save) return;
      bill();
      if (rank0) {
        const auto t = Clock::now();
        fs::create_directories(ckpt_dir);
        if (scaler) {
          pos.loss_scale = scaler->scale_value();
          pos.scale_growth_tracker = scaler->growth_tracker();
        }
        lab09::Checkpoint c{job, pos, lab09::rng_state(), ""};
        const fs::path file = ckpt_dir / checkpoint_name(pos.step);
        lab09::save_checkpoint(file.string(), c, *model, optimizer);
        last_checkpoint = file.string();
        auto all = checkpoints_in(ckpt_dir);
        for (size_t i = 0; i + static_cast<size_t>(s.keep_checkpoints) < all.size(); ++i) fs::remove(all[i]);
        last_checkpoint_s = std::chrono::duration<double>(Clock::now() - t).count();
        // The slowest write rate seen, for the budget alarm's estimate of the next checkpoint.
        const double rate = static_cast<double>(fs::file_size(file)) / std::max(last_checkpoint_s, 1e-6);
        slowest_bytes_per_s = slowest_bytes_per_s > 0 ? std::min(slowest_bytes_per_s, rate) : rate;
        log::info("checkpoint {} written (step {}, {:.2f} s)", file.string(), pos.step, last_checkpoint_s);
      }
      ++checkpoints_written;
      comm->barrier();  // the job goes on only once the checkpoint is whole
      bill();
    };
    auto spend = [&] { return have.meter ? lab09::meter(price, pos, samples_per_epoch, epochs) : lab09::Spend{}; };
    if (resumed_from.empty() && pos.step == 0) write_checkpoint();  // a job killed early resumes from here

    run.start_training(model.ptr(), steps_per_epoch * K);
    const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
    const bool first_attempt = resumed_from.empty() && (!restart || std::string(restart) == "0");
    std::string stopped;              // "", "budget", "SIGTERM", "max-steps"
    std::deque<double> recent_steps;  // seconds of the last steps, for the budget alarm
    StepTimer& timer = run.timer();
    for (int64_t epoch = pos.epoch; epoch < epochs && stopped.empty(); ++epoch) {
      // This rank's slice of every global batch of the epoch's shuffle, from where the job stands.
      auto order = data::global_batch_slice(data::shuffled_order(run.train_size(), run.options().seed, epoch),
                                            steps_per_epoch * K, B, run.rank(), W);
      order.erase(order.begin(), order.begin() + pos.step_in_epoch * K * B);
      data::BatchLoader loader(run.train(), std::move(order), B, run.device());
      run.begin_epoch(epoch);
      for (int64_t k = pos.step_in_epoch; k < steps_per_epoch; ++k) {
        const auto step_start = Clock::now();
        const double lr =
            s.warmup_steps > 0
                ? target_lr * std::min(1.0, static_cast<double>(pos.step + 1) / static_cast<double>(s.warmup_steps))
                : target_lr;
        for (auto& g : optimizer.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(lr);
        optimizer.zero_grad();
        bool whole = true;
        for (int64_t m = 0; m < K; ++m) {
          data::Batch batch;
          if (!run.next_batch(loader, batch)) {
            whole = false;
            break;
          }
          torch::Tensor loss;
          {
            auto scope = timer.scope(Phase::kForward);
            Autocast cast(autocast, run.device().type(), low);
            loss = batch_loss(model, batch) / static_cast<double>(K);
          }
          const bool last = m + 1 == K;
          {
            std::optional<dist::GradSync::NoSync> guard;
            if (!last) guard.emplace(*sync);
            const torch::Tensor to_backward = scaler ? scaler->scale(loss) : loss;
            sync->before_backward(to_backward);
            {
              auto scope = timer.scope(Phase::kBackward);
              to_backward.backward();
            }
            auto scope = timer.scope(Phase::kComm);
            sync->finish();
          }
          if (last) {
            auto scope = timer.scope(Phase::kOptimizer);
            if (scaler) {
              scaler->step(optimizer, model->parameters());  // skipped on every rank if any saw inf/NaN
            } else {
              optimizer.step();
            }
          }
          run.end_step(batch, loss.item<double>() * static_cast<double>(K));
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
        bill();
        recent_steps.push_back(std::chrono::duration<double>(Clock::now() - step_start).count());
        if (recent_steps.size() > 10) recent_steps.pop_front();

        if (rank0 && s.sigterm_at_step > 0 && pos.step == s.sigterm_at_step) ::raise(SIGTERM);
        // Every rank stops at the same step: rank 0's budget decision and any rank's SIGTERM.
        const lab09::Spend now = spend();
        bool budget_stop = false;
        if (rank0 && have.meter && s.budget_usd > 0) {
          // Margins against a noisy clock: the slowest of the recent steps, and twice a full
          // checkpoint's size at the slowest write rate seen (the first checkpoint has no
          // optimizer state yet: a third of the size).
          const double usd_per_s = W * price.usd_per_device_hour() / 3600;
          const double step_s = *std::max_element(recent_steps.begin(), recent_steps.end());
          const double checkpoint_s = slowest_bytes_per_s > 0 ? 2 * checkpoint_bytes / slowest_bytes_per_s : 0;
          budget_stop = lab09::over_budget(s.budget_usd, now, step_s * usd_per_s, checkpoint_s * usd_per_s);
        }
        torch::Tensor flags = torch::tensor({g_sigterm.load() ? 1.0F : 0.0F, budget_stop ? 1.0F : 0.0F});
        comm->allreduce(flags);
        if (flags[1].item<float>() > 0) stopped = "budget";
        if (flags[0].item<float>() > 0) stopped = "SIGTERM";
        if (rank0 && have.meter && run.options().log_every > 0 && pos.step % run.options().log_every == 0) {
          log::info(
              "cost: ${:.6f} so far ({:.5f} device-hours of {} at ${:.4f} a device-hour); projected ${:.6f} an "
              "epoch, ${:.6f} for {} epoch(s), ${:.6f} per million samples",
              now.usd, now.device_hours, price.instance, price.usd_per_device_hour(), now.usd_per_epoch,
              now.usd_to_finish, epochs, now.usd_per_million_samples);
        }
        const bool periodic = s.checkpoint_every > 0 && pos.step % s.checkpoint_every == 0;
        if (periodic || !stopped.empty()) write_checkpoint();
        if (stopped.empty() && first_attempt && s.kill_at_step > 0 && pos.step == s.kill_at_step && rank0) {
          log::warn("--kill-at-step {}: rank 0 kills itself (SIGKILL)", s.kill_at_step);
          std::fflush(nullptr);
          ::raise(SIGKILL);
        }
        if (!stopped.empty()) break;
      }
      run.end_epoch();
    }
    bill();
    const lab09::Spend final_spend = spend();
    if (stopped == "budget") {
      if (rank0)
        log::warn(
            "stopped by the budget alarm after step {}: ${:.6f} spent of the ${:g} budget; the next step and a "
            "checkpoint would have passed it; resume with --resume-from {}",
            pos.step, final_spend.usd, s.budget_usd, ckpt_dir.string());
    } else if (stopped == "SIGTERM") {
      if (rank0) {
        log::warn("stopped by SIGTERM after step {}; {}", pos.step,
                  have.save ? fmt::format("checkpoint {} written; resume with --resume-from {}",
                                          checkpoint_name(pos.step), ckpt_dir.string())
                            : std::string("no checkpoint written (09.1 not attempted)"));
      }
    }
    if (have.meter) {
      log::info0(
          "cost: ${:.6f} for {:.5f} device-hours ({} x ${:.4f} a device-hour, {}); ${:.6f} an epoch projected, "
          "${:.6f} per million samples",
          final_spend.usd, final_spend.device_hours, price.instance, price.usd_per_device_hour(), price.as_of,
          final_spend.usd_per_epoch, final_spend.usd_per_million_samples);
    }
    nlohmann::json& r = run.report().json();
    if (scaler) {
      r["loss_scaler"] = {{"scale", scaler->scale_value()},
                          {"growth_tracker", scaler->growth_tracker()},
                          {"skipped_steps", scaler->skipped_steps()}};
    }
    r["checkpoint"] = {{"dir", ckpt_dir.string()},     {"written", checkpoints_written}, {"last", last_checkpoint},
                       {"resumed_from", resumed_from}, {"resumed_at", resumed_at},       {"at_end", pos}};
    r["cost"] = {{"instance", price.instance},
                 {"devices", price.devices},
                 {"usd_per_hour", price.usd_per_hour},
                 {"prices", s.prices},
                 {"price_source", price.source},
                 {"as_of", price.as_of},
                 {"metered", have.meter},
                 {"device_hours", final_spend.device_hours},
                 {"usd", final_spend.usd},
                 {"usd_per_epoch", final_spend.usd_per_epoch},
                 {"usd_to_finish", final_spend.usd_to_finish},
                 {"usd_per_million_samples", final_spend.usd_per_million_samples},
                 {"samples", pos.samples},
                 {"samples_per_epoch", samples_per_epoch},
                 {"epochs", epochs},
                 {"budget_usd", s.budget_usd},
                 {"stopped", stopped}};
    run.evaluate_on_rank0(model, *comm);
  };
  return run_lab(program, argc, argv);
}

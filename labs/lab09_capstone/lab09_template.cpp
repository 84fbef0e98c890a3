// The training template's apparatus (see lab09_template.h). Not edited by students.
#include "lab09_template.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <regex>

#include <fmt/format.h>

#include "ddplab/config_file.h"
#include "ddplab/dist/agree.h"
#include "ddplab/log.h"
#include "ddplab/report.h"

namespace lab09 {

namespace fs = std::filesystem;
using ddplab::ConfigError;

// ---- settings and probes ----

void add_flags(ddplab::LabFlags& f, Settings& s) {
  f.option("--sync", s.sync, "Gradient sync: per-param, bucketed, overlap or sparse")
      ->check(CLI::IsMember({"per-param", "bucketed", "overlap", "sparse"}));
  f.option("--precision", s.precision,
           "fp32; bf16 (autocast, no loss scaling needed); fp16 (autocast with the loss scaler: CUDA only)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  f.option("--adam", s.adam,
           "Adam implementation: fused (the kit's one pass; row-sparse embedding gradients under --sync sparse on the "
           "CPU) or torch (torch::optim::Adam, dense gradients)")
      ->check(CLI::IsMember({"fused", "torch"}));
  f.option("--accumulate", s.accumulate, "Micro-batches of --batch per optimizer step")->check(CLI::PositiveNumber);
  f.option("--warmup-steps", s.warmup_steps, "Optimizer steps of linear warm-up to the scaled learning rate")
      ->check(CLI::NonNegativeNumber);
  f.option("--embedding-dim", s.embedding_dim, "DeepFM's embedding dimension")->check(CLI::PositiveNumber);
  f.option("--input-dropout", s.input_dropout,
           "Dropout on the dense features while training, drawn from the job's random number generator (which a "
           "checkpoint saves and a resume restores); 0: none")
      ->check(CLI::Range(0.0, 0.9));
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
  ddplab::add_config_file(f.app());
}

void check_precision(const Settings& s, const torch::Device& device) {
  if (s.fp16() && !device.is_cuda()) {
    throw ConfigError(
        "--precision fp16: LibTorch's CPU autocast runs bfloat16 only (1.13; a CPU has no fp16 matrix product): use "
        "bf16 on the CPU; fp16 with the loss scaler is for a CUDA device (not yet run on a GPU)");
  }
}

namespace {
/// The probes' one-layer model, its optimizer and a checkpoint of it, in a scratch folder.
struct ProbeRig {
  torch::nn::Linear lin{2, 1};
  torch::optim::Adam adam{lin->parameters(), torch::optim::AdamOptions(1e-3)};
  Checkpoint c;
  fs::path dir = fs::temp_directory_path() / fmt::format("ddplab-lab09-probe-{}", ::getpid());
  fs::path file = dir / "probe.pt";
  bool written = false;
  ProbeRig() {
    c.job.model = model_signature(*lin);
    c.rng = rng_state();
    fs::create_directories(dir);
  }
  ~ProbeRig() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
}  // namespace

void add_probes(ddplab::LabProgram& program) {
  auto rig = std::make_shared<std::unique_ptr<ProbeRig>>();
  program.probe("09.1", "the checkpoint writer", [rig](ddplab::ProbeContext&) {
    *rig = std::make_unique<ProbeRig>();
    auto& r = **rig;
    save_checkpoint(r.file.string(), r.c, *r.lin, r.adam);
    r.written = true;
  });
  program.probe("09.2", "the checkpoint reader", [rig](ddplab::ProbeContext&) {
    if (!*rig) *rig = std::make_unique<ProbeRig>();
    auto& r = **rig;
    if (r.written) {
      load_checkpoint(r.file.string(), r.c.job, *r.lin, r.adam);
    } else {  // nothing to read without 09.1: a file that is not a checkpoint is enough to reach a stub
      ddplab::write_file_atomic(r.file.string(), "not a checkpoint");
      try {
        load_checkpoint(r.file.string(), r.c.job, *r.lin, r.adam);
      } catch (const CheckpointError&) {
      }
    }
    rig->reset();
  });
  program.probe("09.3", "the cost meter", [](ddplab::ProbeContext&) {
    const Spend s = meter(ddplab::cost::kit_prices().front(), Position{}, 1, 1);
    (void)over_budget(1.0, s, 0.0, 0.0);
  });
}

// ---- checkpoint files ----

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

std::optional<fs::path> latest_checkpoint(const fs::path& from) {
  std::error_code ec;
  if (fs::is_regular_file(from, ec)) return from;
  const auto all = checkpoints_in(from);
  if (all.empty()) return std::nullopt;
  return all.back();
}

fs::path checkpoint_dir(const ddplab::LabRun& run, const Settings& s) {
  const fs::path report_dir = fs::absolute(run.options().report_path(run.lab(), run.rank())).parent_path();
  return fs::absolute(s.checkpoint_dir.empty() ? report_dir / "checkpoints" : fs::path(s.checkpoint_dir))
      .lexically_normal();
}

ddplab::cost::Price billed_price(const Settings& s, int world, bool rank0) {
  const std::string prices_name = s.prices.empty() ? ddplab::cost::kKitPrices : s.prices;
  const auto table = ddplab::cost::prices_from(s.prices);
  const ddplab::cost::Price price = ddplab::cost::find_price(table, s.instance, prices_name);
  if (world > price.devices && rank0) {
    ddplab::log::warn("{} ranks on {} ({} devices an instance): billed as {} device-hours a wall-clock hour", world,
                      price.instance, price.devices, world);
  }
  return price;
}

// ---- resume ----

Resumed resume(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const Settings& s, const fs::path& dir,
               const JobIdentity& job, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
               ddplab::amp::GradScaler* scaler, bool can_load, bool can_save) {
  Resumed r;
  const std::string from = !s.resume_from.empty() ? s.resume_from : (s.resume ? dir.string() : "");
  if (!from.empty()) {
    const auto file = latest_checkpoint(from);
    if (!file) {
      if (!s.resume_from.empty()) throw CheckpointError(fmt::format("{}: no checkpoint there", from));
      ddplab::log::info0("resume: no checkpoint in {} yet: starting from step 0", from);
    } else if (!can_load) {
      if (run.rank() == 0) {
        ddplab::log::warn("resume: {} is not read (09.2 not attempted): starting from step 0", file->string());
      }
    } else {
      const Checkpoint c = load_checkpoint(file->string(), job, model, optimizer);
      r.at = c.at;
      // The generator state 09.2 returns: said by name when it is missing or not one, rather than
      // left to LibTorch's message about an undefined tensor.
      if (!c.rng.defined()) {
        throw CheckpointError(fmt::format(
            "{}: load_checkpoint (09.2) returned no generator state (Checkpoint::rng is an undefined tensor): return "
            "the \"rng\" tensor the checkpoint holds, not applied; the template restores the generator from it",
            file->string()));
      }
      try {
        set_rng_state(c.rng);
      } catch (const std::exception& e) {
        const std::string m = e.what();
        throw CheckpointError(
            fmt::format("{}: the generator state load_checkpoint (09.2) returned is not one ({} of {} elements): {}",
                        file->string(), c10::toString(c.rng.scalar_type()), c.rng.numel(), m.substr(0, m.find('\n'))));
      }
      if (scaler != nullptr && r.at.loss_scale > 0) scaler->load(r.at.loss_scale, r.at.scale_growth_tracker);
      r.from = fs::absolute(*file).lexically_normal().string();
      ddplab::log::info0(
          "resumed from {}: step {} (epoch {}, step {} of it), {} samples, {:.4f} device-hours billed before", r.from,
          r.at.step, r.at.epoch, r.at.step_in_epoch, r.at.samples, r.at.device_seconds / 3600);
    }
  }
  // A job writes its checkpoints into a folder of its own: one that holds another job's would mix
  // the two (and the older files would be pruned as this job's).
  if (const auto there = checkpoints_in(dir);
      can_save && !there.empty() && (r.from.empty() || fs::path(r.from).parent_path() != dir)) {
    throw ConfigError(fmt::format(
        "--checkpoint-dir {} holds checkpoints of another job ({} ... {}): pass --resume to continue that job, or "
        "give this one a folder of its own",
        dir.string(), there.front().filename().string(), there.back().filename().string()));
  }
  ddplab::dist::require_same_across_ranks(comm, static_cast<uint64_t>(r.at.step), "the steps resumed from",
                                          "every rank must resume from the same checkpoint");
  return r;
}

// ---- checkpoints ----

Checkpointer::Checkpointer(fs::path dir, int64_t keep, bool enabled, const JobIdentity& job,
                           const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                           ddplab::amp::GradScaler* scaler, ddplab::dist::Communicator& comm)
    : dir_(std::move(dir)),
      keep_(keep),
      enabled_(enabled),
      job_(job),
      model_(model),
      optimizer_(optimizer),
      scaler_(scaler),
      comm_(comm) {
  // A checkpoint's size once Adam holds its two moments: three times the model's tensors.
  for (const auto& t : model_tensors(model)) full_bytes_ += 3.0 * static_cast<double>(t.numel() * t.element_size());
}

void Checkpointer::write(Position& at) {
  if (!enabled_) return;
  if (comm_.rank() == 0) {
    const auto t = std::chrono::steady_clock::now();
    fs::create_directories(dir_);
    if (scaler_ != nullptr) {
      at.loss_scale = scaler_->scale_value();
      at.scale_growth_tracker = scaler_->growth_tracker();
    }
    const Checkpoint c{job_, at, rng_state(), ""};
    const fs::path file = dir_ / checkpoint_name(at.step);
    save_checkpoint(file.string(), c, model_, optimizer_);
    last_ = file.string();
    const auto all = checkpoints_in(dir_);
    for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i) fs::remove(all[i]);
    const double seconds = ddplab::seconds_since(t);
    // The slowest write rate seen, for the budget alarm's estimate of the next checkpoint.
    const double rate = static_cast<double>(fs::file_size(file)) / std::max(seconds, 1e-6);
    slowest_bytes_per_s_ = slowest_bytes_per_s_ > 0 ? std::min(slowest_bytes_per_s_, rate) : rate;
    ddplab::log::info("checkpoint {} written (step {}, {:.2f} s)", file.string(), at.step, seconds);
  }
  ++written_;
  comm_.barrier();  // the job goes on only once the checkpoint is whole
}

double Checkpointer::full_write_seconds() const {
  return slowest_bytes_per_s_ > 0 ? full_bytes_ / slowest_bytes_per_s_ : 0;
}

// ---- the clock, the alarm, the stop ----

JobClock::JobClock(int world, double billed_before) : world_(world), before_(billed_before), start_(Clock::now()) {}

double JobClock::device_seconds() const { return before_ + world_ * ddplab::seconds_since(start_); }

void JobClock::begin_step() { step_start_ = Clock::now(); }

void JobClock::end_step() {
  recent_.push_back(ddplab::seconds_since(step_start_));
  if (recent_.size() > 10) recent_.pop_front();
}

double JobClock::slowest_recent_step() const {
  return recent_.empty() ? 0.0 : *std::max_element(recent_.begin(), recent_.end());
}

bool budget_stop(const Settings& s, const ddplab::cost::Price& price, int world, const Spend& now,
                 const JobClock& clock, const Checkpointer& checkpoints) {
  if (s.budget_usd <= 0) return false;
  // Margins against a noisy clock: the slowest of the recent steps, and twice a full checkpoint's
  // size at the slowest write rate seen (the first checkpoint has no optimizer state yet).
  const double usd_per_s = world * price.usd_per_device_hour() / 3600;
  return over_budget(s.budget_usd, now, clock.slowest_recent_step() * usd_per_s,
                     2 * checkpoints.full_write_seconds() * usd_per_s);
}

namespace {
std::atomic<int> g_sigterm{0};
extern "C" void on_sigterm(int) { g_sigterm.store(1); }
}  // namespace

void watch_sigterm() { ::signal(SIGTERM, on_sigterm); }
bool sigterm_received() { return g_sigterm.load() != 0; }

std::string agree_to_stop(ddplab::dist::Communicator& comm, bool sigterm, bool budget) {
  torch::Tensor flags = torch::tensor({sigterm ? 1.0F : 0.0F, budget ? 1.0F : 0.0F});
  comm.allreduce(flags);
  if (flags[0].item<float>() > 0) return "SIGTERM";
  if (flags[1].item<float>() > 0) return "budget";
  return "";
}

torch::Tensor input_dropout(const torch::Tensor& dense, double p) {
  if (p <= 0) return dense;
  const torch::Tensor keep = torch::empty(dense.sizes(), torch::kFloat32).bernoulli_(1.0 - p);
  return dense * keep.to(dense.device(), dense.scalar_type()).div_(1.0 - p);
}

double warmup_lr(double target, int64_t warmup, int64_t step) {
  if (warmup <= 0) return target;
  return target * std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(warmup));
}

void print_cost(const Spend& now, const ddplab::cost::Price& price, int64_t epochs) {
  ddplab::log::info(
      "cost: ${:.6f} so far ({:.5f} device-hours of {} at ${:.4f} a device-hour); projected ${:.6f} an epoch, "
      "${:.6f} for {} epoch(s), ${:.6f} per million samples",
      now.usd, now.device_hours, price.instance, price.usd_per_device_hour(), now.usd_per_epoch, now.usd_to_finish,
      epochs, now.usd_per_million_samples);
}

// ---- the end ----

void report(ddplab::LabRun& run, const Settings& s, const ddplab::cost::Price& price, const Ending& end,
            const Checkpointer& checkpoints, const fs::path& dir, const ddplab::amp::GradScaler* scaler) {
  const bool rank0 = run.rank() == 0;
  const Spend& spend = end.spend;
  if (end.stopped == "budget" && rank0) {
    ddplab::log::warn(
        "stopped by the budget alarm after step {}: ${:.6f} spent of the ${:g} budget; the next step and a checkpoint "
        "would have passed it; resume with --resume-from {}",
        end.at.step, spend.usd, s.budget_usd, dir.string());
  }
  if (end.stopped == "SIGTERM") {
    run.report().verdict("sigterm_checkpoint", end.saved,
                         fmt::format("stopped by SIGTERM after step {}; {}", end.at.step,
                                     end.saved ? fmt::format("checkpoint {} written; resume with --resume-from {}",
                                                             checkpoint_name(end.at.step), dir.string())
                                               : std::string("no checkpoint written (09.1 not attempted)")),
                         {{"step", end.at.step}, {"checkpoint", end.saved ? checkpoint_name(end.at.step) : ""}});
  }
  if (end.metered) {
    ddplab::log::info0(
        "cost: ${:.6f} for {:.5f} device-hours ({} x ${:.4f} a device-hour, {}); ${:.6f} an epoch projected, "
        "${:.6f} per million samples",
        spend.usd, spend.device_hours, price.instance, price.usd_per_device_hour(), price.as_of, spend.usd_per_epoch,
        spend.usd_per_million_samples);
  }
  nlohmann::json& r = run.report().json();
  if (scaler != nullptr) {
    r["loss_scaler"] = {{"scale", scaler->scale_value()},
                        {"growth_tracker", scaler->growth_tracker()},
                        {"skipped_steps", scaler->skipped_steps()}};
  }
  // What `ddplab forecast` extends to more ranks: the stop flags' all-reduce of every step.
  r["template"] = {{"control_allreduces_per_step", 1}};
  r["checkpoint"] = {{"dir", dir.string()},          {"written", checkpoints.written()},
                     {"last", checkpoints.last()},   {"resumed_from", end.resumed_from},
                     {"resumed_at", end.resumed_at}, {"at_end", end.at}};
  r["cost"] = {{"instance", price.instance},
               {"devices", price.devices},
               {"usd_per_hour", price.usd_per_hour},
               {"prices", s.prices},
               {"price_source", price.source},
               {"as_of", price.as_of},
               {"metered", end.metered},
               {"device_hours", spend.device_hours},
               // The kit's own measurement, from which the grader recomputes the device-hours.
               {"device_seconds", end.at.device_seconds},
               {"usd", spend.usd},
               {"usd_per_epoch", spend.usd_per_epoch},
               {"usd_to_finish", spend.usd_to_finish},
               {"usd_per_million_samples", spend.usd_per_million_samples},
               {"samples", end.at.samples},
               {"samples_per_epoch", end.samples_per_epoch},
               {"epochs", end.epochs},
               {"budget_usd", s.budget_usd},
               {"stopped", end.stopped}};
}

}  // namespace lab09

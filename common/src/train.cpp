// Shared lab scaffolding: set-up, the timed step loop's bookkeeping, the end-of-run summary.
#include "ddplab/train.h"

#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "ddplab/data/error.h"
#include "ddplab/deepfm.h"
#include "ddplab/log.h"
#include "ddplab/memory.h"
#include "ddplab/system.h"

namespace ddplab {

LabRun::LabRun(std::string lab, LabOptions opts)
    : lab_(std::move(lab)), opts_(std::move(opts)), env_(dist::detect_environment()),
      report_(lab_, env_.rank, env_.world_size) {
  validate(opts_);
  if (env_.distributed()) set_process_rank(env_.rank);
  log::set_level(log::parse_level(opts_.log_level));
  sys::configure_threads(opts_.threads);
  sys::tune_allocator();
  device_ = sys::parse_device(opts_.device);
  // One GPU per rank on a node: NCCL refuses two ranks of a communicator on one device.
  if (device_.is_cuda() && !device_.has_index()) device_ = torch::Device(torch::kCUDA, static_cast<int8_t>(env_.local_rank));
  torch::manual_seed(opts_.seed + (opts_.same_init ? 0 : static_cast<uint64_t>(env_.rank)));
  if (device_.is_cuda()) timer_.set_synchronizer([] { torch::cuda::synchronize(); });

  train_ = std::make_unique<data::Dataset>(opts_.data, data::Split::kTrain);
  test_ = std::make_unique<data::Dataset>(opts_.data, data::Split::kTest);
  train_size_ = train_->size();
  if (opts_.train_samples > 0) {
    if (opts_.train_samples > train_->size()) {
      throw ConfigError(fmt::format("--train-samples {}: the training split of {} holds only {} samples",
                                    opts_.train_samples, opts_.data, train_->size()));
    }
    train_size_ = opts_.train_samples;
  }
  eval_size_ = test_->size();
  if (opts_.eval_samples > 0) {
    if (opts_.eval_samples > test_->size()) {
      throw ConfigError(fmt::format("--eval-samples {}: the test split of {} holds only {} samples",
                                    opts_.eval_samples, opts_.data, test_->size()));
    }
    eval_size_ = opts_.eval_samples;
  }

  nlohmann::json cfg = opts_.to_json();
  cfg["global_batch"] = global_batch();
  cfg["effective_lr"] = lr();
  cfg["train_size"] = train_size_;
  cfg["eval_size"] = eval_size_;
  cfg["data_seed"] = train_->metadata().seed;
  cfg["launcher"] = env_.source;
  cfg["local_rank"] = env_.local_rank;
  report_.set_config(cfg);
  report_.set_device(device_.str(), opts_.threads);
  log::info0("{}: {} training and {} test samples from {}, batch {} x {} rank(s), lr {:.3g}, device {}, {} thread(s)",
             lab_, train_size_, eval_size_, opts_.data, opts_.batch, env_.world_size, lr(), device_.str(), opts_.threads);
  if (env_.distributed()) log::info("{}", env_.describe());
}

LabRun::~LabRun() = default;

void LabRun::start_training(std::shared_ptr<torch::nn::Module> model, int64_t steps_per_epoch) {
  DDPLAB_CHECK(model != nullptr, "start_training: no model");
  int64_t total = steps_per_epoch * opts_.epochs;
  if (opts_.max_steps > 0) total = std::min(total, opts_.max_steps);
  progress_ = std::make_unique<Progress>(total, opts_.log_every, global_batch());
  model_ = std::move(model);
  initial_digest_ = parameter_digest(*model_);
}

void LabRun::begin_epoch(int64_t epoch) {
  epoch_ = epoch;
  epoch_steps_ = 0;
  ledger_ = SampleLedger();
  epoch_start_ = StepTimer::Clock::now();
}

bool LabRun::next_batch(data::BatchLoader& loader, data::Batch& batch) {
  if (opts_.max_steps > 0 && step_ >= opts_.max_steps) return false;
  timer_.begin_step();
  bool got = false;
  {
    auto scope = timer_.scope(Phase::kDataWait);
    got = loader.next(batch);
  }
  if (!got) timer_.cancel_step();
  return got;
}

void LabRun::end_step(const data::Batch& batch, double loss) {
  timer_.end_step();
  ledger_.add(batch.indices);
  processed_ += static_cast<uint64_t>(batch.size());
  report_.add_step(epoch_, loss);
  if (!std::isfinite(loss)) log::warn("step {}: loss is {}", step_, loss);
  if (progress_) progress_->update(step_, loss);
  ++step_;
  ++epoch_steps_;
}

void LabRun::end_epoch() {
  const double secs = seconds_since(epoch_start_);
  report_.add_epoch(epoch_, epoch_steps_, ledger_, secs);
  log::info0("epoch {} done: {} steps, {} samples in {:.1f} s", epoch_, epoch_steps_, ledger_.count(), secs);
}

void LabRun::not_attempted(const NotImplemented& e) {
  report_.add_not_attempted(e.exercise());
  log::warn("exercise {} is not implemented yet (not attempted): {}", e.exercise(), e.message());
}

void LabRun::set_eval(const EvalResult& r) { eval_ = r; }

int LabRun::finish() {
  const torch::nn::Module* model = model_.get();
  const auto& meta = train_->metadata();
  if (model != nullptr) {
    report_.set_params(initial_digest_, parameter_digest(*model), count_parameters(*model));
  }
  if (eval_) report_.set_eval(eval_->auc, eval_->logloss, eval_->samples, meta.teacher_test_auc, meta.teacher_test_logloss);
  report_.set_phases(timer_);
  // Every rank processed distinct samples only when a sampler shards the data; the run itself
  // cannot know that, so "unique" is this rank's own distinct count and the grader recomputes
  // the job's from the epoch digests.
  report_.set_samples(processed_, processed_);
  report_.capture_memory();
  if (comm_ != nullptr) report_.json()["comm"] = comm_->stats().to_json();
  const bool attempted = report_.not_attempted().empty();
  report_.set_status(attempted ? "ok" : "not_attempted");
  const std::string path = opts_.report_path(lab_, env_.rank);
  report_.write(path);

  if (model != nullptr && !opts_.save_model.empty() && env_.rank == 0) {
    torch::serialize::OutputArchive archive;
    model->save(archive);
    const std::string tmp = opts_.save_model + ".tmp";
    archive.save_to(tmp);
    if (std::rename(tmp.c_str(), opts_.save_model.c_str()) != 0) {
      throw Error(fmt::format("cannot save the model to {}", opts_.save_model));
    }
  }

  const double wall = timer_.wall();
  if (timer_.steps() > 0 && wall > 0) {
    std::string split;
    for (int i = 0; i < kNumPhases; ++i) {
      split += fmt::format("{}{} {:.0f}%", i ? " | " : "", phase_name(static_cast<Phase>(i)),
                           100.0 * timer_.total(static_cast<Phase>(i)) / wall);
    }
    log::info0("{}: {} steps in {:.1f} s, {:.0f} samples/s per rank; {}; peak rss {}", lab_, timer_.steps(), wall,
               static_cast<double>(processed_) / wall, split, memory::human_bytes(memory::peak_rss_bytes()));
  }
  if (eval_) {
    log::info0("{}: test AUC {:.4f} (teacher {:.4f}, gap {:.4f}) | log-loss {:.4f} (teacher {:.4f}) on {} samples", lab_,
               eval_->auc, meta.teacher_test_auc, meta.teacher_test_auc - eval_->auc, eval_->logloss,
               meta.teacher_test_logloss, eval_->samples);
  }
  log::info0("{}: report written to {}", lab_, path);
  if (!attempted) {
    std::string ids;
    for (const auto& e : report_.not_attempted()) ids += (ids.empty() ? "" : ", ") + e;
    log::warn("{}: not attempted yet: exercise(s) {}", lab_, ids);
    return kExitNotAttempted;
  }
  return kExitOk;
}

void LabRun::fail(const std::string& message) {
  report_.set_status("error", message);
  report_.set_phases(timer_);
  report_.capture_memory();
  try {
    report_.write(opts_.report_path(lab_, env_.rank));
  } catch (const std::exception& e) {
    log::error("could not write the run report: {}", e.what());
  }
}

int run_lab(const LabProgram& program, int argc, char** argv) {
  CLI::App app{program.description, program.name};
  LabOptions opts;
  add_lab_options(app, opts);
  if (program.add_flags) program.add_flags(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::unique_ptr<LabRun> run;
  try {
    run = std::make_unique<LabRun>(program.name, opts);
    program.body(*run);
    return run->finish();
  } catch (const NotImplemented& e) {
    // The body lets a stub escape only when it cannot go on; record it and still write the report.
    if (!run) throw;
    run->not_attempted(e);
    return run->finish();
  } catch (const ConfigError& e) {
    log::error("{}", e.what());
    if (run) run->fail(e.what());
    return kExitUsage;
  } catch (const data::DataError& e) {
    log::error("{}", e.what());
    if (run) run->fail(e.what());
    return kExitError;
  } catch (const std::exception& e) {
    log::error("{}", e.what());
    if (run) run->fail(e.what());
    return kExitError;
  }
}

}  // namespace ddplab

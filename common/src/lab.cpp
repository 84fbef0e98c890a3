// Shared lab scaffolding: set-up, the lab's own flags, joining the job, the epoch loop's
// bookkeeping, and the end-of-run summary and report.
#include "ddplab/lab.h"
#include "ddplab/openblas_kernels.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <map>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "ddplab/data/error.h"
#include "ddplab/deepfm.h"
#include "ddplab/dist/loopback.h"
#include "ddplab/dist/process_group.h"
#include "ddplab/optim.h"
#include "ddplab/log.h"
#include "ddplab/memory.h"
#include "ddplab/nvml.h"
#include "ddplab/system.h"

namespace ddplab {

// ---- LabFlags ----

namespace {
/// "--no-shuffle,-x" -> "no-shuffle": the first long name, without dashes.
std::string long_name(const std::string& name) {
  std::string first = name.substr(0, name.find(','));
  while (!first.empty() && first.front() == '-') first.erase(0, 1);
  DDPLAB_CHECK(!first.empty(), fmt::format("lab flag '{}' has no long name", name));
  return first;
}
}  // namespace

std::string LabFlags::env_name(const std::string& name) {
  std::string env = "DDPLAB_";
  for (char c : long_name(name)) env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return env;
}

std::string LabFlags::config_key(const std::string& name) {
  std::string key = long_name(name);
  for (char& c : key) c = c == '-' ? '_' : c;
  return key;
}

CLI::Option* LabFlags::flag(const std::string& name, bool& value, const std::string& help) {
  CLI::Option* o = app_.add_flag(name, value, help)->envname(env_name(name));
  record(name, [&value] { return nlohmann::json(value); });
  return o;
}

CLI::Option* LabFlags::optimizer(std::string& name, const std::string& why_default) {
  return option("--optimizer", name, fmt::format("adam or sgd ({}: {})", name, why_default))
      ->check(CLI::IsMember(optim::names()));
}

void LabFlags::record(const std::string& name, std::function<nlohmann::json()> get) {
  values_.emplace_back(config_key(name), std::move(get));
}

nlohmann::json LabFlags::values() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, get] : values_) j[key] = get();
  return j;
}

// ---- LabRun: set-up ----

LabRun::LabRun(std::string lab, LabOptions opts, nlohmann::json lab_flags)
    : lab_(std::move(lab)),
      opts_(std::move(opts)),
      env_(dist::detect_environment()),
      report_(lab_, env_.rank, env_.world_size) {
  validate(opts_);
  if (env_.distributed()) set_process_rank(env_.rank);
  log::set_level(log::parse_level(opts_.log_level));
  sys::configure_threads(opts_.threads);
  sys::tune_allocator();
  // One GPU per rank on a node: NCCL refuses two ranks of a communicator on one device.
  device_ = sys::device_for_rank(sys::parse_device(opts_.device), env_.local_rank);
  torch::manual_seed(opts_.seed + (opts_.same_init ? 0 : static_cast<uint64_t>(env_.rank)));
  if (device_.is_cuda()) timer_.set_synchronizer([] { torch::cuda::synchronize(); });
  if (!opts_.trace.empty()) {
    // The trace's origin is here, before any step or collective of the run.
    trace_ = std::make_shared<trace::Recorder>(env_.rank, env_.world_size, opts_.trace_steps);
    trace_->metadata()["lab"] = lab_;
    timer_.set_trace(trace_.get());
  }

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
      throw ConfigError(fmt::format("--eval-samples {}: the test split of {} holds only {} samples", opts_.eval_samples,
                                    opts_.data, test_->size()));
    }
    eval_size_ = opts_.eval_samples;
  }

  nlohmann::json cfg = opts_.to_json();
  cfg.update(lab_flags);  // the lab's own flags, next to the shared ones
  cfg["global_batch"] = global_batch();
  cfg["effective_lr"] = lr();
  cfg["train_size"] = train_size_;
  cfg["eval_size"] = eval_size_;
  cfg["data_seed"] = train_->metadata().seed;
  cfg["launcher"] = env_.source;
  cfg["local_rank"] = env_.local_rank;
  report_.set_config(cfg);
  report_.set_device(device_.str(), opts_.threads);
  // The BLAS kernels too: OpenBLAS's fallback for a CPU model it does not know runs a step ~3x slower.
  const std::string kernels = sys::openblas_kernels();
  const std::string better = sys::better_openblas_coretype();
  log::info0("{}: {} training and {} test samples from {}, batch {} x {} rank(s), lr {:.3g}, device {}, {} thread(s){}",
             lab_, train_size_, eval_size_, opts_.data, opts_.batch, env_.world_size, lr(), device_.str(),
             opts_.threads,
             kernels.empty() ? ""
             : better.empty()
                 ? fmt::format(", OpenBLAS {} kernels", kernels)
                 : fmt::format(", OpenBLAS {} kernels (older than this CPU's {}: see ddplab doctor)", kernels, better));
  if (env_.distributed()) log::info("{}", env_.describe());
}

LabRun::~LabRun() = default;

int64_t LabRun::steps_per_epoch(uint64_t samples) const {
  return (static_cast<int64_t>(samples) + opts_.batch - 1) / opts_.batch;
}

int64_t LabRun::whole_global_batches() const {
  const int64_t steps = static_cast<int64_t>(train_size_) / global_batch();
  if (steps == 0) {
    throw ConfigError(fmt::format("--train-samples {} is smaller than one global batch of {} ({} rank(s) x {})",
                                  train_size_, global_batch(), env_.world_size, opts_.batch));
  }
  return steps;
}

bool LabRun::hold_training_data_in_memory(uint64_t max_bytes) {
  const uint64_t bytes = train_->file_bytes();
  if (bytes > max_bytes) {
    log::info("training split kept mapped: {:.0f} MB is over the {:.0f} MB held in memory", bytes / 1e6,
              max_bytes / 1e6);
    return false;
  }
  train_ = std::make_unique<data::Dataset>(opts_.data, data::Split::kTrain, false, /*in_memory=*/true);
  log::info("training split held in memory: {:.0f} MB", bytes / 1e6);
  return true;
}

std::unique_ptr<data::BatchLoader> LabRun::global_batch_loader(int64_t epoch, int64_t steps) const {
  const auto order = data::shuffled_order(train_size_, opts_.seed, static_cast<uint64_t>(epoch));
  return std::make_unique<data::BatchLoader>(*train_,
                                             data::global_batch_slice(order, steps, opts_.batch, env_.rank,
                                                                      env_.world_size),
                                             opts_.batch, device_);
}

void LabRun::replicate(torch::nn::Module& module, dist::Communicator& comm) const {
  module.to(device_);
  dist::broadcast_module(comm, module, 0);
}

// ---- LabRun: joining the job ----

dist::ProcessGroupOptions LabRun::group_options() const {
  dist::ProcessGroupOptions po;
  po.timeout = std::chrono::milliseconds(static_cast<int64_t>(opts_.comm_timeout * 1000));
  po.backend = opts_.backend;
  return po;
}

std::shared_ptr<dist::ProcessGroup> LabRun::join() { return join(env_); }

std::shared_ptr<dist::ProcessGroup> LabRun::join(const dist::Environment& env) {
  std::shared_ptr<dist::ProcessGroup> pg = dist::ProcessGroup::join(env, device_, group_options());
  pg->set_trace(trace_);
  comm_ = pg;
  // The transport the group really uses (--backend auto chose it), beside the flag in config.
  report_.json()["backend"] = pg->backend_name();
  return pg;
}

// ---- LabRun: the training loop ----

void LabRun::start_training(std::shared_ptr<torch::nn::Module> model, int64_t steps_per_epoch) {
  DDPLAB_CHECK(model != nullptr, "start_training: no model");
  int64_t total = steps_per_epoch * opts_.epochs;
  if (opts_.max_steps > 0) total = std::min(total, opts_.max_steps);
  progress_ = std::make_unique<Progress>(total, opts_.log_every, global_batch());
  model_ = std::move(model);
  initial_digest_ = parameter_digest(*model_);
  // On CUDA, NVML's utilization of this rank's device over the training (docs/concepts/metrics.md).
  if (device_.is_cuda() && !nvml_) {
    nvml_ = std::make_unique<nvml::Sampler>(device_.has_index() ? device_.index() : 0);
    if (!nvml_->available()) log::warn("device utilization: {}; the phase timers only", nvml_->why_unavailable());
    nvml_->start();
  }
}

nlohmann::json LabRun::utilization() const {
  const double wall = timer_.wall();
  const double busy = wall > 0 ? timer_.compute() / wall : 0.0;
  nlohmann::json u = {{"busy", busy}, {"source", "phase_timers"}};
  if (!nvml_) {
    u["nvml"] = {{"available", false}, {"why", "not sampled on device " + device_.str()}};
    return u;
  }
  const nvml::Summary s = nvml_->summary();
  u["nvml"] = s.to_json();
  if (s.available && s.samples > 0) {
    u["source"] = "nvml";
    u["gpu_median"] = s.gpu_median / 100.0;
  }
  return u;
}

const EpochSummary& LabRun::run_epoch(int64_t epoch, data::Loader& loader, const StepFn& step) {
  begin_epoch(epoch);
  data::Batch b;
  while (next_batch(loader, b)) {
    double loss = 0.0;
    try {
      loss = step(b);
    } catch (...) {
      timer_.cancel_step();  // a step that did not finish is not timed
      throw;
    }
    end_step(b, loss);
  }
  end_epoch();
  return last_epoch_;
}

void LabRun::begin_epoch(int64_t epoch) {
  epoch_ = EpochSummary{};
  epoch_.epoch = epoch;
  epoch_start_ = StepTimer::Clock::now();
}

bool LabRun::next_batch(data::Loader& loader, data::Batch& batch) {
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
  epoch_.samples.add(batch.indices);
  processed_ += static_cast<uint64_t>(batch.size());
  report_.add_step(epoch_.epoch, loss);
  if (!std::isfinite(loss)) log::warn("step {}: loss is {}", step_, loss);
  if (progress_) progress_->update(step_, loss);
  ++step_;
  ++epoch_.steps;
}

void LabRun::end_epoch() {
  epoch_.seconds = seconds_since(epoch_start_);
  report_.add_epoch(epoch_.epoch, epoch_.steps, epoch_.samples, epoch_.seconds);
  log::info0("epoch {} done: {} steps, {} samples in {:.1f} s", epoch_.epoch, epoch_.steps, epoch_.samples.count(),
             epoch_.seconds);
  last_epoch_ = epoch_;
}

// ---- LabRun: the end of the run ----

void LabRun::not_attempted(const NotImplemented& e) {
  if (!missing_.insert(e.exercise()).second) return;
  report_.add_not_attempted(e.exercise());
  log::warn("exercise {} is not implemented yet (not attempted): {}", e.exercise(), e.message());
}

bool LabRun::attempt(const std::function<void()>& exercise) {
  try {
    exercise();
    return true;
  } catch (const NotImplemented& e) {
    not_attempted(e);
    return false;
  }
}

std::map<size_t, std::string> crashing_probes(const std::vector<Probe>& probes, ProbeContext& ctx, double timeout_s) {
  std::map<size_t, std::string> crashed;
  size_t from = 0;
  while (from < probes.size()) {
    int fds[2];
    if (::pipe(fds) != 0) return crashed;  // nothing screened: the probes run as before
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return crashed;
    }
    if (pid == 0) {
      // The child: each probe's index on the pipe before it runs, its output nowhere (the probes
      // run again in the parent, which prints what they say), one thread (LibTorch's pool is not
      // the parent's after a fork), no destructors on the way out.
      ::close(fds[0]);
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) {
        ::dup2(null, STDOUT_FILENO);
        ::dup2(null, STDERR_FILENO);
      }
      torch::set_num_threads(1);
      for (size_t i = from; i < probes.size(); ++i) {
        const uint32_t at = static_cast<uint32_t>(i);
        if (::write(fds[1], &at, sizeof at) != static_cast<ssize_t>(sizeof at)) ::_exit(2);
        try {
          probes[i].run(ctx);
        } catch (...) {
          // An exception is the in-process run's to report.
        }
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    int64_t last = -1;
    bool timed_out = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      pollfd pfd{fds[0], POLLIN, 0};
      const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;
      uint32_t at = 0;
      const ssize_t n = ::read(fds[0], &at, sizeof at);
      if (n == static_cast<ssize_t>(sizeof at)) {
        last = at;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;  // end of file: the child has finished or died
    }
    ::close(fds[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!timed_out && !WIFSIGNALED(status)) return crashed;  // every probe from `from` on returned
    if (last < static_cast<int64_t>(from)) return crashed;   // died before its first probe: not a probe's doing
    crashed[static_cast<size_t>(last)] = timed_out
                                             ? fmt::format("did not return within {:g} s", timeout_s)
                                             : fmt::format("killed the process ({})", strsignal(WTERMSIG(status)));
    from = static_cast<size_t>(last) + 1;
  }
  return crashed;
}

std::set<std::string> run_probes(const std::vector<Probe>& probes, ProbeContext& ctx,
                                 const std::function<void(const NotImplemented&)>& missing) {
  std::set<std::string> absent;
  // On a CPU each probe is tried first in a child process: one that crashes or hangs is not run
  // here, so only the runs that use its exercise meet the crash (with its cause), not every run of
  // the lab. (A CUDA context does not survive a fork: there the probes run as they are.)
  const auto crashed = ctx.device.is_cpu() ? crashing_probes(probes, ctx) : std::map<size_t, std::string>{};
  for (size_t i = 0; i < probes.size(); ++i) {
    const Probe& p = probes[i];
    if (const auto c = crashed.find(i); c != crashed.end()) {
      log::warn("{} ({}) {} on a probe: only what uses exercise {} will meet it", p.what, p.exercise, c->second,
                p.exercise);
      continue;
    }
    try {
      p.run(ctx);
    } catch (const NotImplemented& e) {
      missing(e);
      absent.insert(p.exercise);
    } catch (const std::exception& e) {
      log::warn("{} ({}) fails on a probe: {}", p.what, p.exercise, e.what());
    }
  }
  return absent;
}

void LabRun::run_probes(const std::vector<Probe>& probes) {
  dist::Loopback loopback;
  ProbeContext ctx{loopback, device_};
  const auto absent = ddplab::run_probes(probes, ctx, [this](const NotImplemented& e) { not_attempted(e); });
  absent_.insert(absent.begin(), absent.end());
}

bool LabRun::without(const std::string& exercise, const std::string& consequence) const {
  if (has(exercise)) return false;
  if (rank() == 0) log::warn("{} not attempted: {}", exercise, consequence);
  return true;
}

dist::Agreement LabRun::end_of_training(const std::shared_ptr<torch::nn::Module>& model, dist::Communicator& comm) {
  std::string digest;
  const dist::Agreement same = dist::compare_parameters(comm, *model, &digest);
  report_.verdict("params_identical", same.same(),
                  fmt::format("parameters at the end: {} (rank 0: {})", same.describe(),
                              same.values.empty() ? digest : hex64(same.values[0])),
                  {{"digest", digest}, {"differ", same.differ}});
  if (auto deepfm = std::dynamic_pointer_cast<DeepFMImpl>(model)) {
    DeepFM holder(deepfm);
    evaluate_on_rank0(holder, comm);
  }
  return same;
}

void LabRun::set_eval(const EvalResult& r) { eval_ = r; }

void LabRun::evaluate_on_rank0(DeepFM& model, dist::Communicator& comm) {
  if (rank() == 0) set_eval(evaluate_model(model, test(), eval_size(), opts_.batch, device_));
  comm.barrier();  // no rank finishes (and tears the group down) while rank 0 still evaluates
}

void LabRun::finish_together() {
  if (env_.distributed()) dist::ProcessGroup::join(env_, device_, group_options())->barrier();
}

int LabRun::finish() {
  // Order matters: the report is complete (parameters, phases, samples, memory, communication)
  // before it is written, and it is written before the model is saved, so a failed save still
  // leaves the run's record behind.
  const torch::nn::Module* model = model_.get();
  const auto& meta = train_->metadata();
  if (model != nullptr) {
    report_.set_params(initial_digest_, parameter_digest(*model), count_parameters(*model));
    report_.json()["params"]["final_by_name"] = parameter_digests_by_name(*model);
  }
  if (eval_)
    report_.set_eval(eval_->auc, eval_->logloss, eval_->samples, meta.teacher_test_auc, meta.teacher_test_logloss);
  report_.set_phases(timer_);
  if (nvml_) nvml_->stop();
  report_.json()["utilization"] = utilization();
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
  write_trace(attempted ? "ok" : "not_attempted", "");

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
    log::info0("{}: test AUC {:.4f} (teacher {:.4f}, gap {:.4f}) | log-loss {:.4f} (teacher {:.4f}) on {} samples",
               lab_, eval_->auc, meta.teacher_test_auc, meta.teacher_test_auc - eval_->auc, eval_->logloss,
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
  try {
    write_trace("error", message);
  } catch (const std::exception& e) {
    log::error("could not write the timeline: {}", e.what());
  }
}

void LabRun::write_trace(const std::string& status, const std::string& message) {
  if (trace_ == nullptr) return;
  trace_->metadata()["status"] = status;
  if (!message.empty()) trace_->metadata()["message"] = message;
  const std::string path = opts_.trace_path(env_.rank);
  trace_->write(path);
  const std::string kept =
      opts_.trace_steps == 0 ? "all kept" : fmt::format("the first and last {} kept", opts_.trace_steps);
  log::info0("{}: timeline of {} steps ({}) written to {}", lab_, trace_->steps_recorded(), kept, path);
}

int run_lab(const LabProgram& program, int argc, char** argv) {
  // Before anything is read or written: a restart repeats the process from here.
  sys::restart_with_better_openblas_coretype(argv);
  CLI::App app{program.description, program.name};
  LabOptions opts;
  add_lab_options(app, opts);
  LabFlags flags(app);
  if (program.add_flags) program.add_flags(flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every bad flag or value exits 2, as documented (CLI11's own
    // codes are 104-109).
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  std::unique_ptr<LabRun> run;
  try {
    if (!program.lr_scaling_flag) {
      // The lab sets the learning rate itself (lab 06's schedules): --lr is its base rate.
      if (!opts.lr_scaling) {
        throw ConfigError(
            fmt::format("{} sets the learning rate with its own flags: --no-lr-scaling does not apply "
                        "(see --help)",
                        program.name));
      }
      opts.lr_scaling = false;
    }
    run = std::make_unique<LabRun>(program.name, opts, flags.values());
    run->run_probes(program.probes);
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
    dist::abandon_transport();  // no MPI_Finalize waiting for peers that wait for this rank
    return kExitUsage;
  } catch (const std::exception& e) {  // data::DataError included: both name what and where
    log::error("{}", e.what());
    if (run) run->fail(e.what());
    dist::abandon_transport();
    return kExitError;
  }
}

}  // namespace ddplab

// Lab 04's apparatus: the kit's code around the student's gradient syncs, read-only for students
// and unit-tested in tests/lab04_kit_test.cpp. The driver's flags; the probes that try each
// exercise once on a two-layer model; the model with 04.3's branch; the rung --sync names; and
// SyncWatch, which checks every collective a step issues against the bucket layout (stopping one
// that would pair different buckets across ranks) and keeps the per-step figures the report's
// "sync" section and the grader's grad_sync and exposed_comm checks read.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "lab04.h"

#include "ddplab/data/loader.h"
#include "ddplab/deepfm.h"
#include "ddplab/lab.h"
#include "ddplab/step.h"
#include "ddplab/timer.h"

namespace lab04 {

/// The driver's own flags.
struct Flags {
  std::string sync = "student-overlap";  ///< per-param (the oracle), student-bucketed (04.1), student-overlap (04.2)
  std::string optimizer = "sgd";
  double first_bucket_mb = 1.0, bucket_cap_mb = 25.0;
  int64_t unused_every = 0;  ///< 04.3's branch: rank r skips it at the steps s with (s + r) % K == 0
  bool find_unused = false;
  BucketCaps caps() const;
};
void add_flags(ddplab::LabFlags& f, Flags& flags);

/// Each exercise once on a two-layer model in a world of one, with the runtime's layout, so that
/// each is reached without the others.
void add_probes(ddplab::LabProgram& program);

/// DeepFM with a branch for exercise 04.3: a small tower that refines the dense features before
/// DeepFM reads them. Registered after DeepFM's layers, its parameters open bucket 0 (the reverse
/// walk starts with them), yet their gradients come last in backward, because the tower runs
/// first in forward.
class BranchyNetImpl : public torch::nn::Module {
 public:
  BranchyNetImpl();
  torch::Tensor forward(const ddplab::data::Batch& b, bool use_tower);
  ddplab::DeepFM deepfm{nullptr};
  torch::nn::Sequential tower{nullptr};
};
TORCH_MODULE(BranchyNet);

/// The lab's model: DeepFM, or BranchyNet when the branch is on (unused_every > 0).
class Model {
 public:
  explicit Model(int64_t unused_every);
  const std::shared_ptr<torch::nn::Module>& module() const noexcept { return module_; }
  /// Whether rank `rank` skips the branch at step `step`.
  bool skips(int64_t step, int rank) const noexcept { return every_ > 0 && (step + rank) % every_ == 0; }
  /// The training loss on `batch`, with or without the branch.
  torch::Tensor loss(const ddplab::data::Batch& batch, bool skip);

 private:
  int64_t every_;
  ddplab::DeepFM plain_{nullptr};
  BranchyNet branchy_{nullptr};
  std::shared_ptr<torch::nn::Module> module_;
};

/// The rung --sync names over `params`: the student's class, or nullptr for per-param (the
/// caller then uses the runtime's). `overlap` receives the OverlapSync, if that is the rung.
std::unique_ptr<ddplab::dist::GradSync> make_rung(const Flags& flags, Communicator& comm,
                                                  const std::vector<torch::Tensor>& params, OverlapSync** overlap);

/// What the communicator saw in each synced step, checked as it happens. Observes `comm` from
/// construction to destruction; the observer may run on the autograd engine's thread.
class SyncWatch {
 public:
  /// `overlap`: the student's OverlapSync, if that is the rung (its unused parameters are counted).
  SyncWatch(Communicator& comm, const ddplab::dist::GradSync& sync, const OverlapSync* overlap = nullptr);
  ~SyncWatch();
  SyncWatch(const SyncWatch&) = delete;
  SyncWatch& operator=(const SyncWatch&) = delete;

  /// The bytes of each bucket in launch order: a step must issue exactly these all-reduces.
  const std::vector<int64_t>& expected() const noexcept { return expected_; }

  /// The parts of step `step`: `loss`, after which the watch opens (the sync's before_backward,
  /// DDP's prepare, runs next).
  ddplab::StepParts parts(int64_t step, std::function<torch::Tensor()> loss);
  /// After the update of step `step`: its figures from the timer's record of the step (`step`
  /// with the phases' boundaries), and whether this rank skipped the branch in it.
  void after_step(int64_t step, const ddplab::StepTimer::StepRecord& record, bool branch_skipped);
  /// The communicator's observer (public for the tests). A collective that is not the next bucket
  /// of the layout is stopped here, before it starts: the ranks would pair different buckets in one
  /// collective, and Gloo would fail on mismatched sizes (or wait forever) instead of saying why.
  void observe(ddplab::dist::Op op, int64_t bytes);

  /// The report's sync.steps: counts, medians, the first step out of layout order.
  nlohmann::json steps() const;
  bool in_layout() const { return first_bad_step_.is_null(); }
  const nlohmann::json& first_bad_step() const noexcept { return first_bad_step_; }
  /// FNV-1a over every step's sequence of collective sizes: equal across ranks when they issued the
  /// same collectives in the same order.
  uint64_t order_digest() const noexcept { return order_digest_; }
  int64_t synced() const noexcept { return synced_; }
  /// The one-line summary of the run ("student-bucketed: 2 bucket(s), 2-2 collective(s) ...").
  std::string summary(const std::string& rung) const;
  /// The progress line of the step just recorded.
  std::string step_line(int64_t step) const;

 private:
  Communicator& comm_;
  const OverlapSync* overlap_;
  std::vector<int64_t> expected_;
  std::mutex mu_;
  int64_t step_ = 0;
  bool open_ = false;
  std::vector<int64_t> bytes_;  // this step's collectives
  std::vector<ddplab::StepTimer::Clock::time_point> at_;
  ddplab::StepTimer::Clock::time_point loss_done_{};
  // per synced step
  std::vector<double> step_ms_, prepare_ms_, backward_ms_, exposed_ms_, launched_in_backward_;
  std::vector<std::vector<double>> launch_ms_;  // bucket -> when it started after backward began, per step
  int64_t synced_ = 0, min_calls_ = INT64_MAX, max_calls_ = 0, min_bytes_ = INT64_MAX, max_bytes_ = 0;
  int64_t unused_marked_ = 0, branch_skipped_ = 0;
  uint64_t order_digest_ = 0xcbf29ce484222325ULL;
  nlohmann::json first_bad_step_;
};

/// The report's "sync" section: the rung, the caps, every parameter, the layout in launch order,
/// and the watch's steps and order digest.
nlohmann::json sync_section(const Flags& flags, bool written, const torch::nn::Module& model,
                            const ddplab::dist::GradSync& sync, const SyncWatch& watch);

/// The end of the run: the report's "sync" section, the summary lines, and the verdict
/// `order_same_across_ranks` (collective: every rank calls it).
void report(ddplab::LabRun& run, Communicator& comm, const Flags& flags, bool written, const torch::nn::Module& model,
            const ddplab::dist::GradSync& sync, const SyncWatch& watch);

/// "1.28 MB, 12.07 MB".
std::string list_mb(const std::vector<int64_t>& bytes);

}  // namespace lab04

// Lab 09 (the capstone): the functions the student implements in lab09_student.cpp — the
// checkpoint a training job resumes from (09.1 writes it, 09.2 reads it back or refuses it) and
// the cost meter with its budget alarm (09.3) — and the kit's pieces they work with: what a
// checkpoint must agree on with the job that resumes it, where training stands, a price table.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "ddplab/cost.h"
#include "ddplab/error.h"

namespace lab09 {

/// A checkpoint that cannot be resumed from: missing, unreadable, corrupt, or written by another
/// job. The message starts with the checkpoint's path and says what is wrong with it.
class CheckpointError : public ddplab::Error {
 public:
  using ddplab::Error::Error;
};

/// One parameter (or buffer) of a model: its name and shape.
struct TensorShape {
  std::string name;
  std::vector<int64_t> shape;
  bool operator==(const TensorShape& o) const { return name == o.name && shape == o.shape; }
  bool operator!=(const TensorShape& o) const { return !(*this == o); }
};

/// Every parameter and buffer of `model`, in registration order (the order Module::save writes them).
std::vector<TensorShape> model_signature(const torch::nn::Module& model);

/// What a checkpoint must agree on with the job that resumes from it. The sampler position counts
/// optimizer steps of global batches of world_size x batch x accumulate samples of one shuffle of
/// the first train_samples samples (by seed and epoch), so every field changes what a step is.
struct JobIdentity {
  std::vector<TensorShape> model;
  int world_size = 1;
  int64_t batch = 0;       ///< per rank, per micro-batch
  int64_t accumulate = 1;  ///< micro-batches per optimizer step
  uint64_t seed = 0;
  uint64_t train_samples = 0;
};

/// Where training stands after `step` optimizer steps: everything that resumes it besides the
/// model, the optimizer and the random number generator.
struct Position {
  int64_t step = 0;                  ///< optimizer steps taken so far, over the whole run
  int64_t epoch = 0;                 ///< the epoch the next step belongs to
  int64_t step_in_epoch = 0;         ///< optimizer steps of that epoch already taken (the sampler's position)
  uint64_t samples = 0;              ///< unique samples trained on so far (all ranks)
  double device_seconds = 0;         ///< device time billed so far: world size x seconds of the job, over every attempt
  double loss_scale = 0;             ///< fp16's loss scaler: its scale (0: no scaler)
  int64_t scale_growth_tracker = 0;  ///< and its clean steps in a row (GradScaler's _growth_tracker)
  bool operator==(const Position& o) const {
    return step == o.step && epoch == o.epoch && step_in_epoch == o.step_in_epoch && samples == o.samples &&
           device_seconds == o.device_seconds && loss_scale == o.loss_scale &&
           scale_growth_tracker == o.scale_growth_tracker;
  }
};

/// What a checkpoint holds besides the model's tensors and the optimizer's state.
struct Checkpoint {
  JobIdentity job;
  Position at;
  torch::Tensor rng;   ///< the CPU generator's state (rng_state()), restored with set_rng_state()
  std::string digest;  ///< tensors_digest() of the model's parameters and buffers as saved
};

// JSON forms of the structs (for a checkpoint's header, and the run report).
void to_json(nlohmann::json& j, const TensorShape& t);
void from_json(const nlohmann::json& j, TensorShape& t);
void to_json(nlohmann::json& j, const JobIdentity& id);
void from_json(const nlohmann::json& j, JobIdentity& id);
void to_json(nlohmann::json& j, const Position& p);
void from_json(const nlohmann::json& j, Position& p);

/// FNV-1a over the bytes of `tensors` in order, as 16 hex digits: equal exactly when the tensors
/// are bit-identical (modulo collisions). For a model: its parameters() then its buffers().
std::string tensors_digest(const std::vector<torch::Tensor>& tensors);
/// The model's parameters then its buffers, in registration order, as Module::save writes them.
std::vector<torch::Tensor> model_tensors(const torch::nn::Module& model);

/// The default CPU generator's state, and setting it.
torch::Tensor rng_state();
void set_rng_state(const torch::Tensor& state);

// ---- 09.1: write a checkpoint ----

/// The checkpoint file: one torch::serialize archive (OutputArchive::save_to) holding
///   "header"    a string: the JSON {"format": kCheckpointFormat, "job": JobIdentity, "at": Position,
///               "digest": tensors_digest(model_tensors(model))}
///   "model"     an archive written by Module::save
///   "optimizer" an archive written by Optimizer::save
///   "rng"       the generator state (Checkpoint::rng; rng_state() if that is undefined)
inline constexpr const char* kCheckpointFormat = "ddplab.lab09.checkpoint";

/// Writes checkpoint `c` with the model's parameters and buffers (Module::save) and the
/// optimizer's state (Optimizer::save) to `path`, so that a reader of `path` sees either the
/// previous file or the whole new one, never part of one: written to a temporary file in the same
/// folder, flushed to the disk, then renamed over `path`. A failure (no room, the folder missing)
/// throws ddplab::Error naming `path`, leaves the previous checkpoint as it was and no temporary
/// file behind. Not allowed: the kit's ddplab::write_file_atomic (what this exercise writes).
void save_checkpoint(const std::string& path, const Checkpoint& c, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer);

// ---- 09.2: read it back, or refuse it ----

/// Reads the checkpoint at `path` into `model` and `optimizer` and returns its header, after
/// checking, before anything is changed, that it can be resumed from by the job `expected`:
/// - a missing, truncated or unreadable file is a CheckpointError "<path>: ...";
/// - a checkpoint of another job is a CheckpointError naming the field that differs, with both
///   values ("<path>: written by a job of world size 2; this job has 4 ..."; for the model, the
///   first parameter whose name or shape differs);
/// - tensors whose tensors_digest differs from the one saved: a CheckpointError saying the file is corrupt.
/// On any error `model` and `optimizer` are left exactly as they were. The generator state is
/// returned, not applied.
Checkpoint load_checkpoint(const std::string& path, const JobIdentity& expected, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer);

// ---- 09.3: the cost meter and the budget alarm ----

/// One entry of the price table (common/prices.toml, or --prices FILE): an instance, its price
/// per instance-hour and how many ranks (devices) it holds.
using ddplab::cost::Price;

/// What the job has cost and will cost, from where it stands.
struct Spend {
  double device_hours = 0;             ///< at.device_seconds / 3600
  double usd = 0;                      ///< spent so far: device-hours x the price of a device-hour
  double usd_per_epoch = 0;            ///< projected: one epoch of samples_per_epoch at the rate so far
  double usd_to_finish = 0;            ///< projected total: spent + the samples still to train at that rate
  double usd_per_million_samples = 0;  ///< spent / unique samples x 10^6
};

/// 09.3 (a): the spend of a job standing at `at` that trains `epochs` epochs of
/// `samples_per_epoch` unique samples each, priced at `price`. The rate is the job's own so far:
/// device-seconds per unique sample. Before the first sample (at.samples == 0) the projections
/// and the cost per sample are 0.
Spend meter(const Price& price, const Position& at, uint64_t samples_per_epoch, int64_t epochs);

/// 09.3 (b): whether the job must stop now rather than take its next step: true when the spend so
/// far, plus `usd_per_step` for the next step, plus `reserve_usd` (what stopping cleanly costs: the
/// last checkpoint) would pass `budget_usd`. A budget of 0 or less means none.
bool over_budget(double budget_usd, const Spend& now, double usd_per_step, double reserve_usd);

}  // namespace lab09

#include "lab09_kit.h"  // the kit's definitions of the helpers above (not the exercises)

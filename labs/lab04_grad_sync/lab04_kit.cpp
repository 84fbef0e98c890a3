// Lab 04's apparatus (see lab04_kit.h). Not edited by students.
#include "lab04_kit.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/dist/agree.h"
#include "ddplab/error.h"
#include "ddplab/log.h"

namespace lab04 {

using ddplab::Error;
using ddplab::Phase;
using ddplab::dist::GradSync;
using Clock = ddplab::StepTimer::Clock;

namespace {

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}
double median_or_zero(const std::vector<double>& v) { return v.empty() ? 0.0 : ddplab::median(v); }
std::string mb(int64_t bytes) { return fmt::format("{:.2f} MB", static_cast<double>(bytes) / 1e6); }
std::string list_ms(const std::vector<double>& ms) {
  std::vector<std::string> out;
  for (double v : ms) out.push_back(fmt::format("{:.1f}", v));
  return fmt::format("{}", fmt::join(out, ", "));
}

}  // namespace

std::string list_mb(const std::vector<int64_t>& bytes) {
  std::vector<std::string> out;
  for (int64_t b : bytes) out.push_back(mb(b));
  return fmt::format("{}", fmt::join(out, ", "));
}

// ---- flags and probes ----

BucketCaps Flags::caps() const {
  return BucketCaps{static_cast<int64_t>(std::llround(first_bucket_mb * 1048576.0)),
                    static_cast<int64_t>(std::llround(bucket_cap_mb * 1048576.0))};
}

void add_flags(ddplab::LabFlags& f, Flags& flags) {
  f.option("--sync", flags.sync,
           "Gradient sync: per-param (the runtime's, one allreduce per tensor), student-bucketed (04.1) or "
           "student-overlap (04.2)")
      ->check(CLI::IsMember({"per-param", "student-bucketed", "student-overlap"}));
  f.option("--first-bucket-mb", flags.first_bucket_mb, "Cap of bucket 0 in MiB (DDP: 1)")->check(CLI::PositiveNumber);
  f.option("--bucket-cap-mb", flags.bucket_cap_mb, "Cap of every later bucket in MiB (DDP's bucket_cap_mb: 25)")
      ->check(CLI::PositiveNumber);
  f.option("--unused-branch", flags.unused_every,
           "Add a branch that rank r skips at the steps s with (s + r) % K == 0 (0: no branch; 04.3)")
      ->check(CLI::NonNegativeNumber);
  f.optimizer(flags.optimizer,
              "sgd is the default here: every gradient error shows in the weights, where Adam's m / sqrt(v) "
              "divides out a gradient's scale");
  f.flag("--find-unused", flags.find_unused,
         "Mark the parameters a step does not reach ready before backward (04.3, DDP's find_unused_parameters)");
}

namespace {

/// Fresh layers for each probe: hooks an exercise leaves behind cannot reach the next one.
struct Tiny {
  torch::nn::Linear a{2, 2}, b{2, 1};
  std::vector<torch::Tensor> params() const { return {a->weight, a->bias, b->weight, b->bias}; }
  torch::Tensor loss(bool use_b) {
    const torch::Tensor x = torch::ones({3, 2});
    return use_b ? b->forward(a->forward(x)).sum() : a->forward(x).sum();
  }
  /// The runtime's layout, so that a sync is reached without 04.1a.
  std::vector<Bucket> layout() const {
    return ddplab::dist::assign_buckets(params(), ddplab::dist::BucketOptions{8, 8});
  }
};

void synced_step(GradSync& s, Tiny& m, bool use_b) {
  const torch::Tensor loss = m.loss(use_b);
  s.before_backward(loss);
  loss.backward();
  s.finish();
}

}  // namespace

void add_probes(ddplab::LabProgram& program) {
  program.probe("04.1", "assign_buckets", [](ddplab::ProbeContext&) { (void)assign_buckets(Tiny().params()); });
  program.probe("04.1", "BucketedSync", [](ddplab::ProbeContext& ctx) {
    Tiny m;
    BucketedSync s(ctx.comm, m.params(), m.layout());
    synced_step(s, m, true);
  });
  program.probe("04.2", "OverlapSync", [](ddplab::ProbeContext& ctx) {
    Tiny m;
    OverlapSync s(ctx.comm, m.params(), m.layout());
    synced_step(s, m, true);
  });
  program.probe("04.3", "unreached_parameters", [](ddplab::ProbeContext&) {
    Tiny m;
    (void)unreached_parameters(m.loss(false), {torch::autograd::impl::grad_accumulator(m.a->weight),
                                               torch::autograd::impl::grad_accumulator(m.b->weight)});
  });
  program.probe("04.3", "OverlapSync with find_unused", [](ddplab::ProbeContext& ctx) {
    Tiny m;
    OverlapSync s(ctx.comm, m.params(), m.layout(), /*find_unused=*/true);
    synced_step(s, m, false);
  });
}

// ---- the model and the rung ----

BranchyNetImpl::BranchyNetImpl() {
  deepfm = register_module("deepfm", ddplab::DeepFM());
  tower =
      register_module("tower", torch::nn::Sequential(torch::nn::Linear(ddplab::data::kNumDense, 64), torch::nn::ReLU(),
                                                     torch::nn::Linear(64, ddplab::data::kNumDense)));
}

torch::Tensor BranchyNetImpl::forward(const ddplab::data::Batch& b, bool use_tower) {
  const torch::Tensor dense = use_tower ? b.dense + tower->forward(b.dense) : b.dense;
  return deepfm->forward(dense, b.rows);
}

Model::Model(int64_t unused_every) : every_(unused_every) {
  if (every_ > 0) {
    branchy_ = BranchyNet();
    module_ = branchy_.ptr();
  } else {
    plain_ = ddplab::DeepFM();
    module_ = plain_.ptr();
  }
}

torch::Tensor Model::loss(const ddplab::data::Batch& batch, bool skip) {
  const torch::Tensor logits = branchy_ ? branchy_->forward(batch, !skip) : plain_->forward(batch.dense, batch.rows);
  return torch::binary_cross_entropy_with_logits(logits, batch.labels);
}

std::unique_ptr<GradSync> make_rung(const Flags& flags, Communicator& comm, const std::vector<torch::Tensor>& params,
                                    OverlapSync** overlap) {
  if (flags.sync == "student-bucketed") return std::make_unique<BucketedSync>(comm, params, flags.caps());
  if (flags.sync == "student-overlap") {
    auto s = std::make_unique<OverlapSync>(comm, params, flags.caps(), flags.find_unused);
    if (overlap != nullptr) *overlap = s.get();
    return s;
  }
  return nullptr;
}

// ---- the watch ----

SyncWatch::SyncWatch(Communicator& comm, const GradSync& sync, const OverlapSync* overlap)
    : comm_(comm), overlap_(overlap) {
  for (const auto& b : sync.buckets()) expected_.push_back(b.bytes);
  comm_.set_observer([this](ddplab::dist::Op op, int64_t bytes, int64_t) { observe(op, bytes); });
}

SyncWatch::~SyncWatch() { comm_.set_observer(nullptr); }

ddplab::StepParts SyncWatch::parts(int64_t step, std::function<torch::Tensor()> loss) {
  return ddplab::plain_parts([this, step, loss = std::move(loss)] {
    torch::Tensor l = loss();
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
    bytes_.clear();
    at_.clear();
    open_ = true;
    loss_done_ = Clock::now();
    return l;
  });
}

void SyncWatch::observe(ddplab::dist::Op op, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return;
  const size_t k = bytes_.size();
  bytes_.push_back(bytes);
  at_.push_back(Clock::now());
  if (op != ddplab::dist::Op::kAllreduce) {
    throw Error(
        fmt::format("step {}: collective {} of the step is a {}, not an allreduce: a gradient "
                    "sync issues one allreduce per bucket and nothing else",
                    step_, k, ddplab::dist::op_name(op)));
  }
  if (k >= expected_.size()) {
    throw Error(
        fmt::format("step {}: allreduce {} of the step, but the layout has {} bucket(s): one "
                    "allreduce per bucket per step",
                    step_, k, expected_.size()));
  }
  if (bytes != expected_[k]) {
    throw Error(fmt::format(
        "step {}: allreduce {} of the step carries {} bytes, but bucket {} of the layout has {} (the "
        "layout: {} bytes). Buckets must be launched in bucket order, 0, 1, 2, ..., on every rank; a complete "
        "bucket waits for its predecessors (exercise 04.2). Stopped before the ranks pair different buckets in "
        "one collective",
        step_, k, bytes, k, expected_[k], fmt::join(expected_, " / ")));
  }
}

void SyncWatch::after_step(int64_t step, const ddplab::StepTimer::StepRecord& record, bool branch_skipped) {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = false;
  ++synced_;
  branch_skipped_ += branch_skipped;
  const auto calls = static_cast<int64_t>(bytes_.size());
  int64_t bytes = 0;
  for (int64_t b : bytes_) {
    bytes += b;
    for (int k = 0; k < 8; ++k)
      order_digest_ = (order_digest_ ^ ((static_cast<uint64_t>(b) >> (8 * k)) & 0xff)) * 0x100000001b3ULL;
  }
  order_digest_ = (order_digest_ ^ 0xff) * 0x100000001b3ULL;  // step separator
  min_calls_ = std::min(min_calls_, calls);
  max_calls_ = std::max(max_calls_, calls);
  min_bytes_ = std::min(min_bytes_, bytes);
  max_bytes_ = std::max(max_bytes_, bytes);
  if (first_bad_step_.is_null() && bytes_ != expected_) {  // fewer collectives than buckets
    first_bad_step_ = {{"step", step}, {"launched", bytes_}, {"expected", expected_}};
  }
  // Launch times count from backward's start (negative: in prepare, before it).
  const int bwd = static_cast<int>(Phase::kBackward), fwd = static_cast<int>(Phase::kForward);
  const auto backward_began = record.began[bwd], backward_ended = record.ended[bwd];
  if (launch_ms_.size() < at_.size()) launch_ms_.resize(at_.size());
  int64_t in_backward = 0;
  for (size_t b = 0; b < at_.size(); ++b) {
    launch_ms_[b].push_back(ms_between(backward_began, at_[b]));
    in_backward += at_[b] <= backward_ended;
  }
  launched_in_backward_.push_back(static_cast<double>(in_backward));
  // The step from forward's start to the update's end; prepare is the sync's before_backward,
  // between the loss and backward.
  const auto last =
      record.entered(Phase::kOptimizer) ? record.ended[static_cast<int>(Phase::kOptimizer)] : Clock::now();
  step_ms_.push_back(ms_between(record.began[fwd], last));
  prepare_ms_.push_back(std::max(0.0, ms_between(loss_done_, backward_began)));
  backward_ms_.push_back(1000.0 * record.phase(Phase::kBackward));
  exposed_ms_.push_back(1000.0 * record.phase(Phase::kComm));
  if (overlap_ != nullptr) unused_marked_ += static_cast<int64_t>(overlap_->last_unused().size());
}

std::string SyncWatch::step_line(int64_t step) const {
  std::vector<double> at;
  for (const auto& v : launch_ms_) {
    if (v.size() == static_cast<size_t>(synced_)) at.push_back(v.back());
  }
  return fmt::format(
      "step {}: {} collective(s), {}; exposed comm {:.1f} ms of a {:.1f} ms step; started at {} ms into a {:.1f} ms "
      "backward",
      step + 1, bytes_.size(), mb(max_bytes_), exposed_ms_.empty() ? 0.0 : exposed_ms_.back(),
      step_ms_.empty() ? 0.0 : step_ms_.back(), list_ms(at), backward_ms_.empty() ? 0.0 : backward_ms_.back());
}

nlohmann::json SyncWatch::steps() const {
  std::vector<double> launch_median;
  for (const auto& v : launch_ms_) launch_median.push_back(median_or_zero(v));
  const bool any = synced_ > 0;
  return {{"synced", synced_},
          {"collectives", {{"min", any ? min_calls_ : 0}, {"max", max_calls_}}},
          {"bytes", {{"min", any ? min_bytes_ : 0}, {"max", max_bytes_}}},
          {"order_in_layout", in_layout()},
          {"first_bad_step", first_bad_step_},
          {"step_ms_median", median_or_zero(step_ms_)},
          {"prepare_ms_median", median_or_zero(prepare_ms_)},
          {"backward_ms_median", median_or_zero(backward_ms_)},
          {"exposed_comm_ms_median", median_or_zero(exposed_ms_)},
          {"launched_in_backward_median", median_or_zero(launched_in_backward_)},
          {"launch_ms_median", launch_median},
          {"branch_skipped", branch_skipped_},
          {"unused_marked", unused_marked_}};
}

std::string SyncWatch::summary(const std::string& rung) const {
  const nlohmann::json s = steps();
  const double step_ms = s["step_ms_median"], exposed = s["exposed_comm_ms_median"];
  std::string text = fmt::format(
      "{}: {} bucket(s), {}-{} collective(s) and {} per step; median step {:.1f} ms, exposed comm {:.1f} ms "
      "({:.0f} %), backward {:.1f} ms, prepare {:.3f} ms; buckets started at {} ms into backward, {:.0f} of them "
      "before it ended",
      rung, expected_.size(), s["collectives"]["min"].get<int64_t>(), max_calls_, mb(max_bytes_), step_ms, exposed,
      step_ms > 0 ? 100.0 * exposed / step_ms : 0.0, s["backward_ms_median"].get<double>(),
      s["prepare_ms_median"].get<double>(), list_ms(s["launch_ms_median"].get<std::vector<double>>()),
      s["launched_in_backward_median"].get<double>());
  return text;
}

nlohmann::json sync_section(const Flags& flags, bool written, const torch::nn::Module& model, const GradSync& sync,
                            const SyncWatch& watch) {
  const BucketCaps caps = flags.caps();
  nlohmann::json sj = {{"rung", flags.sync},
                       {"written", written},
                       {"first_bucket_bytes", caps.first_bytes},
                       {"bucket_cap_bytes", caps.cap_bytes},
                       {"unused_branch", flags.unused_every},
                       {"find_unused", flags.find_unused}};
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& p = item.value();
    names.push_back(item.key());
    sj["params"].push_back(nlohmann::json{{"name", item.key()},
                                          {"bytes", tensor_bytes(p)},
                                          {"dtype", std::string(c10::toString(p.scalar_type()))},
                                          {"device", p.device().str()}});
  }
  for (const auto& b : sync.buckets()) {
    nlohmann::json bj = {{"bytes", b.bytes}, {"params", nlohmann::json::array()}};
    for (size_t i : b.params) bj["params"].push_back(names.at(i));
    sj["buckets"].push_back(bj);
  }
  sj["steps"] = watch.steps();
  sj["order_digest"] = fmt::format("{:016x}", watch.order_digest());
  return sj;
}

void report(ddplab::LabRun& run, Communicator& comm, const Flags& flags, bool written, const torch::nn::Module& model,
            const GradSync& sync, const SyncWatch& watch) {
  run.report().json()["sync"] = sync_section(flags, written, model, sync, watch);
  ddplab::log::info0("{}", watch.summary(flags.sync));
  if (!watch.in_layout()) {
    const auto& bad = watch.first_bad_step();
    ddplab::log::warn("launch order: NOT the bucket order at step {}: launched {} where the layout is {}",
                      bad["step"].get<int64_t>(), list_mb(bad["launched"].get<std::vector<int64_t>>()),
                      list_mb(watch.expected()));
  }
  const auto order = ddplab::dist::compare_across_ranks(comm, watch.order_digest());
  run.report().verdict("order_same_across_ranks", order.same(),
                       order.same() ? "launch order: the same sequence of collectives on every rank"
                                    : "launch order: the ranks issued different sequences (" + order.describe() + ")");
  if (flags.unused_every > 0) {
    const nlohmann::json s = watch.steps();
    ddplab::log::info0("branch skipped on {} of {} steps on rank {}; {} parameter(s) marked unused",
                       s["branch_skipped"].get<int64_t>(), watch.synced(), run.rank(),
                       s["unused_marked"].get<int64_t>());
  }
}

}  // namespace lab04

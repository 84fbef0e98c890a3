// Lab 04 driver: data-parallel DeepFM whose gradients travel by the rung --sync picks — the
// runtime's one allreduce per tensor (the oracle), or the student's buckets reduced after backward
// (04.1) or launched from hooks during backward (04.2). Every collective a step issues is observed
// at the communicator, so the run reports, per step, how many went out, how many bytes, in which
// order, when each started relative to backward, and how much of the step waited for them (the
// exposed communication). --unused-branch adds a branch some ranks skip on some steps (04.3).
// Not edited by students.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "lab04.h"

#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/train.h"

namespace {

using namespace ddplab;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

/// DeepFM with a branch for exercise 04.3: a small tower that refines the dense features before
/// DeepFM reads them, skipped by rank r at the steps s with (s + r) % every == 0. Registered after
/// DeepFM's layers, its parameters open bucket 0 (the reverse walk starts with them), yet their
/// gradients come last in backward, because the tower runs first in forward.
class BranchyNetImpl : public torch::nn::Module {
 public:
  BranchyNetImpl() {
    deepfm = register_module("deepfm", DeepFM());
    tower = register_module("tower", torch::nn::Sequential(torch::nn::Linear(data::kNumDense, 64), torch::nn::ReLU(),
                                                           torch::nn::Linear(64, data::kNumDense)));
  }
  torch::Tensor forward(const data::Batch& b, bool use_tower) {
    const torch::Tensor dense = use_tower ? b.dense + tower->forward(b.dense) : b.dense;
    return deepfm->forward(dense, b.rows);
  }
  DeepFM deepfm{nullptr};
  torch::nn::Sequential tower{nullptr};
};
TORCH_MODULE(BranchyNet);

/// What the communicator saw during one synced step: each collective's bytes and when it started.
/// Filled by the communicator's observer, which may run on the autograd engine's thread.
class StepLog {
 public:
  /// The bytes of each bucket in launch order: a step must issue exactly these allreduces.
  explicit StepLog(std::vector<int64_t> expected) : expected_(std::move(expected)) {}

  void open(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
    bytes_.clear();
    at_.clear();
    open_ = true;
  }
  /// The communicator's observer. A collective that is not the next bucket of the layout is
  /// stopped here, before it starts: the ranks would pair different buckets in one collective,
  /// and Gloo would fail on mismatched sizes (or wait forever) instead of saying why.
  void observe(dist::Op op, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return;
    const size_t k = bytes_.size();
    bytes_.push_back(bytes);
    at_.push_back(Clock::now());
    if (op != dist::Op::kAllreduce) {
      throw Error(
          fmt::format("step {}: collective {} of the step is a {}, not an allreduce: a gradient "
                      "sync issues one allreduce per bucket and nothing else",
                      step_, k, dist::op_name(op)));
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
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_.size();
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  const std::vector<int64_t>& bytes() const { return bytes_; }
  /// When each collective started, in ms after `origin` (negative: before it).
  std::vector<double> at_ms(Clock::time_point origin) const {
    std::vector<double> out;
    for (const auto& t : at_) out.push_back(std::chrono::duration<double, std::milli>(t - origin).count());
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<int64_t> expected_;
  int64_t step_ = 0;
  bool open_ = false;
  std::vector<int64_t> bytes_;
  std::vector<Clock::time_point> at_;
};

/// Per-step figures of the synced steps, summarised for the report and the printout.
struct SyncFigures {
  std::vector<double> step_ms, prepare_ms, backward_ms, exposed_ms, launched_in_backward;
  std::vector<std::vector<double>> launch_ms;  // bucket -> when it started, per step
  int64_t synced = 0, min_calls = INT64_MAX, max_calls = 0, min_bytes = INT64_MAX, max_bytes = 0;
  int64_t unused_marked = 0, branch_skipped = 0;
  uint64_t order_digest = 0xcbf29ce484222325ULL;  // FNV-1a over every step's launch sequence
  nlohmann::json first_bad_step;                  // null while every step launched in layout order

  void add(int64_t step, const StepLog& log, const std::vector<double>& at_ms, const std::vector<int64_t>& expected) {
    ++synced;
    const auto calls = static_cast<int64_t>(log.bytes().size());
    int64_t bytes = 0;
    for (int64_t b : log.bytes()) {
      bytes += b;
      for (int k = 0; k < 8; ++k)
        order_digest = (order_digest ^ ((static_cast<uint64_t>(b) >> (8 * k)) & 0xff)) * 0x100000001b3ULL;
    }
    order_digest = (order_digest ^ 0xff) * 0x100000001b3ULL;  // step separator
    min_calls = std::min(min_calls, calls);
    max_calls = std::max(max_calls, calls);
    min_bytes = std::min(min_bytes, bytes);
    max_bytes = std::max(max_bytes, bytes);
    if (first_bad_step.is_null() && log.bytes() != expected) {  // fewer collectives than buckets
      first_bad_step = {{"step", step}, {"launched", log.bytes()}, {"expected", expected}};
    }
    if (launch_ms.size() < at_ms.size()) launch_ms.resize(at_ms.size());
    for (size_t b = 0; b < at_ms.size(); ++b) launch_ms[b].push_back(at_ms[b]);
  }
};

/// Each exercise once on a two-layer model in a group of one, so that a skeleton run lists every
/// missing exercise before the job starts. An exercise that fails here is only reported: a run that
/// does not use it (the oracle's) still runs, and one that does meets the error again in training.
void probe_exercises(LabRun& run) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  dist::ProcessGroup solo(store, 0, 1, torch::kCPU, dist::ProcessGroupOptions{});
  // Fresh layers for each exercise: hooks an exercise leaves behind cannot reach the next one.
  struct Tiny {
    torch::nn::Linear a{2, 2}, b{2, 1};
    std::vector<torch::Tensor> params() const { return {a->weight, a->bias, b->weight, b->bias}; }
    torch::Tensor loss(bool use_b) {
      const torch::Tensor x = torch::ones({3, 2});
      return use_b ? b->forward(a->forward(x)).sum() : a->forward(x).sum();
    }
  };
  auto step = [](dist::GradSync& s, Tiny& m, bool use_b) {
    const torch::Tensor loss = m.loss(use_b);
    s.before_backward(loss);
    loss.backward();
    s.finish();
  };
  // The syncs get the runtime's layout here, so that each exercise is reached without the others.
  auto layout = [](const Tiny& m) { return dist::assign_buckets(m.params(), dist::BucketOptions{8, 8}); };
  run.probe("assign_buckets (04.1)", [&] { (void)lab04::assign_buckets(Tiny().params()); });
  run.probe("BucketedSync (04.1)", [&] {
    Tiny m;
    lab04::BucketedSync s(solo, m.params(), layout(m));
    step(s, m, true);
  });
  run.probe("OverlapSync (04.2)", [&] {
    Tiny m;
    lab04::OverlapSync s(solo, m.params(), layout(m));
    step(s, m, true);
  });
  run.probe("unreached_parameters (04.3)", [&] {
    Tiny m;
    (void)lab04::unreached_parameters(m.loss(false), {torch::autograd::impl::grad_accumulator(m.a->weight),
                                                      torch::autograd::impl::grad_accumulator(m.b->weight)});
  });
  run.probe("OverlapSync with find_unused (04.3)", [&] {
    Tiny m;
    lab04::OverlapSync s(solo, m.params(), layout(m), /*find_unused=*/true);
    step(s, m, false);
  });
}

double median_or_zero(const std::vector<double>& v) { return v.empty() ? 0.0 : median(v); }

std::string mb(int64_t bytes) { return fmt::format("{:.2f} MB", static_cast<double>(bytes) / 1e6); }

std::string list_mb(const std::vector<int64_t>& bytes) {
  std::vector<std::string> out;
  for (int64_t b : bytes) out.push_back(mb(b));
  return fmt::format("{}", fmt::join(out, ", "));
}

std::string list_ms(const std::vector<double>& ms) {
  std::vector<std::string> out;
  for (double v : ms) out.push_back(fmt::format("{:.1f}", v));
  return fmt::format("{}", fmt::join(out, ", "));
}

}  // namespace

int main(int argc, char** argv) {
  std::string rung = "student-overlap";
  double first_mb = 1.0, cap_mb = 25.0;
  int64_t unused_every = 0;
  bool find_unused = false;
  std::string optimizer_name = "sgd";
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description =
      "Lab 04: gradient sync by buckets, overlapped with backward, and parameters a step does not use";
  program.add_flags = [&](LabFlags& f) {
    f.option("--sync", rung,
             "Gradient sync: per-param (the runtime's, one allreduce per tensor), student-bucketed (04.1) or "
             "student-overlap (04.2)")
        ->check(CLI::IsMember({"per-param", "student-bucketed", "student-overlap"}));
    f.option("--first-bucket-mb", first_mb, "Cap of bucket 0 in MiB (DDP: 1)")->check(CLI::PositiveNumber);
    f.option("--bucket-cap-mb", cap_mb, "Cap of every later bucket in MiB (DDP's bucket_cap_mb: 25)")
        ->check(CLI::PositiveNumber);
    f.option("--unused-branch", unused_every,
             "Add a branch that rank r skips at the steps s with (s + r) % K == 0 (0: no branch; 04.3)")
        ->check(CLI::NonNegativeNumber);
    f.option("--optimizer", optimizer_name,
             "sgd (the default here: every gradient error shows in the weights) or adam (the other labs'; it "
             "divides out a gradient's scale)")
        ->check(CLI::IsMember({"sgd", "adam"}));
    f.flag("--find-unused", find_unused,
           "Mark the parameters a step does not reach ready before backward (04.3, DDP's find_unused_parameters)");
  };
  program.body = [&](LabRun& run) {
    const lab04::BucketCaps caps{static_cast<int64_t>(std::llround(first_mb * 1048576.0)),
                                 static_cast<int64_t>(std::llround(cap_mb * 1048576.0))};
    probe_exercises(run);
    auto comm = run.join();

    // The model: DeepFM, or DeepFM with the branch of 04.3. Every rank starts from rank 0's weights.
    DeepFM plain{nullptr};
    BranchyNet branchy{nullptr};
    std::shared_ptr<torch::nn::Module> model;
    if (unused_every > 0) {
      branchy = BranchyNet();
      model = branchy.ptr();
    } else {
      plain = DeepFM();
      model = plain.ptr();
    }
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    // Plain SGD by default: the grader compares the weights with the oracle's, and Adam would hide a
    // gradient summed instead of averaged (m / sqrt(v) does not change when g is scaled).
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    if (optimizer_name == "adam") {
      optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(run.lr()));
    } else {
      optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(run.lr()));
    }
    const std::vector<torch::Tensor> params = model->parameters();

    // The rung. A student class that is not written yet falls back to the oracle, so the run
    // still trains (and ends "not attempted").
    std::unique_ptr<dist::GradSync> sync;
    lab04::OverlapSync* overlap = nullptr;
    const bool built = run.attempt([&] {
      if (rung == "student-bucketed") {
        sync = std::make_unique<lab04::BucketedSync>(*comm, params, caps);
      } else if (rung == "student-overlap") {
        auto s = std::make_unique<lab04::OverlapSync>(*comm, params, caps, find_unused);
        overlap = s.get();
        sync = std::move(s);
      }
    });
    if (!sync) sync = dist::make_grad_sync(dist::SyncStrategy::kPerParam, *comm, params);
    std::vector<int64_t> expected;  // the bytes of each collective of a step, in launch order
    for (const auto& b : sync->buckets()) expected.push_back(b.bytes);

    StepLog log(expected);
    comm->set_observer([&log](dist::Op op, int64_t bytes, int64_t) { log.observe(op, bytes); });
    SyncFigures fig;

    const int64_t steps = run.whole_global_batches();
    run.start_training(model, steps);
    log::info0("sync {}{}: {} bucket(s) of {}{}", rung, built ? "" : " (not written yet: per-param instead)",
               sync->buckets().size(), list_mb(expected),
               unused_every > 0 ? fmt::format("; branch skipped when (step + rank) % {} == 0, find_unused {}",
                                              unused_every, find_unused ? "on" : "off")
                                : "");

    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      auto loader = run.global_batch_loader(epoch, steps);
      run.run_epoch(epoch, *loader, [&](const data::Batch& batch) {
        // The kit's step (train.h), written out to time the sync's parts: before_backward() is
        // DDP's prepare_for_backward (inside forward; find_unused's graph walk happens here),
        // finish() the exposed communication.
        const int64_t s = run.global_step();
        const bool skip = unused_every > 0 && (s + run.rank()) % unused_every == 0;
        fig.branch_skipped += skip;
        const auto t_step = Clock::now();
        StepTimer& timer = run.timer();
        optimizer->zero_grad();
        torch::Tensor loss;
        double prepare_ms = 0;
        {
          auto scope = timer.scope(Phase::kForward);
          const torch::Tensor logits =
              branchy ? branchy->forward(batch, !skip) : plain->forward(batch.dense, batch.rows);
          loss = torch::binary_cross_entropy_with_logits(logits, batch.labels);
          const auto t = Clock::now();
          log.open(s);
          sync->before_backward(loss);
          prepare_ms = ms_since(t);
        }
        const auto t_backward = Clock::now();  // launch times count from here (in prepare: < 0)
        {
          auto scope = timer.scope(Phase::kBackward);
          loss.backward();
        }
        const double backward_ms = ms_since(t_backward);
        const size_t in_backward = log.count();
        const auto t_finish = Clock::now();
        {
          auto scope = timer.scope(Phase::kComm);
          sync->finish();
        }
        fig.exposed_ms.push_back(ms_since(t_finish));
        log.close();
        {
          auto scope = timer.scope(Phase::kOptimizer);
          optimizer->step();
        }
        const std::vector<double> at_ms = log.at_ms(t_backward);
        fig.add(s, log, at_ms, expected);
        fig.step_ms.push_back(ms_since(t_step));
        fig.prepare_ms.push_back(prepare_ms);
        fig.backward_ms.push_back(backward_ms);
        fig.launched_in_backward.push_back(static_cast<double>(in_backward));
        if (overlap) fig.unused_marked += static_cast<int64_t>(overlap->last_unused().size());
        const int64_t every = run.options().log_every;
        if (every > 0 && (s + 1) % every == 0) {
          log::info0(
              "step {}: {} collective(s), {}; exposed comm {:.1f} ms of a {:.1f} ms step; started at {} ms "
              "into a {:.1f} ms backward",
              s + 1, log.bytes().size(), mb(fig.max_bytes), fig.exposed_ms.back(), fig.step_ms.back(), list_ms(at_ms),
              backward_ms);
        }
        return loss.item<double>();
      });
    }
    comm->set_observer(nullptr);

    // The report's "sync" section (grader kinds grad_sync and exposed_comm read it).
    nlohmann::json sj = {{"rung", rung},
                         {"written", built},
                         {"first_bucket_bytes", caps.first_bytes},
                         {"bucket_cap_bytes", caps.cap_bytes},
                         {"unused_branch", unused_every},
                         {"find_unused", find_unused}};
    std::vector<std::string> names;
    for (const auto& item : model->named_parameters()) {
      const torch::Tensor& p = item.value();
      names.push_back(item.key());
      sj["params"].push_back(nlohmann::json{{"name", item.key()},
                                            {"bytes", lab04::tensor_bytes(p)},
                                            {"dtype", std::string(c10::toString(p.scalar_type()))},
                                            {"device", p.device().str()}});
    }
    for (const auto& b : sync->buckets()) {
      nlohmann::json bj = {{"bytes", b.bytes}, {"params", nlohmann::json::array()}};
      for (size_t i : b.params) bj["params"].push_back(names.at(i));
      sj["buckets"].push_back(bj);
    }
    std::vector<double> launch_median;
    for (const auto& v : fig.launch_ms) launch_median.push_back(median_or_zero(v));
    const bool any = fig.synced > 0;
    sj["steps"] = {{"synced", fig.synced},
                   {"collectives", {{"min", any ? fig.min_calls : 0}, {"max", fig.max_calls}}},
                   {"bytes", {{"min", any ? fig.min_bytes : 0}, {"max", fig.max_bytes}}},
                   {"order_in_layout", fig.first_bad_step.is_null()},
                   {"first_bad_step", fig.first_bad_step},
                   {"step_ms_median", median_or_zero(fig.step_ms)},
                   {"prepare_ms_median", median_or_zero(fig.prepare_ms)},
                   {"backward_ms_median", median_or_zero(fig.backward_ms)},
                   {"exposed_comm_ms_median", median_or_zero(fig.exposed_ms)},
                   {"launched_in_backward_median", median_or_zero(fig.launched_in_backward)},
                   {"launch_ms_median", launch_median},
                   {"branch_skipped", fig.branch_skipped},
                   {"unused_marked", fig.unused_marked}};
    const auto order = dist::compare_across_ranks(*comm, fig.order_digest);
    sj["order_digest"] = fmt::format("{:016x}", fig.order_digest);
    sj["order_same_across_ranks"] = order.same();

    std::string digest;
    const auto same = dist::compare_parameters(*comm, *model, &digest);
    sj["params_identical"] = same.same();
    run.report().json()["sync"] = sj;

    const double step_ms = median_or_zero(fig.step_ms), exposed = median_or_zero(fig.exposed_ms);
    log::info0(
        "{}: {} bucket(s), {}-{} collective(s) and {} per step; median step {:.1f} ms, exposed comm {:.1f} ms "
        "({:.0f} %), backward {:.1f} ms, prepare {:.3f} ms; buckets started at {} ms into backward, {:.0f} of them "
        "before it ended",
        rung, sync->buckets().size(), any ? fig.min_calls : 0, fig.max_calls, mb(fig.max_bytes), step_ms, exposed,
        step_ms > 0 ? 100.0 * exposed / step_ms : 0.0, median_or_zero(fig.backward_ms), median_or_zero(fig.prepare_ms),
        list_ms(launch_median), median_or_zero(fig.launched_in_backward));
    if (!fig.first_bad_step.is_null()) {
      log::warn("launch order: NOT the bucket order at step {}: launched {} where the layout is {}",
                fig.first_bad_step["step"].get<int64_t>(),
                list_mb(fig.first_bad_step["launched"].get<std::vector<int64_t>>()), list_mb(expected));
    }
    log::info0("launch order: {}; parameters at the end: {} (rank 0: {})",
               order.same() ? "the same sequence of collectives on every rank"
                            : "the ranks issued different sequences (" + order.describe() + ")",
               same.describe(), digest);
    if (unused_every > 0) {
      log::info0("branch skipped on {} of {} steps on rank {}; {} parameter(s) marked unused", fig.branch_skipped,
                 fig.synced, run.rank(), fig.unused_marked);
    }
    if (plain) run.evaluate_on_rank0(plain, *comm);
  };
  return run_lab(program, argc, argv);
}

// Lab 07 driver: DeepFM split across ranks, measured against data parallel. --mode dp trains
// data-parallel (the baseline; --recompute runs the MLP through the student's recomputation,
// 07.4); --mode split puts the embeddings and the FM on rank 0 and the MLP on rank 1 (the
// student's split_step, 07.1); --mode pipeline runs that split as a GPipe pipeline of
// --micro-batches (07.2); --mode sharded gives each rank some of the 26 tables, exchanges lookups
// with all-to-all and keeps the MLP data-parallel (07.3). Every mode measures what the handout
// asks about: the bytes each step moves against the formula, each rank's idle time, and the tensor
// memory of each rank (memory::Tracker), held to --device-memory-mb when given. At the end every
// rank holds the whole trained model, evaluated and saved as a plain DeepFM. Not edited by students.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include <fmt/format.h>

#include "lab07.h"

#include "ddplab/data/schema.h"
#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/memory.h"
#include "ddplab/timer.h"

namespace {

using namespace ddplab;
using Clock = StepTimer::Clock;
namespace data = ddplab::data;

int64_t bytes_of(const std::vector<torch::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) {
    if (t.defined()) n += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return n;
}

/// The optimizer's state tensors (Adam's two moments; nothing for plain SGD).
int64_t optimizer_state_bytes(torch::optim::Optimizer& opt) {
  int64_t n = 0;
  for (const auto& kv : opt.state()) {
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(kv.second.get())) {
      n += bytes_of({adam->exp_avg(), adam->exp_avg_sq(), adam->max_exp_avg_sq()});
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(kv.second.get())) {
      n += bytes_of({sgd->momentum_buffer()});
    }
  }
  return n;
}

/// Which exercises the submission has, each tried once on something tiny, so a skeleton run
/// lists every missing one.
struct Present {
  bool split = false, pipeline = false, plan = false, lookup = false, recompute = false;
};

/// A world of one for the probes: collectives copy their input, point-to-point does nothing.
struct Loopback final : dist::Communicator {
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce(torch::Tensor&) override {}
  void broadcast(torch::Tensor&, int) override {}
  void allgather(std::vector<torch::Tensor>& o, const torch::Tensor& i) override { o.at(0).copy_(i); }
  void all_to_all(torch::Tensor& o, const torch::Tensor& i) override { o.copy_(i); }
  void all_to_all(torch::Tensor& o, const torch::Tensor& i, const std::vector<int64_t>&,
                  const std::vector<int64_t>&) override {
    o.copy_(i);
  }
  void send(const torch::Tensor&, int, int) override {}
  void recv(torch::Tensor&, int, int) override {}
  void barrier() override {}
};

/// Runs fn; an error other than NotImplemented means the exercise is there (the split and the
/// pipeline refuse a world of one, which is all a probe can give them).
void present_if_it_refuses(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const NotImplemented&) {
    throw;
  } catch (const std::exception&) {
  }
}

Present probe_exercises(LabRun& run) {
  Present p;
  Loopback loop;
  p.split = run.probe("the layer split (07.1)",
                      [&] { present_if_it_refuses([&] { lab07::split_step(loop, lab07::StageFns{}); }); });
  p.pipeline = run.probe("the pipeline (07.2)",
                         [&] { present_if_it_refuses([&] { lab07::pipeline_step(loop, lab07::StageFns{}, 2); }); });
  p.plan = run.probe("the table plan (07.3)", [] { (void)lab07::plan_tables({1, 1}, 1); });
  p.lookup = run.probe("the sharded lookup (07.3)", [&] {
    lab07::TablePlan plan;
    plan.owner.assign(data::kNumSparse, 0);
    const auto layout = lab07::make_shard_layout(plan, 0, 1, 1, 2);
    auto shard = torch::zeros({layout.shard_rows[0], 2}, torch::requires_grad());
    auto rows = torch::tensor(std::vector<int64_t>(data::kOffset.begin(), data::kOffset.end())).unsqueeze(0);
    lab07::sharded_lookup(loop, layout, shard, rows).sum().backward();
  });
  p.recompute = run.probe("recomputation (07.4)", [] {
    torch::nn::Sequential mlp(torch::nn::Linear(2, 1));
    lab07::recompute(mlp, torch::ones({1, 2}, torch::requires_grad())).sum().backward();
  });
  return p;
}

/// Per-step figures of this rank, medians over the steps after the first (warm-up).
struct StepFigures {
  std::vector<double> wall, compute;
  void add(double w, double c) {
    wall.push_back(w);
    compute.push_back(c);
  }
  double median_wall() const { return median_after_first(wall); }
  /// Idle: the share of the step this rank spent neither in forward nor in backward.
  double idle_fraction() const {
    std::vector<double> idle;
    for (size_t i = 1; i < wall.size(); ++i) idle.push_back(wall[i] > 0 ? 1.0 - compute[i] / wall[i] : 0.0);
    if (idle.empty() && !wall.empty()) idle.push_back(wall[0] > 0 ? 1.0 - compute[0] / wall[0] : 0.0);
    return idle.empty() ? 0.0 : median(idle);
  }
  static double median_after_first(const std::vector<double>& v) {
    if (v.size() <= 1) return v.empty() ? 0.0 : v[0];
    return median(std::vector<double>(v.begin() + 1, v.end()));
  }
};

/// Every rank's value of x (allgather of a double through the u64 helper).
std::vector<double> gather_doubles(dist::Communicator& comm, double x) {
  uint64_t bits = 0;
  static_assert(sizeof(bits) == sizeof(x));
  std::memcpy(&bits, &x, sizeof(x));
  std::vector<double> out;
  for (const auto& v : dist::allgather_u64(comm, {bits})) {
    double d = 0;
    std::memcpy(&d, &v.at(0), sizeof(d));
    out.push_back(d);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "dp", optimizer_name = "adam";
  int64_t micro_batches = 4, embedding_dim = 16, memory_mb = 0;
  bool use_recompute = false, autocast = false;
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 07: the model-parallel trap — layer split, pipeline, table-wise sharding, recomputation";
  program.add_flags = [&](LabFlags& f) {
    f.option("--mode", mode,
             "dp (data parallel), split (embeddings on rank 0, MLP on rank 1), pipeline (the split over "
             "--micro-batches), sharded (tables split across ranks, all-to-all)")
        ->check(CLI::IsMember({"dp", "split", "pipeline", "sharded"}));
    f.option("--micro-batches", micro_batches, "Micro-batches per step of --mode pipeline (GPipe)")
        ->check(CLI::PositiveNumber);
    f.option("--embedding-dim", embedding_dim, "Embedding dimension D (the MLP's input is 26 x D + 13)")
        ->check(CLI::PositiveNumber);
    f.option("--device-memory-mb", memory_mb,
             "Per-rank memory budget in MiB for the tensors of a training step (0: none); over it the run "
             "fails with out of device memory")
        ->check(CLI::NonNegativeNumber);
    f.flag("--recompute", use_recompute, "Run the MLP through recompute() (07.4) in --mode dp and sharded");
    f.flag("--autocast", autocast,
           "Forward pass of --mode dp and sharded in the device's low precision (bfloat16 on CPU, float16 on CUDA)");
    f.option("--optimizer", optimizer_name,
             "adam (the kit's) or sgd (plain; every gradient error shows in the weights)")
        ->check(CLI::IsMember({"adam", "sgd"}));
  };
  program.body = [&](LabRun& run) {
    // Counts every tensor of this rank from here on: the model, its gradients, the optimizer's
    // state and each step's activations (CPU: the allocator's reports; CUDA: not yet run).
    memory::Tracker tracker(run.device().is_cuda());
    auto comm = run.join();
    const Present have = probe_exercises(run);
    const int world = run.world_size(), rank = run.rank();
    const bool rank0 = rank == 0;
    const bool split = mode == "split" || mode == "pipeline";
    const int64_t m = mode == "pipeline" ? micro_batches : 1;
    if (split && world != 2) {
      throw ConfigError(fmt::format("--mode {} splits the model in two stages: launch 2 ranks, not {}", mode, world));
    }
    if (use_recompute && split) throw ConfigError("--recompute applies to --mode dp and sharded");
    if (autocast && split) throw ConfigError("--autocast applies to --mode dp and sharded");
    if (m > run.batch()) {
      throw ConfigError(fmt::format("--micro-batches {} is more than the --batch of {} samples", m, run.batch()));
    }
    if (rank0 && mode == "pipeline" && !have.pipeline)
      log::warn("07.2 not attempted: the split runs one micro-batch per step");
    if (rank0 && use_recompute && !have.recompute) log::warn("07.4 not attempted: the MLP keeps its activations");

    DeepFMOptions mo;
    mo.embedding_dim = embedding_dim;
    DeepFM model(mo);
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    const int64_t D = embedding_dim, B = run.batch();
    if (use_recompute && have.recompute) {
      // What recomputation saves, measured on a copy of the MLP at this batch before training: the
      // tensors alive between the MLP's forward and its backward, beyond its input and output.
      torch::nn::Sequential mlp_copy(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->mlp->clone()));
      const torch::Tensor x = torch::zeros({run.batch(), lab07::boundary_width(mo) - 1}, torch::requires_grad());
      int64_t held[2] = {0, 0};
      for (int with = 0; with < 2; ++with) {
        memory::Tracker t;
        const torch::Tensor y = with ? lab07::recompute(mlp_copy, x) : mlp_copy->forward(x);
        held[with] = t.live_bytes() - y.numel() * static_cast<int64_t>(y.element_size());
      }
      log::info0("recomputation: the MLP keeps {} between forward and backward at batch {} ({} without it){}",
                 memory::human_bytes(static_cast<uint64_t>(std::max<int64_t>(0, held[1]))), run.batch(),
                 memory::human_bytes(static_cast<uint64_t>(held[0])),
                 held[1] * 10 < held[0] ? ": less" : ": NOT less (the activations are kept anyway)");
      run.report().json()["model_parallel_recompute"] = {{"held_bytes", held[1]}, {"plain_bytes", held[0]}};
    }

    // ---- this rank's parameters ----
    std::vector<torch::Tensor> params;  // what this rank's optimizer steps
    std::vector<torch::Tensor> dense;   // the data-parallel ones (gradients all-reduced)
    for (const auto& item : model->named_parameters()) {
      const bool table = item.key().rfind("embedding.", 0) == 0 || item.key().rfind("first_order.", 0) == 0;
      const bool stage1 = item.key().rfind("mlp.", 0) == 0;
      if (split) {
        if (stage1 == (rank == 1)) params.push_back(item.value());
      } else if (mode == "sharded") {
        if (!table) dense.push_back(item.value());
      } else {
        dense.push_back(item.value());
      }
    }
    // Sharded: this rank's tables, [its rows, D + 1] (each row: D embedding values and the
    // first-order weight, so one lookup and one all-to-all serve both). The full tables it was
    // initialised from are freed.
    lab07::ShardLayout layout;
    torch::Tensor shard;
    std::vector<int64_t> cardinality(data::kCardinality.begin(), data::kCardinality.end());
    if (mode == "sharded") {
      const lab07::TablePlan plan = lab07::plan_tables(cardinality, world);
      DDPLAB_CHECK(plan.owner.size() == static_cast<size_t>(data::kNumSparse),
                   fmt::format("plan_tables gave {} owners for {} tables", plan.owner.size(), data::kNumSparse));
      layout = lab07::make_shard_layout(plan, rank, world, B, D + 1);
      std::vector<torch::Tensor> parts;
      torch::NoGradGuard no_grad;
      const torch::Tensor both = torch::cat({model->embedding->weight, model->first_order->weight}, 1);
      for (int64_t f : layout.fields[static_cast<size_t>(rank)]) {
        parts.push_back(both.slice(0, data::kOffset[static_cast<size_t>(f)],
                                   data::kOffset[static_cast<size_t>(f)] + data::kCardinality[static_cast<size_t>(f)]));
      }
      shard = (parts.empty() ? torch::empty({0, D + 1}, both.options()) : torch::cat(parts)).clone();
      shard.requires_grad_(true);
      model->embedding->weight.set_data(torch::empty({0, D}, both.options()));
      model->first_order->weight.set_data(torch::empty({0, 1}, both.options()));
      std::string owned;
      for (int64_t f : layout.fields[static_cast<size_t>(rank)])
        owned += fmt::format("{}{}", owned.empty() ? "" : " ", f);
      log::info("rank {} owns {} table(s) ({}), {} of {} rows ({:.1f} %)", rank,
                layout.fields[static_cast<size_t>(rank)].size(), owned, layout.shard_rows[static_cast<size_t>(rank)],
                data::kTotalRows,
                100.0 * static_cast<double>(layout.shard_rows[static_cast<size_t>(rank)]) /
                    static_cast<double>(data::kTotalRows));
      params = dense;
      params.push_back(shard);
    } else if (!split) {
      params = dense;
    }
    // The batch one step trains on: the split's two stages share one batch of --batch; data
    // parallel and sharded ranks each take --batch of a global batch of world x --batch.
    const int64_t step_batch = split ? B : B * world;
    const double lr = run.options().effective_lr(step_batch);
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    if (optimizer_name == "adam") {
      optimizer = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(lr));
    } else {
      optimizer = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr));
    }
    std::unique_ptr<dist::GradSync> sync;
    if (!split) sync = dist::make_grad_sync(dist::SyncStrategy::kBucketed, *comm, dense);

    // ---- the data: model parallel stages see the same batch, data parallel ranks their slice ----
    const uint64_t samples_per_step = static_cast<uint64_t>(step_batch);
    const int64_t steps = static_cast<int64_t>(run.train_size() / samples_per_step);
    if (steps == 0) {
      throw ConfigError(
          fmt::format("--train-samples {} is smaller than one step's {} samples", run.train_size(), samples_per_step));
    }
    run.start_training(model.ptr(), steps);

    StepTimer& timer = run.timer();
    StepFigures figures;
    double compute_s = 0;  // this step's forward and backward time on this rank
    int64_t held_max = 0, step_start_live = 0, peak_max = 0;
    int64_t forwards_before_first_backward = -1, forwards_seen = 0, backwards_seen = 0;
    bool gpipe_order = true;
    const data::Batch* current = nullptr;
    auto note_held = [&] { held_max = std::max(held_max, tracker.live_bytes() - step_start_live); };
    auto timed = [&](Phase phase, const std::function<void()>& fn) {
      const auto t0 = Clock::now();
      {
        auto s = timer.scope(phase);
        fn();
      }
      compute_s += seconds_since(t0);
    };
    auto check_budget = [&](int64_t step) {
      peak_max = std::max(peak_max, tracker.peak_bytes());
      if (memory_mb <= 0 || tracker.peak_bytes() <= memory_mb * (int64_t{1} << 20)) return;
      std::vector<torch::Tensor> grads;
      for (const auto& p : params) grads.push_back(p.grad());
      const int64_t pb = bytes_of(params), gb = bytes_of(grads), ob = optimizer_state_bytes(*optimizer);
      throw Error(fmt::format(
          "out of device memory on rank {} in step {}: the step peaked at {} of tensors, over --device-memory-mb "
          "{} (parameters {}, gradients {}, optimizer state {}, activations and the rest {}). Cut memory first "
          "(--recompute, a smaller --embedding-dim), then split the tables (--mode sharded)",
          rank, step, memory::human_bytes(static_cast<uint64_t>(tracker.peak_bytes())), memory_mb,
          memory::human_bytes(static_cast<uint64_t>(pb)), memory::human_bytes(static_cast<uint64_t>(gb)),
          memory::human_bytes(static_cast<uint64_t>(ob)),
          memory::human_bytes(static_cast<uint64_t>(std::max<int64_t>(0, tracker.peak_bytes() - pb - gb - ob)))));
    };

    // The split's stages over micro-batches of the current batch.
    auto range = [&](int64_t i) {
      const int64_t b = current->labels.size(0), base = b / m, extra = b % m;
      const int64_t start = i * base + std::min(i, extra);
      return std::pair<int64_t, int64_t>{start, start + base + (i < extra ? 1 : 0)};
    };
    auto note_backward = [&] {
      if (forwards_before_first_backward < 0) forwards_before_first_backward = forwards_seen;
      ++backwards_seen;
    };
    lab07::StageFns fns;
    fns.first_forward = [&](int64_t i) {
      const auto r = range(i);
      torch::Tensor x;
      timed(Phase::kForward, [&] {
        x = lab07::stage0_boundary(*model, current->dense.slice(0, r.first, r.second),
                                   current->rows.slice(0, r.first, r.second));
      });
      ++forwards_seen;
      if (backwards_seen > 0) gpipe_order = false;
      note_held();
      return x;
    };
    fns.first_backward = [&](int64_t, const torch::Tensor& x, const torch::Tensor& g) {
      note_backward();
      timed(Phase::kBackward, [&] { x.backward(g); });
    };
    fns.boundary_shape = [&](int64_t i) {
      const auto r = range(i);
      return std::vector<int64_t>{r.second - r.first, lab07::boundary_width(mo)};
    };
    fns.last_forward = [&](int64_t i, const torch::Tensor& x) {
      const auto r = range(i);
      torch::Tensor loss;
      timed(Phase::kForward, [&] {
        loss = torch::binary_cross_entropy_with_logits(lab07::stage1_logit(*model, x),
                                                       current->labels.slice(0, r.first, r.second));
      });
      ++forwards_seen;
      if (backwards_seen > 0) gpipe_order = false;
      note_held();
      return loss;
    };
    fns.last_backward = [&](int64_t, const torch::Tensor& loss) {
      note_backward();
      timed(Phase::kBackward, [&] { loss.backward(); });
    };
    fns.samples = [&](int64_t i) {
      const auto r = range(i);
      return r.second - r.first;
    };

    // Data parallel and sharded: the forward written out, so that the MLP can be recomputed and the
    // sharded lookup replace the tables.
    auto dp_forward = [&](const data::Batch& b) {
      torch::Tensor e, first;
      if (mode == "sharded") {
        std::vector<torch::Tensor> gathered(static_cast<size_t>(world));
        for (auto& g : gathered) g = torch::empty_like(b.rows);
        comm->allgather(gathered, b.rows);
        const torch::Tensor e1 = lab07::sharded_lookup(*comm, layout, shard, torch::cat(gathered));
        e = e1.slice(2, 0, D);
        first = e1.select(2, D).sum(1) + model->dense_linear->forward(b.dense).squeeze(1);
      } else {
        e = model->embedding->forward(b.rows);
        first = model->first_order->forward(b.rows).sum({1, 2}) + model->dense_linear->forward(b.dense).squeeze(1);
      }
      const torch::Tensor deep_in = torch::cat({e.flatten(1), b.dense}, 1);
      const torch::Tensor deep =
          use_recompute && have.recompute ? lab07::recompute(model->mlp, deep_in) : model->mlp->forward(deep_in);
      return torch::binary_cross_entropy_with_logits(first + DeepFMImpl::fm_interaction(e) + deep.squeeze(1), b.labels);
    };

    const auto stats0 = comm->stats();
    int64_t steps_taken = 0;
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      const auto order = data::shuffled_order(run.train_size(), run.options().seed, static_cast<uint64_t>(epoch));
      data::BatchLoader loader(run.train(),
                               split ? data::global_batch_slice(order, steps, B, 0, 1)
                                     : data::global_batch_slice(order, steps, B, rank, world),
                               B, run.device());
      run.run_epoch(epoch, loader, [&](const data::Batch& batch) {
        current = &batch;
        const auto t0 = Clock::now();
        compute_s = 0;
        optimizer->zero_grad();
        tracker.reset_peak();
        step_start_live = tracker.live_bytes();
        double loss = 0;
        if (split) {
          forwards_seen = backwards_seen = 0;
          forwards_before_first_backward = -1;
          loss = m > 1 && have.pipeline ? lab07::pipeline_step(*comm, fns, m) : lab07::split_step(*comm, fns);
          // The loss is known on the last stage; the driver shares it for the progress line and the
          // report (one float, counted as a broadcast: not part of the lesson's traffic).
          torch::Tensor l = torch::full({1}, loss, torch::kDouble);
          comm->broadcast(l, 1);
          loss = l.item<double>();
          if (forwards_before_first_backward != m) gpipe_order = false;
        } else {
          torch::Tensor l;
          timed(Phase::kForward, [&] {
            lab07::AutocastAs cast(run.device().type(), autocast);
            l = dp_forward(batch);
          });
          note_held();
          sync->before_backward(l);
          timed(Phase::kBackward, [&] { l.backward(); });
          auto s = timer.scope(Phase::kComm);
          sync->finish();
          loss = l.item<double>();
        }
        {
          auto s = timer.scope(Phase::kOptimizer);
          optimizer->step();
        }
        check_budget(steps_taken);
        figures.add(seconds_since(t0), compute_s);
        ++steps_taken;
        return loss;
      });
    }
    const auto stats1 = comm->stats();

    // ---- what the run measured ----
    nlohmann::json lj = {{"mode", mode},
                         {"embedding_dim", D},
                         {"steps", steps_taken},
                         {"micro_batches", m},
                         {"recompute", use_recompute && have.recompute},
                         {"autocast", autocast},
                         {"step_batch", step_batch},
                         {"lr", lr}};
    auto per_step = [&](dist::Op op) {
      const int o = static_cast<int>(op);
      return steps_taken ? (stats1.ops[o].bytes - stats0.ops[o].bytes) / steps_taken : 0;
    };
    const std::vector<double> idle = gather_doubles(*comm, figures.idle_fraction());
    const std::vector<double> step_ms = gather_doubles(*comm, 1000.0 * figures.median_wall());
    std::string idle_text;
    for (int r = 0; r < world; ++r) idle_text += fmt::format("{}rank {} {:.0f} %", r ? ", " : "", r, 100 * idle[r]);
    log::info0("step time (median): {:.1f} ms; idle (outside forward and backward): {}", step_ms[0], idle_text);
    lj["step_ms_median"] = step_ms;
    lj["idle_fraction"] = idle;
    if (split) {
      const int64_t boundary = B * lab07::boundary_width(mo) * 4;
      const int64_t sent = per_step(dist::Op::kSend), received = per_step(dist::Op::kRecv);
      const auto all_sent = dist::allgather_u64(*comm, {static_cast<uint64_t>(sent)});
      const bool ok =
          static_cast<int64_t>(all_sent[0][0]) == boundary && static_cast<int64_t>(all_sent[1][0]) == boundary;
      log::info0(
          "boundary traffic per step: rank 0 sent {} bytes, rank 1 sent {} bytes; b x (26 x D + 14) x 4 = {}: {}",
          all_sent[0][0], all_sent[1][0], boundary, ok ? "matches the formula" : "does NOT match the formula");
      lj["bytes_per_step"] = {{"sent", sent}, {"received", received}, {"formula", boundary}, {"matches", ok}};
      if (mode == "pipeline") {
        const double formula = static_cast<double>(world - 1) / static_cast<double>(m + world - 1);
        const bool order_ok = comm->size() == 2 && gpipe_order && have.pipeline;
        const auto orders = dist::allgather_u64(*comm, {order_ok ? 1u : 0u});
        const bool both = orders[0][0] == 1 && orders[1][0] == 1;
        log::info0("pipeline schedule: {}", both ? "GPipe (every forward before the first backward, on both stages)"
                                                 : "NOT GPipe (a backward ran before the last forward on some stage)");
        log::info0(
            "bubble with {} micro-batches: formula (W - 1) / (m + W - 1) = {:.3f}; measured idle: rank 0 {:.3f}, "
            "rank 1 {:.3f} (the formula assumes equal stages)",
            m, formula, idle[0], idle[1]);
        lj["bubble"] = {{"formula", formula}, {"measured", idle}, {"gpipe_order", both}};
      }
    }
    if (mode == "sharded") {
      const int64_t w = D + 1, F = data::kNumSparse;
      const int64_t mine = static_cast<int64_t>(layout.fields[static_cast<size_t>(rank)].size());
      const int64_t counted = per_step(dist::Op::kAllToAll);
      const int64_t expect = (world * B * mine + B * F) * w * 4;  // forward payload + backward payload
      // Bytes that leave this rank per step (each direction), from the counted payloads.
      const double crossing_fwd = static_cast<double>(world - 1) * static_cast<double>(B * mine * w * 4);
      const double crossing_bwd = static_cast<double>(B * (F - mine) * w * 4);
      const auto all = gather_doubles(*comm, counted == expect ? (crossing_fwd + crossing_bwd) / 2 : -1.0);
      double mean = 0;
      bool counted_ok = true;
      for (double v : all) {
        counted_ok = counted_ok && v >= 0;
        mean += v / world;
      }
      const double formula = static_cast<double>(B * F * w * 4) * (world - 1) / world;
      const bool ok = counted_ok && std::abs(mean - formula) <= 0.01 * formula;
      log::info0(
          "all-to-all per step: {:.0f} bytes each direction per rank (job mean, counted); b x F x (D + 1) x 4 x "
          "(W - 1) / W = {:.0f}: {}",
          counted_ok ? mean : 0.0, formula,
          ok ? "matches the formula" : "does NOT match the formula (a rank's all-to-all moved other bytes)");
      if (!counted_ok && counted != expect) {
        log::warn(
            "rank {}: {} all-to-all bytes per step, expected {} (its fields for the global batch forward, every "
            "field of its samples backward)",
            rank, counted, expect);
      }
      const int64_t table_rows = layout.shard_rows[static_cast<size_t>(rank)];
      log::info0("embedding tables per rank: {} of {} rows on rank 0 ({:.2f} of the tables; 1/W = {:.2f})",
                 layout.shard_rows[0], data::kTotalRows, static_cast<double>(layout.shard_rows[0]) / data::kTotalRows,
                 1.0 / world);
      lj["all_to_all"] = {{"bytes_per_step", counted},
                          {"expected", expect},
                          {"mean_each_direction", mean},
                          {"formula", formula},
                          {"matches", ok}};
      lj["table_rows"] = table_rows;
    }
    // Memory: what one step of this rank needed.
    {
      std::vector<torch::Tensor> grads;
      for (const auto& p : params) grads.push_back(p.grad());
      const int64_t pb = bytes_of(params), gb = bytes_of(grads), ob = optimizer_state_bytes(*optimizer);
      const auto peaks = gather_doubles(*comm, static_cast<double>(peak_max));
      const auto helds = gather_doubles(*comm, static_cast<double>(held_max));
      std::string text;
      for (int r = 0; r < world; ++r) {
        text += fmt::format("{}rank {} {}", r ? ", " : "", r, memory::human_bytes(static_cast<uint64_t>(peaks[r])));
      }
      log::info0("tensor memory per rank (peak of a step): {}{}", text,
                 memory_mb > 0 ? fmt::format("; budget {} MiB each: within it", memory_mb) : "");
      log::info0("activations held for backward (largest over steps): rank 0 {}",
                 memory::human_bytes(static_cast<uint64_t>(helds[0])));
      lj["memory"] = {{"peak_bytes", peaks},  {"activations_bytes", helds},  {"parameter_bytes", pb},
                      {"gradient_bytes", gb}, {"optimizer_state_bytes", ob}, {"budget_mb", memory_mb}};
    }

    // ---- every rank gets the whole trained model ----
    {
      torch::NoGradGuard no_grad;
      if (split) {
        dist::broadcast_module(*comm, *model->embedding, 0);
        dist::broadcast_module(*comm, *model->first_order, 0);
        dist::broadcast_module(*comm, *model->dense_linear, 0);
        dist::broadcast_module(*comm, *model->mlp, 1);
      } else if (mode == "sharded") {
        torch::Tensor both = torch::empty({data::kTotalRows, D + 1}, shard.options());
        for (int r = 0; r < world; ++r) {
          torch::Tensor part = r == rank
                                   ? shard.detach().clone()
                                   : torch::empty({layout.shard_rows[static_cast<size_t>(r)], D + 1}, shard.options());
          comm->broadcast(part, r);
          int64_t at = 0;
          for (int64_t f : layout.fields[static_cast<size_t>(r)]) {
            const int64_t n = data::kCardinality[static_cast<size_t>(f)];
            both.slice(0, data::kOffset[static_cast<size_t>(f)], data::kOffset[static_cast<size_t>(f)] + n)
                .copy_(part.slice(0, at, at + n));
            at += n;
          }
        }
        model->embedding->weight.set_data(both.slice(1, 0, D).contiguous());
        model->first_order->weight.set_data(both.slice(1, D, D + 1).contiguous());
      }
    }
    std::string digest;
    const auto same = dist::compare_parameters(*comm, *model, &digest);
    lj["params_identical"] = same.same();
    log::info0("parameters at the end: {} (rank 0: {})", same.describe(), digest);
    run.report().json()["model_parallel"] = lj;
    run.evaluate_on_rank0(model, *comm);
  };
  return run_lab(program, argc, argv);
}

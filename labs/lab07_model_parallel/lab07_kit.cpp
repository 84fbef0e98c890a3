// Lab 07's apparatus (see lab07_kit.h). Not edited by students.
#include "lab07_kit.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ddplab/data/schema.h"
#include "ddplab/dist/agree.h"
#include "ddplab/error.h"
#include "ddplab/log.h"
#include "ddplab/optim.h"

namespace lab07 {

using ddplab::ConfigError;
using ddplab::Error;
using ddplab::Phase;
using ddplab::dist::Op;
namespace data = ddplab::data;
namespace memory = ddplab::memory;

namespace {
std::string human(int64_t bytes) { return memory::human_bytes(static_cast<uint64_t>(std::max<int64_t>(0, bytes))); }
std::vector<double> percent(std::vector<double> v) {
  for (double& x : v) x *= 100.0;
  return v;
}
}  // namespace

// ---- flags and probes ----

ddplab::DeepFMOptions Flags::model_options() const {
  ddplab::DeepFMOptions mo;
  mo.embedding_dim = embedding_dim;
  return mo;
}

void add_flags(ddplab::LabFlags& f, Flags& flags) {
  f.option("--mode", flags.mode,
           "dp (data parallel), split (embeddings on rank 0, MLP on rank 1), pipeline (the split over "
           "--micro-batches), sharded (tables split across ranks, all-to-all)")
      ->check(CLI::IsMember({"dp", "split", "pipeline", "sharded"}));
  f.option("--micro-batches", flags.micro_batches, "Micro-batches per step of --mode pipeline (GPipe)")
      ->check(CLI::PositiveNumber);
  f.option("--embedding-dim", flags.embedding_dim, "Embedding dimension D (the MLP's input is 26 x D + 13)")
      ->check(CLI::PositiveNumber);
  f.option("--device-memory-mb", flags.device_memory_mb,
           "Per-rank memory budget in MiB for the tensors of a training step (0: none); over it the run "
           "fails with out of device memory")
      ->check(CLI::NonNegativeNumber);
  f.flag("--recompute", flags.recompute, "Run the MLP through recompute() (07.4) in --mode dp and sharded");
  f.flag("--autocast", flags.autocast,
         "Forward pass of --mode dp and sharded in the device's low precision (bfloat16 on CPU, float16 on CUDA)");
  f.optimizer(flags.optimizer, "adam is the kit's; sgd is plain, every gradient error shows in the weights");
}

void check_flags(const Flags& flags, int world, int64_t batch) {
  if (flags.split() && world != 2) {
    throw ConfigError(
        fmt::format("--mode {} splits the model in two stages: launch 2 ranks, not {}", flags.mode, world));
  }
  if (flags.recompute && flags.split()) throw ConfigError("--recompute applies to --mode dp and sharded");
  if (flags.autocast && flags.split()) throw ConfigError("--autocast applies to --mode dp and sharded");
  if (flags.micro() > batch) {
    throw ConfigError(fmt::format("--micro-batches {} is more than the --batch of {} samples", flags.micro(), batch));
  }
}

namespace {
/// Runs fn; an error other than NotImplemented means the exercise is there.
void present_if_it_refuses(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ddplab::NotImplemented&) {
    throw;
  } catch (const std::exception&) {
  }
}
}  // namespace

void add_probes(ddplab::LabProgram& program) {
  program.probe("07.1", "the layer split",
                [](ddplab::ProbeContext& ctx) { present_if_it_refuses([&] { split_step(ctx.comm, StageFns{}); }); });
  program.probe("07.2", "the pipeline", [](ddplab::ProbeContext& ctx) {
    present_if_it_refuses([&] { pipeline_step(ctx.comm, StageFns{}, 2); });
  });
  program.probe("07.3", "the table plan", [](ddplab::ProbeContext&) { (void)plan_tables({1, 1}, 1); });
  program.probe("07.3", "the sharded lookup", [](ddplab::ProbeContext& ctx) {
    TablePlan plan;
    plan.owner.assign(data::kNumSparse, 0);
    const auto layout = make_shard_layout(plan, 0, 1, 1, 2);
    auto shard = torch::zeros({layout.shard_rows[0], 2}, torch::requires_grad());
    auto rows = torch::tensor(std::vector<int64_t>(data::kOffset.begin(), data::kOffset.end())).unsqueeze(0);
    sharded_lookup(ctx.comm, layout, shard, rows).sum().backward();
  });
  program.probe("07.4", "recomputation", [](ddplab::ProbeContext&) {
    torch::nn::Sequential mlp(torch::nn::Linear(2, 1));
    recompute(mlp, torch::ones({1, 2}, torch::requires_grad())).sum().backward();
  });
}

void measure_recompute(ddplab::LabRun& run, ddplab::DeepFM& model, int64_t batch) {
  torch::nn::Sequential mlp_copy(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->mlp->clone()));
  const torch::Tensor x = torch::zeros({batch, boundary_width(model->options()) - 1}, torch::requires_grad());
  int64_t held[2] = {0, 0};
  for (int with = 0; with < 2; ++with) {
    memory::Tracker t;
    const torch::Tensor y = with ? recompute(mlp_copy, x) : mlp_copy->forward(x);
    held[with] = t.live_bytes() - y.numel() * static_cast<int64_t>(y.element_size());
  }
  const bool less = held[1] * 10 < held[0];
  run.report().json()["model_parallel_recompute"] = {{"held_bytes", held[1]}, {"plain_bytes", held[0]}};
  run.report().verdict("recompute_saves_memory", less,
                       fmt::format("recomputation: the MLP keeps {} between forward and backward at batch {} ({} "
                                   "without it){}",
                                   human(held[1]), batch, human(held[0]),
                                   less ? ": less" : ": NOT less (the activations are kept anyway)"),
                       {{"held_bytes", held[1]}, {"plain_bytes", held[0]}});
}

// ---- placement ----

Placement place(ddplab::DeepFM& model, const Flags& flags, int rank, int world, int64_t batch) {
  Placement p;
  if (flags.split()) {
    // Stage 0 (rank 0): the tables, the dense linear term and the FM; stage 1 (rank 1): the MLP.
    for (const auto& item : model->named_parameters()) {
      if ((item.key().rfind("mlp.", 0) == 0) == (rank == 1)) p.params.push_back(item.value());
    }
    return p;
  }
  if (!flags.sharded()) {
    p.dense = p.params = model->parameters();
    return p;
  }
  p.dense = model->dense_parameters();
  const int64_t D = flags.embedding_dim;
  std::vector<int64_t> cardinality(data::kCardinality.begin(), data::kCardinality.end());
  const TablePlan plan = plan_tables(cardinality, world);
  DDPLAB_CHECK(plan.owner.size() == static_cast<size_t>(data::kNumSparse),
               fmt::format("plan_tables gave {} owners for {} tables", plan.owner.size(), data::kNumSparse));
  p.layout = make_shard_layout(plan, rank, world, batch, D + 1);
  const auto& mine = p.layout.fields[static_cast<size_t>(rank)];
  std::vector<torch::Tensor> parts;
  torch::NoGradGuard no_grad;
  const torch::Tensor both = torch::cat({model->embedding->weight, model->first_order->weight}, 1);
  for (int64_t f : mine) {
    const int64_t at = data::kOffset[static_cast<size_t>(f)];
    parts.push_back(both.slice(0, at, at + data::kCardinality[static_cast<size_t>(f)]));
  }
  p.shard = (parts.empty() ? torch::empty({0, D + 1}, both.options()) : torch::cat(parts)).clone();
  p.shard.requires_grad_(true);
  model->embedding->weight.set_data(torch::empty({0, D}, both.options()));
  model->first_order->weight.set_data(torch::empty({0, 1}, both.options()));
  std::string owned;
  for (int64_t f : mine) owned += fmt::format("{}{}", owned.empty() ? "" : " ", f);
  const int64_t rows = p.layout.shard_rows[static_cast<size_t>(rank)];
  ddplab::log::info("rank {} owns {} table(s) ({}), {} of {} rows ({:.1f} %)", rank, mine.size(), owned, rows,
                    data::kTotalRows, 100.0 * static_cast<double>(rows) / static_cast<double>(data::kTotalRows));
  p.params = p.dense;
  p.params.push_back(p.shard);
  return p;
}

// ---- memory ----

void StepMemory::begin_step() {
  tracker_.reset_peak();
  start_live_ = tracker_.live_bytes();
}

void StepMemory::note_held() { held_max_ = std::max(held_max_, tracker_.live_bytes() - start_live_); }

void StepMemory::end_step(int64_t step, int rank, const std::vector<torch::Tensor>& params,
                          torch::optim::Optimizer& optimizer) {
  peak_max_ = std::max(peak_max_, tracker_.peak_bytes());
  if (budget_mb_ <= 0 || tracker_.peak_bytes() <= budget_mb_ * (int64_t{1} << 20)) return;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  const int64_t pb = memory::bytes_of(params), gb = memory::bytes_of(grads), ob = ddplab::optim::state_bytes(optimizer);
  throw Error(fmt::format(
      "out of device memory on rank {} in step {}: the step peaked at {} of tensors, over --device-memory-mb "
      "{} (parameters {}, gradients {}, optimizer state {}, activations and the rest {}). Cut memory first "
      "(--recompute, a smaller --embedding-dim), then split the tables (--mode sharded)",
      rank, step, human(tracker_.peak_bytes()), budget_mb_, human(pb), human(gb), human(ob),
      human(tracker_.peak_bytes() - pb - gb - ob)));
}

// ---- the split's stages ----

std::pair<int64_t, int64_t> Stages::range(int64_t b, int64_t m, int64_t i) {
  const int64_t base = b / m, extra = b % m;
  const int64_t start = i * base + std::min(i, extra);
  return {start, start + base + (i < extra ? 1 : 0)};
}

Stages::Stages(ddplab::DeepFM& model, ddplab::StepTimer& timer, StepMemory& memory, int64_t micro_batches)
    : model_(model), timer_(timer), memory_(memory), m_(micro_batches) {
  auto slice = [this](int64_t i) { return range(batch_->labels.size(0), m_, i); };
  fns_.first_forward = [this, slice](int64_t i) {
    const auto r = slice(i);
    torch::Tensor x;
    {
      auto s = timer_.scope(Phase::kForward);
      x = stage0_boundary(*model_, batch_->dense.slice(0, r.first, r.second), batch_->rows.slice(0, r.first, r.second));
    }
    forward_ran();
    return x;
  };
  fns_.first_backward = [this](int64_t, const torch::Tensor& x, const torch::Tensor& g) {
    backward_ran();
    auto s = timer_.scope(Phase::kBackward);
    x.backward(g);
  };
  fns_.boundary_shape = [this, slice](int64_t i) {
    const auto r = slice(i);
    return std::vector<int64_t>{r.second - r.first, boundary_width(model_->options())};
  };
  fns_.last_forward = [this, slice](int64_t i, const torch::Tensor& x) {
    const auto r = slice(i);
    torch::Tensor loss;
    {
      auto s = timer_.scope(Phase::kForward);
      loss =
          torch::binary_cross_entropy_with_logits(stage1_logit(*model_, x), batch_->labels.slice(0, r.first, r.second));
    }
    forward_ran();
    return loss;
  };
  fns_.last_backward = [this](int64_t, const torch::Tensor& loss) {
    backward_ran();
    auto s = timer_.scope(Phase::kBackward);
    loss.backward();
  };
  fns_.samples = [slice](int64_t i) {
    const auto r = slice(i);
    return r.second - r.first;
  };
}

void Stages::begin(const ddplab::data::Batch& batch) {
  batch_ = &batch;
  forwards_ = backwards_ = 0;
  forwards_before_first_backward_ = -1;
}

void Stages::forward_ran() {
  ++forwards_;
  if (backwards_ > 0) gpipe_ = false;
  memory_.note_held();
}

void Stages::backward_ran() {
  if (forwards_before_first_backward_ < 0) forwards_before_first_backward_ = forwards_;
  ++backwards_;
}

void Stages::end_order() {
  if (forwards_before_first_backward_ != m_) gpipe_ = false;
}

double Stages::end(ddplab::dist::Communicator& comm, double loss, torch::optim::Optimizer& optimizer) {
  end_order();
  torch::Tensor l = torch::full({1}, loss, torch::kDouble);
  comm.broadcast(l, 1);
  {
    auto s = timer_.scope(Phase::kOptimizer);
    optimizer.step();
  }
  return l.item<double>();
}

// ---- what the run measured ----

namespace {
/// Per step: seconds without the data wait, and forward + backward.
std::vector<std::pair<double, double>> step_figures(const ddplab::StepTimer& timer) {
  const auto wait = timer.phase_per_step(Phase::kDataWait), fwd = timer.phase_per_step(Phase::kForward),
             bwd = timer.phase_per_step(Phase::kBackward);
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < timer.step_seconds().size(); ++i) {
    out.emplace_back(timer.step_seconds()[i] - wait[i], fwd[i] + bwd[i]);
  }
  if (out.size() > 1) out.erase(out.begin());  // the first step warms up
  return out;
}
}  // namespace

double idle_fraction(const ddplab::StepTimer& timer) {
  std::vector<double> idle;
  for (const auto& [wall, compute] : step_figures(timer)) idle.push_back(wall > 0 ? 1.0 - compute / wall : 0.0);
  return idle.empty() ? 0.0 : ddplab::median(idle);
}

double step_seconds(const ddplab::StepTimer& timer) {
  std::vector<double> wall;
  for (const auto& f : step_figures(timer)) wall.push_back(f.first);
  return wall.empty() ? 0.0 : ddplab::median(wall);
}

void report(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const Flags& flags, const Placement& placement,
            torch::optim::Optimizer& optimizer, const Measured& measured) {
  const int world = comm.size(), rank = comm.rank();
  const int64_t D = flags.embedding_dim, B = run.batch(), m = flags.micro();
  auto& rep = run.report();
  nlohmann::json lj = {{"mode", flags.mode},
                       {"embedding_dim", D},
                       {"steps", measured.steps},
                       {"micro_batches", m},
                       {"recompute", flags.recompute && run.has("07.4")},
                       {"autocast", flags.autocast},
                       {"step_batch", measured.step_batch},
                       {"lr", measured.lr}};
  const auto& traffic = *measured.traffic;
  const std::vector<double> idle = ddplab::dist::allgather_f64(comm, idle_fraction(run.timer()));
  const std::vector<double> step_ms = ddplab::dist::allgather_f64(comm, 1000.0 * step_seconds(run.timer()));
  ddplab::log::info0("step time (median): {:.1f} ms; idle (outside forward and backward): {}", step_ms[0],
                     ddplab::dist::per_rank(percent(idle), "{:.0f} %"));
  lj["step_ms_median"] = step_ms;
  lj["idle_fraction"] = idle;
  if (flags.split()) {
    const int64_t boundary = B * boundary_width(flags.model_options()) * 4;
    const int64_t sent = traffic.bytes_per(Op::kSend, measured.steps);
    const int64_t received = traffic.bytes_per(Op::kRecv, measured.steps);
    const auto all_sent = ddplab::dist::allgather_f64(comm, static_cast<double>(sent));
    const bool ok = all_sent[0] == static_cast<double>(boundary) && all_sent[1] == static_cast<double>(boundary);
    lj["bytes_per_step"] = {{"sent", sent}, {"received", received}, {"formula", boundary}};
    rep.verdict("boundary_traffic", ok,
                fmt::format("boundary traffic per step: rank 0 sent {:.0f} bytes, rank 1 sent {:.0f} bytes; b x (26 x "
                            "D + 14) x 4 = {}: {}",
                            all_sent[0], all_sent[1], boundary,
                            ok ? "matches the formula" : "does NOT match the formula"),
                {{"sent", all_sent}, {"formula", boundary}});
    if (flags.mode == "pipeline") {
      const double formula = static_cast<double>(world - 1) / static_cast<double>(m + world - 1);
      const auto orders = ddplab::dist::allgather_f64(comm, measured.gpipe_order && run.has("07.2") ? 1.0 : 0.0);
      const bool both = orders[0] == 1.0 && orders[1] == 1.0;
      rep.verdict("gpipe_schedule", both,
                  both ? "pipeline schedule: GPipe (every forward before the first backward, on both stages)"
                       : "pipeline schedule: NOT GPipe (a backward ran before the last forward on some stage)");
      ddplab::log::info0(
          "bubble with {} micro-batches: formula (W - 1) / (m + W - 1) = {:.3f}; measured idle: rank 0 {:.3f}, "
          "rank 1 {:.3f} (the formula assumes equal stages)",
          m, formula, idle[0], idle[1]);
      lj["bubble"] = {{"formula", formula}, {"measured", idle}};
    }
  }
  if (flags.sharded()) {
    const int64_t w = D + 1, F = data::kNumSparse;
    const int64_t mine = static_cast<int64_t>(placement.layout.fields[static_cast<size_t>(rank)].size());
    const int64_t counted = traffic.bytes_per(Op::kAllToAll, measured.steps);
    const int64_t expect = (world * B * mine + B * F) * w * 4;  // forward payload + backward payload
    // Bytes that leave this rank per step (each direction), from the counted payloads.
    const double crossing_fwd = static_cast<double>(world - 1) * static_cast<double>(B * mine * w * 4);
    const double crossing_bwd = static_cast<double>(B * (F - mine) * w * 4);
    const auto all = ddplab::dist::allgather_f64(comm, counted == expect ? (crossing_fwd + crossing_bwd) / 2 : -1.0);
    double mean = 0;
    bool counted_ok = true;
    for (double v : all) {
      counted_ok = counted_ok && v >= 0;
      mean += v / world;
    }
    const double formula = static_cast<double>(B * F * w * 4) * (world - 1) / world;
    const bool ok = counted_ok && std::abs(mean - formula) <= 0.01 * formula;
    if (!counted_ok && counted != expect) {
      ddplab::log::warn(
          "rank {}: {} all-to-all bytes per step, expected {} (its fields for the global batch forward, every "
          "field of its samples backward)",
          rank, counted, expect);
    }
    rep.verdict("all_to_all_traffic", ok,
                fmt::format("all-to-all per step: {:.0f} bytes each direction per rank (job mean, counted); b x F x "
                            "(D + 1) x 4 x (W - 1) / W = {:.0f}: {}",
                            counted_ok ? mean : 0.0, formula,
                            ok ? "matches the formula"
                               : "does NOT match the formula (a rank's all-to-all moved other bytes)"),
                {{"mean_each_direction", mean}, {"formula", formula}});
    ddplab::log::info0("embedding tables per rank: {} of {} rows on rank 0 ({:.2f} of the tables; 1/W = {:.2f})",
                       placement.layout.shard_rows[0], data::kTotalRows,
                       static_cast<double>(placement.layout.shard_rows[0]) / data::kTotalRows, 1.0 / world);
    lj["all_to_all"] = {{"bytes_per_step", counted},
                        {"expected", expect},
                        {"mean_each_direction", mean},
                        {"formula", formula}};
    lj["table_rows"] = placement.layout.shard_rows[static_cast<size_t>(rank)];
  }
  // Memory: what one step of this rank needed.
  std::vector<torch::Tensor> grads;
  for (const auto& p : placement.params) grads.push_back(p.grad());
  const auto peaks = ddplab::dist::allgather_f64(comm, static_cast<double>(measured.memory->peak()));
  const auto helds = ddplab::dist::allgather_f64(comm, static_cast<double>(measured.memory->held()));
  std::string text;
  for (int r = 0; r < world; ++r) {
    text += fmt::format("{}rank {} {}", r ? ", " : "", r, human(static_cast<int64_t>(peaks[static_cast<size_t>(r)])));
  }
  ddplab::log::info0("tensor memory per rank (peak of a step): {}{}", text,
                     flags.device_memory_mb > 0 ? fmt::format("; budget {} MiB each: within it", flags.device_memory_mb)
                                                : "");
  ddplab::log::info0("activations held for backward (largest over steps): rank 0 {}",
                     human(static_cast<int64_t>(helds[0])));
  lj["memory"] = {{"peak_bytes", peaks},
                  {"activations_bytes", helds},
                  {"parameter_bytes", memory::bytes_of(placement.params)},
                  {"gradient_bytes", memory::bytes_of(grads)},
                  {"optimizer_state_bytes", ddplab::optim::state_bytes(optimizer)},
                  {"budget_mb", flags.device_memory_mb}};
  rep.json()["model_parallel"] = lj;
}

void assemble(ddplab::DeepFM& model, ddplab::dist::Communicator& comm, const Flags& flags, const Placement& placement) {
  torch::NoGradGuard no_grad;
  if (flags.split()) {
    ddplab::dist::broadcast_module(comm, *model->embedding, 0);
    ddplab::dist::broadcast_module(comm, *model->first_order, 0);
    ddplab::dist::broadcast_module(comm, *model->dense_linear, 0);
    ddplab::dist::broadcast_module(comm, *model->mlp, 1);
    return;
  }
  if (!flags.sharded()) return;
  const int64_t D = flags.embedding_dim;
  const auto& layout = placement.layout;
  torch::Tensor both = torch::empty({data::kTotalRows, D + 1}, placement.shard.options());
  for (int r = 0; r < comm.size(); ++r) {
    torch::Tensor part =
        r == comm.rank() ? placement.shard.detach().clone()
                         : torch::empty({layout.shard_rows[static_cast<size_t>(r)], D + 1}, placement.shard.options());
    comm.broadcast(part, r);
    int64_t at = 0;
    for (int64_t f : layout.fields[static_cast<size_t>(r)]) {
      const int64_t n = data::kCardinality[static_cast<size_t>(f)], first = data::kOffset[static_cast<size_t>(f)];
      both.slice(0, first, first + n).copy_(part.slice(0, at, at + n));
      at += n;
    }
  }
  model->embedding->weight.set_data(both.slice(1, 0, D).contiguous());
  model->first_order->weight.set_data(both.slice(1, D, D + 1).contiguous());
}

}  // namespace lab07

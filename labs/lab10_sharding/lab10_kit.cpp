// Lab 10's apparatus (lab10_kit.h) and the kit's pieces of lab10.h.
#include "lab10_kit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>

#include <unistd.h>

#include <fmt/format.h>

#include "ddplab/dist/agree.h"
#include "ddplab/error.h"
#include "ddplab/optim.h"
#include "ddplab/torch_compat.h"

namespace fs = std::filesystem;
using ddplab::dist::Op;

namespace lab10 {

// ---- lab10.h: the kit's pieces ----

int64_t Partition::chunk() const {
  int64_t c = 0;
  for (const Shard& s : shards) c = std::max(c, s.numel());
  return c;
}

torch::Tensor flatten(const std::vector<torch::Tensor>& tensors, const std::vector<int64_t>& numels, int64_t size) {
  DDPLAB_CHECK(tensors.size() == numels.size(),
               fmt::format("flatten: {} tensors and {} sizes", tensors.size(), numels.size()));
  int64_t total = 0;
  for (int64_t n : numels) total += n;
  DDPLAB_CHECK(size >= total, fmt::format("flatten: {} elements do not fit in {}", total, size));
  torch::NoGradGuard no_grad;
  torch::Tensor flat = torch::zeros({size});
  int64_t at = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].defined()) {
      DDPLAB_CHECK(tensors[i].numel() == numels[i],
                   fmt::format("flatten: tensor {} has {} elements, not {}", i, tensors[i].numel(), numels[i]));
      flat.slice(0, at, at + numels[i]).copy_(tensors[i].detach().reshape({-1}));
    }
    at += numels[i];
  }
  return flat;
}

std::vector<int64_t> numels_of(const std::vector<torch::Tensor>& params) {
  std::vector<int64_t> n;
  n.reserve(params.size());
  for (const auto& p : params) n.push_back(p.numel());
  return n;
}

torch::Tensor flat_grads(const std::vector<torch::Tensor>& params, int64_t size) {
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) grads.push_back(p.grad());
  return flatten(grads, numels_of(params), size);
}

torch::Tensor to_chunks(const Partition& p, const torch::Tensor& flat) {
  DDPLAB_CHECK(flat.numel() >= p.total,
               fmt::format("to_chunks: {} elements, the flat view has {}", flat.numel(), p.total));
  const int64_t chunk = p.chunk();
  torch::Tensor out = torch::zeros({p.world() * chunk}, flat.options());
  for (int r = 0; r < p.world(); ++r) {
    const Shard& s = p.shards[static_cast<size_t>(r)];
    out.slice(0, r * chunk, r * chunk + s.numel()).copy_(flat.slice(0, s.begin, s.end));
  }
  return out;
}

namespace {
torch::optim::AdamParamState* adam_state(const ShardState& state) {
  DDPLAB_CHECK(state.param.defined(), "a ShardState without its param");
  if (state.adam == nullptr) return nullptr;  // before its first step
  auto& map = state.adam->state();
  auto it = map.find(ddplab::compat::optim_state_key(state.param));
  if (it == map.end()) return nullptr;
  return dynamic_cast<torch::optim::AdamParamState*>(it->second.get());
}
}  // namespace

Moments moments_of(const ShardState& state) {
  Moments m;
  if (const auto* s = adam_state(state)) {
    m.exp_avg = s->exp_avg().clone();
    m.exp_avg_sq = s->exp_avg_sq().clone();
    m.step = s->step();
  } else {
    m.exp_avg = torch::zeros_like(state.param).detach();
    m.exp_avg_sq = torch::zeros_like(state.param).detach();
  }
  return m;
}

void set_moments(ShardState& state, const Moments& m) {
  DDPLAB_CHECK(m.exp_avg.numel() == state.param.numel() && m.exp_avg_sq.numel() == state.param.numel(),
               fmt::format("set_moments: moments of {} and {} elements for a shard of {}", m.exp_avg.numel(),
                           m.exp_avg_sq.numel(), state.param.numel()));
  if (!state.adam) {
    state.adam = std::make_unique<torch::optim::Adam>(std::vector<torch::Tensor>{state.param},
                                                      torch::optim::AdamOptions(state.lr));
  }
  auto s = std::make_unique<torch::optim::AdamParamState>();
  s->step(m.step);
  s->exp_avg(m.exp_avg.detach().clone().view_as(state.param));
  s->exp_avg_sq(m.exp_avg_sq.detach().clone().view_as(state.param));
  state.adam->state()[ddplab::compat::optim_state_key(state.param)] = std::move(s);
}

ShardState make_shard_state(const Partition& p, int rank, const std::vector<torch::Tensor>& params, double lr) {
  const Shard& s = p.shards.at(static_cast<size_t>(rank));
  ShardState state;
  state.param = flatten(params, numels_of(params), p.total).slice(0, s.begin, s.end).clone().set_requires_grad(true);
  state.lr = lr;
  return state;
}

void zero1_step(ddplab::dist::Communicator& comm, const Partition& p, const std::vector<torch::Tensor>& params,
                ShardState& state) {
  torch::Tensor grads = flat_grads(params, p.total);
  comm.allreduce(grads);
  grads.div_(comm.size());
  const Shard& s = p.shards.at(static_cast<size_t>(comm.rank()));
  shard_step(comm, p, params, state, grads.slice(0, s.begin, s.end).clone());
}

void zero2_step(ddplab::dist::Communicator& comm, const Partition& p, const std::vector<torch::Tensor>& params,
                ShardState& state) {
  const torch::Tensor grad = reduce_scatter_grads(comm, p, params);
  const Shard& s = p.shards.at(static_cast<size_t>(comm.rank()));
  DDPLAB_CHECK(grad.numel() == s.numel(), fmt::format("reduce_scatter_grads gave rank {} {} elements; its shard has {}",
                                                      comm.rank(), grad.numel(), s.numel()));
  shard_step(comm, p, params, state, grad);
}

void save_shard(const std::string& dir, const Partition& p, int rank, const ShardState& state) {
  const Shard& s = p.shards.at(static_cast<size_t>(rank));
  const Moments m = moments_of(state);
  torch::serialize::OutputArchive archive;
  archive.write("begin", torch::tensor(s.begin, torch::kInt64));
  archive.write("end", torch::tensor(s.end, torch::kInt64));
  archive.write("param", state.param.detach());
  archive.write("exp_avg", m.exp_avg);
  archive.write("exp_avg_sq", m.exp_avg_sq);
  archive.write("step", torch::tensor(m.step, torch::kInt64));
  const std::string path = shard_file(dir, rank, p.world());
  const std::string tmp = path + ".tmp";
  try {
    archive.save_to(tmp);
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    throw ddplab::Error(fmt::format("{}: cannot write the shard: {}", path, e.what()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw ddplab::Error(fmt::format("{}: cannot rename {} over it: {}", path, tmp, ec.message()));
  }
}

std::string shard_file(const std::string& dir, int rank, int world) {
  return (fs::path(dir) / fmt::format("shard-{}-of-{}.pt", rank, world)).string();
}

std::vector<std::string> shard_files(const std::string& dir) {
  static const std::regex name(R"(shard-(\d+)-of-(\d+)\.pt)");
  std::map<int, std::map<int, std::string>> by_world;  // world -> rank -> path
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string file = it->path().filename().string();
    if (std::regex_match(file, m, name)) by_world[std::stoi(m[2])][std::stoi(m[1])] = it->path().string();
  }
  if (ec) throw ddplab::Error(fmt::format("{}: cannot list the shard files: {}", dir, ec.message()));
  if (by_world.empty()) throw ddplab::Error(fmt::format("{}: no shard files (shard-<rank>-of-<world>.pt)", dir));
  if (by_world.size() > 1) {
    throw ddplab::Error(fmt::format("{}: shard files of {} and {} ranks are mixed", dir, by_world.begin()->first,
                                    by_world.rbegin()->first));
  }
  const auto& [world, files] = *by_world.begin();
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) {
    auto it = files.find(r);
    if (it == files.end()) throw ddplab::Error(fmt::format("{}: rank {}'s file of {} is missing", dir, r, world));
    out.push_back(it->second);
  }
  return out;
}

// ---- the driver's pieces ----

void add_flags(ddplab::LabFlags& f, Flags& flags) {
  f.option("--shard", flags.shard,
           "What the ranks shard: none (DDP + Adam), zero1 (Adam's state: 10.2) or zero2 (and the gradients: 10.3)")
      ->check(CLI::IsMember({"none", "zero1", "zero2"}));
  f.option("--align", flags.align, "Elements of one alignment unit of the partition (10.1)")
      ->check(CLI::PositiveNumber);
  f.flag("--parity", flags.parity, "Train a DDP + Adam copy of the model alongside and compare after every step");
  f.flag("--checkpoint", flags.checkpoint,
         "At the end, save the shards into shards/ next to the report (10.4) and load them at 1, 2 and 3 ranks");
}

namespace {
/// Three tensors whose flat view (7 + 12 + 3 elements) a two-unit partition splits inside the second.
std::vector<torch::Tensor> tiny_params() {
  std::vector<torch::Tensor> p{torch::randn({7}), torch::randn({3, 4}), torch::randn({3})};
  for (auto& t : p) {
    t.set_requires_grad(true);
    t.mutable_grad() = torch::ones_like(t);
  }
  return p;
}
/// The partition of a world of one, written out (so a probe of 10.2 or 10.3 does not need 10.1):
/// everything on rank 0, a piece per tensor.
Partition one_rank(const std::vector<int64_t>& numels) {
  Partition p;
  p.shards.emplace_back();
  for (size_t i = 0; i < numels.size(); ++i) {
    if (numels[i] > 0) p.shards[0].pieces.push_back({static_cast<int64_t>(i), 0, p.total, numels[i]});
    p.total += numels[i];
  }
  p.shards[0].end = p.total;
  return p;
}
}  // namespace

void add_probes(ddplab::LabProgram& program) {
  program.probe("10.1", "partition", [](ddplab::ProbeContext&) { (void)partition({7, 12, 3}, 2, 4); });
  program.probe("10.2", "shard_step", [](ddplab::ProbeContext& ctx) {
    auto params = tiny_params();
    const Partition p = one_rank(numels_of(params));
    ShardState s = make_shard_state(p, 0, params, 1e-3);
    shard_step(ctx.comm, p, params, s, torch::ones({p.total}));
  });
  program.probe("10.3", "reduce_scatter_grads", [](ddplab::ProbeContext& ctx) {
    auto params = tiny_params();
    (void)reduce_scatter_grads(ctx.comm, one_rank(numels_of(params)), params);
  });
  program.probe("10.4", "load_shard", [](ddplab::ProbeContext&) {
    const fs::path dir = fs::temp_directory_path() / fmt::format("ddplab-lab10-probe-{}", ::getpid());
    fs::create_directories(dir);
    ShardState s;
    s.param = torch::zeros({22}).set_requires_grad(true);
    const Partition p = one_rank({22});
    try {
      save_shard(dir.string(), p, 0, s);
      load_shard(dir.string(), p, 0, s);
    } catch (...) {
      fs::remove_all(dir);
      throw;
    }
    fs::remove_all(dir);
  });
}

std::string partition_problem(const Partition& p, const std::vector<int64_t>& numels, int world, int64_t align) {
  int64_t total = 0;
  std::vector<int64_t> starts;
  for (int64_t n : numels) {
    starts.push_back(total);
    total += n;
  }
  if (p.world() != world) return fmt::format("{} shards for {} ranks", p.world(), world);
  if (p.total != total) return fmt::format("total {} elements; the parameters have {}", p.total, total);
  const int64_t units = (total + align - 1) / align;
  std::vector<uint8_t> owners(static_cast<size_t>(total), 0);
  for (int r = 0; r < world; ++r) {
    const Shard& s = p.shards[static_cast<size_t>(r)];
    const int64_t begin = std::min(total, align * (r * units / world));
    const int64_t end = r + 1 < world ? std::min(total, align * ((r + 1) * units / world)) : total;
    if (s.begin != begin || s.end != end) {
      return fmt::format("rank {}'s shard is [{}, {}); the contract's boundaries give [{}, {})", r, s.begin, s.end,
                         begin, end);
    }
    int64_t at = s.begin;
    for (const Piece& piece : s.pieces) {
      const bool known = piece.param >= 0 && piece.param < static_cast<int64_t>(numels.size());
      if (!known || piece.numel <= 0 || piece.offset < 0 || piece.offset + piece.numel > numels[piece.param] ||
          piece.flat != starts[piece.param] + piece.offset) {
        return fmt::format("rank {}'s piece (param {}, offset {}, flat {}, {} elements) is not where that parameter is",
                           r, piece.param, piece.offset, piece.flat, piece.numel);
      }
      if (piece.flat != at) {
        return fmt::format("rank {}'s pieces leave a gap or overlap at element {} (a piece starts at {})", r, at,
                           piece.flat);
      }
      for (int64_t e = piece.flat; e < piece.flat + piece.numel; ++e) ++owners[static_cast<size_t>(e)];
      at += piece.numel;
    }
    if (at != s.end) return fmt::format("rank {}'s pieces end at element {}, its shard at {}", r, at, s.end);
  }
  for (int64_t e = 0; e < total; ++e) {
    if (owners[static_cast<size_t>(e)] != 1) {
      return fmt::format("element {} is in {} shards' pieces", e, static_cast<int>(owners[static_cast<size_t>(e)]));
    }
  }
  return "";
}

void ddp_adam_step(ddplab::dist::Communicator& comm, const std::vector<torch::Tensor>& params,
                   torch::optim::Optimizer& adam) {
  const auto numels = numels_of(params);
  int64_t total = 0;
  for (int64_t n : numels) total += n;
  torch::Tensor grads = flat_grads(params, total);
  comm.allreduce(grads);
  grads.div_(comm.size());
  int64_t at = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    // A copy of its own: zero_grad cannot detach a view of the flat buffer in place.
    params[i].mutable_grad() = grads.slice(0, at, at + numels[i]).view_as(params[i]).clone();
    at += numels[i];
  }
  adam.step();
}

Shadow::Shadow(const std::vector<torch::Tensor>& params, double lr) {
  for (const auto& p : params) copy_.push_back(p.detach().clone().set_requires_grad(true));
  adam_ = std::make_unique<torch::optim::Adam>(copy_, torch::optim::AdamOptions(lr));
}

void Shadow::take_gradients(const std::vector<torch::Tensor>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    copy_[i].mutable_grad() = params[i].grad().defined() ? params[i].grad().detach().clone() : torch::Tensor();
  }
}

void Shadow::step_and_compare(ddplab::dist::Communicator& comm, const std::vector<torch::Tensor>& params) {
  ddp_adam_step(comm, copy_, *adam_);
  for (size_t i = 0; i < params.size(); ++i) {
    const double d = (params[i].detach() - copy_[i].detach()).abs().max().item<double>();
    max_abs_diff_ = std::max(max_abs_diff_, std::isnan(d) ? INFINITY : d);
  }
  ++steps_;
}

// ---- Sharded: the step of each mode ----

Sharded::Sharded(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const Flags& flags,
                 std::vector<torch::Tensor> params)
    : comm_(comm), flags_(flags), lr_(run.lr()), params_(std::move(params)), numels_(numels_of(params_)) {
  partitioned_ = run.attempt([&] { partition_ = lab10::partition(numels_, comm.size(), flags.align); });
  if (flags_.shard != "none") {
    const std::string instead = fmt::format("--shard {} trains as --shard none (DDP + Adam)", flags_.shard);
    if (run.without("10.1", instead) || run.without("10.2", instead) ||
        (flags_.shard == "zero2" && run.without("10.3", instead))) {
      flags_.shard = "none";
    } else {
      state_ = make_shard_state(partition_, comm.rank(), params_, lr_);
    }
  }
  if (flags_.shard == "none")
    full_adam_ = std::make_unique<torch::optim::Adam>(params_, torch::optim::AdamOptions(lr_));
  zeroer_ = std::make_unique<torch::optim::SGD>(params_, torch::optim::SGDOptions(0.0));
  if (flags_.parity) shadow_ = std::make_unique<Shadow>(params_, lr_);
}

ddplab::StepParts Sharded::parts(std::function<torch::Tensor()> loss) {
  ddplab::StepParts p = ddplab::plain_parts(std::move(loss));
  p.optimizer_step = [this] {
    step();
    return true;
  };
  return p;
}

void Sharded::step() {
  if (shadow_) shadow_->take_gradients(params_);
  const int64_t live_before = tracker_.live_bytes();
  tracker_.reset_peak();
  ddplab::dist::StatsWindow window(comm_);
  if (flags_.shard == "zero1") {
    zero1_step(comm_, partition_, params_, state_);
  } else if (flags_.shard == "zero2") {
    zero2_step(comm_, partition_, params_, state_);
  } else {
    ddp_adam_step(comm_, params_, *full_adam_);
  }
  for (Op op : {Op::kAllreduce, Op::kReduceScatter, Op::kAllgather}) {
    Traffic& t = traffic_[static_cast<size_t>(op)];
    t.calls += window.calls(op);
    t.bytes += window.bytes(op);
    t.seconds += window.seconds(op);
    // Each call's ring bytes from its own payload: the calls of a step carry equal payloads.
    if (window.calls(op) > 0) {
      t.ring_bytes +=
          window.calls(op) * ddplab::dist::ring_bytes(op, window.bytes(op) / window.calls(op), comm_.size());
    }
  }
  ++steps_;
  const int64_t extra = tracker_.peak_bytes() - live_before;
  memory_["step_peak_extra_bytes"] = std::max<int64_t>(memory_.value("step_peak_extra_bytes", int64_t{0}), extra);
  measure_memory();
  if (shadow_) shadow_->step_and_compare(comm_, params_);
}

void Sharded::measure_memory() {
  int64_t grads = 0;
  for (const auto& p : params_) grads += ddplab::memory::bytes_of(p.grad());
  if (state_.param.defined()) grads += ddplab::memory::bytes_of(state_.param.grad());
  memory_["parameter_bytes"] = ddplab::memory::bytes_of(params_);
  memory_["shard_copy_bytes"] = ddplab::memory::bytes_of(state_.param);
  memory_["gradient_bytes"] = grads;
  memory_["optimizer_state_bytes"] = full_adam_    ? ddplab::optim::state_bytes(*full_adam_)
                                     : state_.adam ? ddplab::optim::state_bytes(*state_.adam)
                                                   : 0;
}

void Sharded::report(ddplab::LabRun& run) const {
  const int world = comm_.size();
  int64_t total = 0;
  for (int64_t n : numels_) total += n;
  const int64_t float_bytes = 4;
  auto traffic_json = [&](Op op) {
    const Traffic& t = traffic(op);
    return nlohmann::json{{"calls", t.calls},
                          {"bytes", t.bytes},
                          {"ring_bytes", t.ring_bytes},
                          {"seconds", t.seconds},
                          {"ring_bytes_per_step", steps_ > 0 ? t.ring_bytes / steps_ : 0}};
  };
  const int64_t sent =
      traffic(Op::kAllreduce).ring_bytes + traffic(Op::kReduceScatter).ring_bytes + traffic(Op::kAllgather).ring_bytes;
  const int64_t sent_per_step = steps_ > 0 ? sent / steps_ : 0;
  const int64_t allreduce_per_step = ddplab::dist::ring_bytes(Op::kAllreduce, float_bytes * total, world);
  const double ratio = allreduce_per_step > 0 ? static_cast<double>(sent_per_step) / allreduce_per_step : 1.0;
  nlohmann::json section = {{"mode", flags_.shard},
                            {"align", flags_.align},
                            {"elements", total},
                            {"steps", steps_},
                            {"memory", memory_},
                            {"traffic",
                             {{"allreduce", traffic_json(Op::kAllreduce)},
                              {"reduce_scatter", traffic_json(Op::kReduceScatter)},
                              {"allgather", traffic_json(Op::kAllgather)},
                              {"ring_bytes_per_step", sent_per_step},
                              {"allreduce_ring_bytes_per_step", allreduce_per_step},
                              {"ratio_to_allreduce", ratio}}}};
  if (partitioned_) {
    section["shards"] = nlohmann::json::array();
    for (const Shard& s : partition_.shards) section["shards"].push_back({s.begin, s.end});
  }
  run.report().json()["sharding"] = section;

  // 10.1: the partition of this model at this world size.
  if (partitioned_) {
    const std::string problem = partition_problem(partition_, numels_, world, flags_.align);
    run.report().verdict("partition_exact", problem.empty(),
                         problem.empty()
                             ? fmt::format("the partition of {} elements over {} rank(s) is exact: shards "
                                           "of {} to {} elements, each element owned once",
                                           total, world, partition_.shards.back().numel(), partition_.chunk())
                             : "the partition is wrong: " + problem,
                         {{"elements", total}, {"world", world}, {"chunk", partition_.chunk()}});
  }
  if (flags_.shard == "none") return;

  // 10.2: Adam's state of a shard only.
  const int64_t state = memory_.value("optimizer_state_bytes", int64_t{0});
  const int64_t state_budget = 2 * float_bytes * (total / world + flags_.align);
  run.report().verdict(
      "state_within_budget", state <= state_budget,
      fmt::format("Adam's state on this rank: {} bytes, budget {} (the whole model's {} over {} rank(s) + a unit)",
                  state, state_budget, 2 * float_bytes * total, world),
      {{"optimizer_state_bytes", state}, {"budget_bytes", state_budget}, {"mode", flags_.shard}}, true);
  if (shadow_) {
    double worst = 0;
    for (double d : ddplab::dist::allgather_f64(comm_, shadow_->max_abs_diff())) worst = std::max(worst, d);
    run.report().verdict(
        "matches_ddp_adam", worst <= 1e-6,
        fmt::format("{}: after {} step(s) the parameters are DDP + Adam's within {:.3g} (every rank; tolerance 1e-6)",
                    flags_.shard, shadow_->steps(), worst),
        {{"max_abs_diff", worst}, {"steps", shadow_->steps()}, {"mode", flags_.shard}});
  }
  if (flags_.shard != "zero2") return;

  // 10.3: the gradient of a shard only, and an all-reduce's bytes.
  const int64_t grads = memory_.value("gradient_bytes", int64_t{0});
  const int64_t grad_budget = float_bytes * (total / world + flags_.align);
  run.report().verdict("grads_within_budget", grads <= grad_budget,
                       fmt::format("gradients held between steps on this rank: {} bytes, budget {}", grads,
                                   grad_budget),
                       {{"gradient_bytes", grads}, {"budget_bytes", grad_budget}}, true);
  run.report().verdict(
      "comm_like_allreduce", std::abs(ratio - 1.0) <= 0.01,
      fmt::format("reduce-scatter + all-gather sent {} bytes a step, an all-reduce of the gradients {}: x{:.4f}",
                  sent_per_step, allreduce_per_step, ratio),
      {{"ring_bytes_per_step", sent_per_step},
       {"allreduce_ring_bytes_per_step", allreduce_per_step},
       {"ratio", ratio}});
}

void Sharded::check_checkpoint(ddplab::LabRun& run) {
  if (flags_.shard == "none") {
    if (run.rank() == 0) fmt::print("--checkpoint: nothing is sharded with --shard none\n");
    return;
  }
  if (run.without("10.4", "no sharded checkpoint is written")) return;
  const fs::path dir = fs::absolute(run.options().report_path(run.lab(), run.rank())).parent_path() / "shards";
  if (comm_.rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  comm_.barrier();
  save_shard(dir.string(), partition_, comm_.rank(), state_);
  comm_.barrier();

  // The live state, whole: every rank's shard of the values and of both moments, gathered.
  const Moments mine = moments_of(state_);
  auto gather = [&](const torch::Tensor& shard) {
    torch::Tensor padded = torch::zeros({partition_.chunk()});
    padded.slice(0, 0, shard.numel()).copy_(shard.detach().reshape({-1}));
    std::vector<torch::Tensor> out;
    for (int r = 0; r < comm_.size(); ++r) out.push_back(torch::empty({partition_.chunk()}));
    comm_.allgather(out, padded);
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < comm_.size(); ++r) parts.push_back(out[r].slice(0, 0, partition_.shards[r].numel()));
    return torch::cat(parts);
  };
  const torch::Tensor values = gather(state_.param), exp_avg = gather(mine.exp_avg),
                      exp_avg_sq = gather(mine.exp_avg_sq);

  std::string problem;
  std::vector<int> worlds;
  for (int w = 1; w <= 3 && problem.empty(); ++w) {
    const Partition p = lab10::partition(numels_, w, flags_.align);
    for (int r = 0; r < w && problem.empty(); ++r) {
      ShardState s = make_shard_state(p, r, params_, lr_);
      torch::NoGradGuard no_grad;
      s.param.zero_();  // whatever load_shard leaves unset shows
      try {
        load_shard(dir.string(), p, r, s);
      } catch (const std::exception& e) {
        problem = fmt::format("at {} rank(s), rank {}: {}", w, r, e.what());
        break;
      }
      const Shard& sh = p.shards[static_cast<size_t>(r)];
      const Moments m = moments_of(s);
      auto same = [&](const torch::Tensor& got, const torch::Tensor& want) {
        return torch::equal(got.detach().reshape({-1}), want.slice(0, sh.begin, sh.end));
      };
      if (!same(s.param, values))
        problem = fmt::format("at {} rank(s), rank {}'s parameter values differ", w, r);
      else if (!same(m.exp_avg, exp_avg) || !same(m.exp_avg_sq, exp_avg_sq))
        problem = fmt::format("at {} rank(s), rank {}'s Adam moments differ", w, r);
      else if (m.step != mine.step)
        problem = fmt::format("at {} rank(s), rank {}'s Adam step ({}, saved {})", w, r, m.step, mine.step);
    }
    if (problem.empty()) worlds.push_back(w);
  }
  const bool ok = problem.empty();
  run.report().verdict("reshard_identical", ok,
                       ok ? fmt::format("the {} shard file(s) load bit-identical at 1, 2 and 3 ranks", comm_.size())
                          : fmt::format("the {} shard file(s) do not load back: {}", comm_.size(), problem),
                       {{"saved_by", comm_.size()}, {"loaded_at", worlds}, {"folder", dir.string()}}, true);
}

}  // namespace lab10

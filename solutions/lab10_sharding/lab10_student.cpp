// Lab 10: your code goes between the BEGIN/END STUDENT CODE markers (contracts in lab10.h).
#include "lab10.h"

#include <algorithm>

#include <fmt/format.h>

#include "ddplab/error.h"

namespace lab10 {

Partition partition(const std::vector<int64_t>& numels, int world, int64_t align) {
  // BEGIN STUDENT CODE (10.1: the partition)
  if (world < 1 || align < 1) {
    throw ddplab::ConfigError(fmt::format("partition: {} rank(s) and an alignment of {} elements", world, align));
  }
  Partition p;
  p.align = align;
  for (int64_t n : numels) p.total += n;
  const int64_t units = (p.total + align - 1) / align;
  p.shards.resize(static_cast<size_t>(world));
  auto boundary = [&](int64_t r) { return std::min(p.total, align * (r * units / world)); };
  for (int r = 0; r < world; ++r) {
    p.shards[r].begin = boundary(r);
    p.shards[r].end = r + 1 < world ? boundary(r + 1) : p.total;
  }
  int64_t start = 0;  // parameter i's first element in the flat view
  for (size_t i = 0; i < numels.size(); ++i) {
    const int64_t stop = start + numels[i];
    for (Shard& s : p.shards) {
      const int64_t lo = std::max(start, s.begin), hi = std::min(stop, s.end);
      if (lo < hi) s.pieces.push_back({static_cast<int64_t>(i), lo - start, lo, hi - lo});
    }
    start = stop;
  }
  return p;
  // END STUDENT CODE
}

void shard_step(ddplab::dist::Communicator& comm, const Partition& p, const std::vector<torch::Tensor>& params,
                ShardState& state, const torch::Tensor& shard_grad) {
  // BEGIN STUDENT CODE (10.2: the shard's update)
  if (!state.adam) {
    state.adam = std::make_unique<torch::optim::Adam>(std::vector<torch::Tensor>{state.param},
                                                      torch::optim::AdamOptions(state.lr));
  }
  state.param.mutable_grad() = shard_grad;
  state.adam->step();
  torch::NoGradGuard no_grad;
  torch::Tensor mine = torch::zeros({p.chunk()});
  mine.slice(0, 0, state.param.numel()).copy_(state.param);
  std::vector<torch::Tensor> gathered;
  for (int r = 0; r < comm.size(); ++r) gathered.push_back(torch::empty({p.chunk()}));
  comm.allgather(gathered, mine);
  for (int r = 0; r < p.world(); ++r) {
    const Shard& s = p.shards[static_cast<size_t>(r)];
    for (const Piece& piece : s.pieces) {
      torch::Tensor to =
          params[static_cast<size_t>(piece.param)].view(-1).slice(0, piece.offset, piece.offset + piece.numel);
      to.copy_(gathered[static_cast<size_t>(r)].slice(0, piece.flat - s.begin, piece.flat - s.begin + piece.numel));
    }
  }
  // END STUDENT CODE
}

torch::Tensor reduce_scatter_grads(ddplab::dist::Communicator& comm, const Partition& p,
                                   const std::vector<torch::Tensor>& params) {
  // BEGIN STUDENT CODE (10.3: ZeRO-2's gradient reduction)
  torch::Tensor mine = torch::empty({p.chunk()});
  {
    const torch::Tensor grads = to_chunks(p, flat_grads(params, p.total));
    for (const torch::Tensor& param : params) param.mutable_grad() = torch::Tensor();  // sent: released
    comm.reduce_scatter(mine, grads);
  }
  mine.div_(comm.size());
  return mine.slice(0, 0, p.shards[static_cast<size_t>(comm.rank())].numel()).clone();
  // END STUDENT CODE
}

void load_shard(const std::string& dir, const Partition& p, int rank, ShardState& state) {
  // BEGIN STUDENT CODE (10.4: a sharded checkpoint at any world size)
  const Shard& s = p.shards.at(static_cast<size_t>(rank));
  Moments m = moments_of(state);
  torch::Tensor param = state.param.detach().clone();
  int64_t covered = 0;
  for (const std::string& file : shard_files(dir)) {
    torch::serialize::InputArchive archive;
    archive.load_from(file);
    torch::Tensor begin, end, values, exp_avg, exp_avg_sq, step;
    archive.read("begin", begin);
    archive.read("end", end);
    archive.read("param", values);
    archive.read("exp_avg", exp_avg);
    archive.read("exp_avg_sq", exp_avg_sq);
    archive.read("step", step);
    const int64_t b = begin.item<int64_t>(), e = end.item<int64_t>();
    const int64_t lo = std::max(b, s.begin), hi = std::min(e, s.end);
    m.step = step.item<int64_t>();
    if (lo >= hi) continue;
    param.slice(0, lo - s.begin, hi - s.begin).copy_(values.slice(0, lo - b, hi - b));
    m.exp_avg.slice(0, lo - s.begin, hi - s.begin).copy_(exp_avg.slice(0, lo - b, hi - b));
    m.exp_avg_sq.slice(0, lo - s.begin, hi - s.begin).copy_(exp_avg_sq.slice(0, lo - b, hi - b));
    covered += hi - lo;
  }
  if (covered != s.numel()) {
    throw ddplab::Error(fmt::format("{}: the shard files cover {} of rank {}'s {} elements [{}, {})", dir, covered,
                                    rank, s.numel(), s.begin, s.end));
  }
  {
    torch::NoGradGuard no_grad;
    state.param.copy_(param);
  }
  set_moments(state, m);
  // END STUDENT CODE
}

}  // namespace lab10

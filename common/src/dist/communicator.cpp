// Communicator statistics, the fallback asynchronous allreduce and module broadcast.
#include "ddplab/dist/communicator.h"

namespace ddplab::dist {

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllreduce: return "allreduce";
    case Op::kBroadcast: return "broadcast";
    case Op::kAllgather: return "allgather";
    case Op::kAllToAll: return "all_to_all";
    case Op::kSend: return "send";
    case Op::kRecv: return "recv";
    case Op::kBarrier: return "barrier";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kCount: break;
  }
  return "none";
}

int64_t ring_bytes(Op op, int64_t payload, int world) {
  if (world <= 1) return 0;
  const int64_t n = world;
  switch (op) {
    case Op::kAllreduce: return 2 * (n - 1) * payload / n;
    case Op::kReduceScatter:
    case Op::kAllToAll: return (n - 1) * payload / n;
    case Op::kAllgather: return (n - 1) * payload;
    case Op::kBroadcast:
    case Op::kSend: return payload;
    case Op::kRecv:
    case Op::kBarrier:
    case Op::kCount: break;
  }
  return 0;
}

int64_t CommStats::total_calls() const {
  int64_t n = 0;
  for (const auto& o : ops) n += o.calls;
  return n;
}

int64_t CommStats::total_bytes() const {
  int64_t n = 0;
  for (const auto& o : ops) n += o.bytes;
  return n;
}

double CommStats::total_seconds() const {
  double s = 0;
  for (const auto& o : ops) s += o.seconds;
  return s;
}

nlohmann::json CommStats::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < kNumOps; ++i) {
    const auto& o = ops[static_cast<size_t>(i)];
    if (o.calls == 0) continue;
    j[op_name(static_cast<Op>(i))] = {{"calls", o.calls}, {"bytes", o.bytes}, {"seconds", o.seconds}};
  }
  return {{"ops", j}, {"calls", total_calls()}, {"bytes", total_bytes()}, {"seconds", total_seconds()}};
}

namespace {

void count_start(CommStats& s, Op op, int64_t bytes) {
  auto& o = s.ops[static_cast<size_t>(op)];
  ++o.calls;
  o.bytes += bytes;
  ++s.sequence;
  s.last_op = op;
  s.last_bytes = bytes;
}

/// What the fallback allreduce_async returns: the work is already done.
class Completed final : public Pending {
 public:
  void wait() override {}
};

}  // namespace

int64_t Communicator::record_start(Op op, int64_t bytes) {
  count_start(stats_, op, bytes);
  if (observer_) observer_(op, bytes, stats_.sequence);
  return stats_.sequence;
}

void Communicator::record_wait(Op op, double seconds) { stats_.ops[static_cast<size_t>(op)].seconds += seconds; }

std::shared_ptr<Pending> Communicator::allreduce_async(torch::Tensor& t) {
  allreduce(t);
  return std::make_shared<Completed>();
}

void Communicator::trace_async(int lane, Op op, std::chrono::steady_clock::time_point start, int64_t bytes,
                               int64_t sequence) {
  if (tracer_ == nullptr || lane < 0) return;
  tracer_->collective(lane, op_name(op), start, std::chrono::steady_clock::now(), bytes, sequence, true);
}

Communicator::Recorder::Recorder(Communicator& c, Op op, int64_t bytes) : Recorder(c.stats_, op, bytes) {
  trace_ = c.tracer_.get();
  if (trace_ != nullptr) lane_ = trace_->begin_collective();
  if (c.observer_) c.observer_(op, bytes, sequence_);
}

Communicator::Recorder::Recorder(CommStats& s, Op op, int64_t bytes)
    : s_(s), op_(op), bytes_(bytes), start_(std::chrono::steady_clock::now()) {
  count_start(s_, op, bytes);
  sequence_ = s_.sequence;
}

Communicator::Recorder::~Recorder() {
  const auto end = std::chrono::steady_clock::now();
  s_.ops[static_cast<size_t>(op_)].seconds += std::chrono::duration<double>(end - start_).count();
  if (trace_ != nullptr) trace_->collective(lane_, op_name(op_), start_, end, bytes_, sequence_, false);
}

void broadcast_module(Communicator& comm, torch::nn::Module& module, int root) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    torch::Tensor t = p.detach();
    comm.broadcast(t, root);
  }
  for (auto& b : module.buffers()) {
    torch::Tensor t = b.detach();
    comm.broadcast(t, root);
  }
}

}  // namespace ddplab::dist

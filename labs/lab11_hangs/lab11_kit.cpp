// Lab 11's apparatus (lab11_kit.h).
#include "lab11_kit.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/log.h"
#include "ddplab/train.h"

namespace fs = std::filesystem;
using ddplab::dist::Op;
using ddplab::flight::Entry;
using ddplab::flight::State;
using nlohmann::json;

namespace lab11 {

void add_flags(ddplab::LabFlags& f, Flags& flags) {
  f.option("--fault", flags.fault,
           "The fault to inject: none, extra-collective (rank 0 all-reduces a metric the others do not), "
           "bucket-order (a rank all-reduces its buckets in reverse), uneven (a rank's data ends early), freeze (a "
           "rank stops responding), die (a rank exits)")
      ->check(CLI::IsMember({"none", "extra-collective", "bucket-order", "uneven", "freeze", "die"}));
  f.option("--fault-rank", flags.fault_rank, "The rank the fault hits (-1: rank 0 for extra-collective, else the last)")
      ->check(CLI::Range(-1, 1 << 20));
  f.option("--fault-step", flags.fault_step, "The step (from 0) at whose start the fault strikes")
      ->check(CLI::NonNegativeNumber);
  f.option("--slow-rank", flags.slow_rank, "A rank whose loader sleeps --slow-ms per batch (-1: none)")
      ->check(CLI::Range(-1, 1 << 20));
  f.option("--slow-ms", flags.slow_ms, "The slow rank's extra wait per batch, in milliseconds")
      ->check(CLI::NonNegativeNumber);
  f.flag("--join", flags.join,
         "All-reduce the gradients with 11.3's join_allreduce: ranks whose data ended join the rest");
  f.flag("--parity", flags.parity,
         "With --join: every step, compare the joined gradient with one process's over the same samples");
  f.option("--fingerprint-every", flags.fingerprint_every,
           "Compare the ranks' fingerprints before every K-th collective (11.1; 0: never)")
      ->check(CLI::NonNegativeNumber);
  f.option("--flight", flags.flight, "Flight recorder entries per rank (11.2; 0: no recorder)")
      ->check(CLI::NonNegativeNumber);
  f.option("--straggler-every", flags.straggler_every, "Gather the ranks' phase times every M steps (11.4; 0: never)")
      ->check(CLI::NonNegativeNumber);
  f.option("--grace", flags.grace_s, "Seconds a timed-out rank waits for the other ranks' flight dumps")
      ->check(CLI::NonNegativeNumber);
}

void add_probes(ddplab::LabProgram& program) {
  program.probe("11.1", "fingerprint", [](ddplab::ProbeContext&) {
    (void)fingerprint(0, Call{Op::kAllreduce, Reduce::kSum, torch::kFloat, {4}});
  });
  program.probe("11.2", "record", [](ddplab::ProbeContext&) {
    Ring ring;
    ring.capacity = 2;
    record(ring, Entry{0, Op::kAllreduce, {4}, "float", 0, -1, State::kEnqueued});
  });
  program.probe("11.3", "join_allreduce", [](ddplab::ProbeContext& ctx) {
    torch::Tensor g = torch::ones({3});
    (void)join_allreduce(ctx.comm, g, 2);
  });
  program.probe("11.4", "find_straggler", [](ddplab::ProbeContext&) {
    (void)find_straggler({PhaseTimes{0.1, 0.2, 0.1, 1}, PhaseTimes{0.1, 0.2, 0.1, 1}}, 8);
  });
}

void drop_missing(const ddplab::LabRun& run, Flags& f) {
  if (f.join && run.without("11.3", "the gradients are all-reduced in buckets (no --join)")) {
    f.join = f.parity = false;
    if (f.fault == "uneven") {
      ddplab::log::info0(
          "--fault uneven not injected: without 11.3's join the job would stop at the rank that ran out");
      f.fault = "none";
    }
  }
  if (f.fingerprint_every > 0 && run.without("11.1", "no fingerprint checks (--fingerprint-every 0)")) {
    f.fingerprint_every = 0;
    // Unchecked, these faults reach Gloo, which aborts the process (or waits for the timeout).
    if (f.fault == "extra-collective" || f.fault == "bucket-order" || (f.fault == "uneven" && !f.join)) {
      ddplab::log::info0("--fault {} not injected: without 11.1's fingerprints it would reach the transport", f.fault);
      f.fault = "none";
    }
  }
  if (f.flight > 0 && run.without("11.2", "no flight recorder (--flight 0)")) {
    f.flight = 0;
    if (f.fault == "freeze") {
      ddplab::log::info0("--fault freeze not injected: without 11.2's recorder it would only time out");
      f.fault = "none";
    }
  }
  if (f.straggler_every > 0 && run.without("11.4", "no straggler watch (--straggler-every 0)")) f.straggler_every = 0;
}

std::string flight_dir(const ddplab::LabRun& run) {
  return (fs::path(run.options().report_path(run.lab(), 0)).parent_path() / "flight").string();
}

std::vector<Entry> in_order(const Ring& ring) {
  std::vector<Entry> out;
  for (const auto& e : ring.slots) {
    if (e.op != Op::kCount) out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.seq < b.seq; });
  return out;
}

Call call_of(Op op, const torch::Tensor& t) {
  const bool reduces = op == Op::kAllreduce || op == Op::kReduceScatter;
  return Call{op, reduces ? Reduce::kSum : Reduce::kNone, t.scalar_type(), t.sizes().vec()};
}

namespace {
/// "float", "long", "half": c10's name in lower case.
std::string dtype_name(torch::ScalarType t) {
  std::string s = c10::toString(t);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}
}  // namespace

std::string describe(const Call& c) {
  return fmt::format("{} {}[{}]", ddplab::dist::op_name(c.op), dtype_name(c.dtype), fmt::join(c.shape, ","));
}

// ---- Watched ----

namespace {
/// A call as 8 int64 for the check's all-gather: op, reduce, dtype, rank, up to 4 dimensions
/// (-1 beyond the rank).
constexpr int64_t kCallWidth = 8;
void encode(const Call& c, int64_t* out) {
  out[0] = static_cast<int64_t>(c.op);
  out[1] = static_cast<int64_t>(c.reduce);
  out[2] = static_cast<int64_t>(c.dtype);
  out[3] = static_cast<int64_t>(c.shape.size());
  for (int d = 0; d < 4; ++d) out[4 + d] = d < static_cast<int>(c.shape.size()) ? c.shape[static_cast<size_t>(d)] : -1;
}
Call decode(const int64_t* in) {
  Call c;
  c.op = static_cast<Op>(in[0]);
  c.reduce = static_cast<Reduce>(in[1]);
  c.dtype = static_cast<torch::ScalarType>(in[2]);
  for (int d = 0; d < std::min<int64_t>(in[3], 4); ++d) c.shape.push_back(in[4 + d]);
  return c;
}
std::string request_path(const std::string& dir) { return (fs::path(dir) / "request").string(); }
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
}  // namespace

Watched::Watched(ddplab::dist::Communicator& inner, const Flags& flags, std::string flight_dir)
    : inner_(inner), flags_(flags), dir_(std::move(flight_dir)), start_(std::chrono::steady_clock::now()) {
  ring_.capacity = static_cast<size_t>(std::max<int64_t>(flags_.flight, 0));
  if (flags_.flight > 0 && !dir_.empty()) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    fs::remove(ddplab::flight::dump_path(dir_, rank()), ec);  // a dump of an earlier run
    if (rank() == 0) fs::remove(request_path(dir_), ec);
    watcher_ = std::thread([this] { watch(); });
  }
}

Watched::~Watched() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
}

double Watched::now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

ddplab::flight::Dump Watched::dump(const std::string& reason) const {
  ddplab::flight::Dump d;
  d.rank = rank();
  d.world = size();
  d.reason = reason;
  d.dumped_s = now();
  std::lock_guard<std::mutex> lock(ring_mutex_);
  d.entries = in_order(ring_);
  return d;
}

void Watched::watch() {
  // Answers another rank's request for dumps (PyTorch's flight recorder signals through the store;
  // here the ranks share the run's folder). A rank stuck inside a collective still answers: this
  // thread is not the one waiting.
  std::string answered = read_text(request_path(dir_));
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string req = read_text(request_path(dir_));
    if (req.empty() || req == answered) continue;
    if (req.rfind(fmt::format("rank {} ", rank()), 0) == 0) {
      answered = req;  // this rank's own request: its dump is written already, with the failure's reason
      continue;
    }
    answered = req;
    try {
      ddplab::flight::write_dump(dir_, dump("asked by " + req));
    } catch (const std::exception& e) {
      ddplab::log::warn("rank {}: could not write the flight recorder dump: {}", rank(), e.what());
    }
  }
}

template <class Fn>
void Watched::collective(Op op, const torch::Tensor& t, Fn&& fn) {
  const int64_t seq = seq_++;
  const Call call = call_of(op, t);
  Entry e{seq, op, call.shape, dtype_name(call.dtype), now(), -1, State::kEnqueued};
  // Into the flight recorder (11.2): enqueued now, then completed or failed with its end time.
  auto keep = [&](State s) {
    if (flags_.flight == 0) return;
    e.state = s;
    if (s != State::kEnqueued) e.ended_s = now();
    std::lock_guard<std::mutex> lock(ring_mutex_);
    record(ring_, e);
  };
  keep(State::kEnqueued);
  try {
    if (flags_.fingerprint_every > 0) {
      running_ = fingerprint(running_, call);
      window_.push_back(call);
      if ((seq + 1) % flags_.fingerprint_every == 0) check_fingerprints(seq);
    }
    Recorder r(*this, op, t.numel() * t.element_size());
    fn();
  } catch (const Desync&) {
    throw;
  } catch (const ddplab::NotImplemented&) {
    throw;
  } catch (const std::exception& x) {
    if (flags_.flight == 0) throw;
    keep(State::kFailed);
    on_failure(seq, x.what());
  }
  keep(State::kCompleted);
}

void Watched::check_fingerprints(int64_t seq) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t k = flags_.fingerprint_every;
  const int64_t width = 2 + k * kCallWidth;
  torch::Tensor mine = torch::full({width}, -2, torch::kLong);
  auto* m = mine.data_ptr<int64_t>();
  m[0] = static_cast<int64_t>(running_);
  m[1] = seq;
  for (size_t i = 0; i < window_.size() && static_cast<int64_t>(i) < k; ++i) {
    encode(window_[i], m + 2 + static_cast<int64_t>(i) * kCallWidth);
  }
  std::vector<torch::Tensor> all;
  for (int r = 0; r < size(); ++r) all.push_back(torch::empty_like(mine));
  inner_.allgather(all, mine);
  ++checks_;
  check_bytes_ += mine.numel() * mine.element_size();
  check_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t first = seq + 1 - static_cast<int64_t>(window_.size());
  const std::vector<Call> mine_calls = window_;
  window_.clear();
  bool same = true;
  for (const auto& a : all) same = same && a.data_ptr<int64_t>()[0] == m[0];
  if (same) return;
  // The first call of the window that differs; every rank computes the same answer.
  int64_t at = -1;
  std::vector<std::string> calls(static_cast<size_t>(size()));
  for (int64_t i = 0; i < static_cast<int64_t>(mine_calls.size()) && at < 0; ++i) {
    const int64_t* ref = all[0].data_ptr<int64_t>() + 2 + i * kCallWidth;
    for (int r = 1; r < size(); ++r) {
      if (!std::equal(ref, ref + kCallWidth, all[static_cast<size_t>(r)].data_ptr<int64_t>() + 2 + i * kCallWidth)) {
        at = first + i;
        break;
      }
    }
  }
  std::vector<std::string> parts;
  for (int r = 0; r < size(); ++r) {
    const int64_t* a = all[static_cast<size_t>(r)].data_ptr<int64_t>();
    const int64_t i = (at < 0 ? seq : at) - first;
    calls[static_cast<size_t>(r)] = describe(decode(a + 2 + i * kCallWidth));
    parts.push_back(fmt::format("rank {} {}", r, calls[static_cast<size_t>(r)]));
  }
  if (at < 0) {
    throw Desync(fmt::format("the ranks' fingerprints differ at collective #{} although every rank issued the same "
                             "calls since the last check ({}): the fingerprint is not a function of the calls alone",
                             seq, fmt::join(parts, "; ")),
                 -1, calls);
  }
  throw Desync(fmt::format("collectives out of step at #{}: {} (checked before #{}, every {} collective(s)); a rank "
                           "issued a collective the others did not, or in another order: this would hang or mix "
                           "tensors",
                           at, fmt::join(parts, "; "), seq, k),
               at, calls);
}

void Watched::on_failure(int64_t seq, const std::string& what) {
  const std::string token = fmt::format("rank {} (collective #{} failed, t={:.3f})", rank(), seq, now());
  // The transport's message up to its first line (c10's carries a C++ backtrace after it).
  const std::string first_line = what.substr(0, what.find('\n'));
  const std::string reason = fmt::format("collective #{} failed: {}", seq, first_line);
  ddplab::flight::write_dump(dir_, dump(reason));
  ddplab::write_file_atomic(request_path(dir_), token);
  // Wait for the others' dumps (a dead or frozen rank never writes one).
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(flags_.grace_s);
  auto count = [&] {
    int n = 0;
    for (int r = 0; r < size(); ++r) n += fs::exists(ddplab::flight::dump_path(dir_, r)) ? 1 : 0;
    return n;
  };
  while (count() < size() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto dumps = ddplab::flight::read_dumps(dir_, size());
  const ddplab::flight::Stall stall = ddplab::flight::diagnose(dumps);
  throw Hang(fmt::format("rank {}: collective #{} failed ({}); the flight recorder's dumps ({}, merged: ddplab flight "
                         "{}):\n{}",
                         rank(), seq, first_line, dir_, dir_, ddplab::flight::table(dumps, stall)),
             stall);
}

void Watched::allreduce(torch::Tensor& t) {
  collective(Op::kAllreduce, t, [&] { inner_.allreduce(t); });
}
void Watched::broadcast(torch::Tensor& t, int root) {
  collective(Op::kBroadcast, t, [&] { inner_.broadcast(t, root); });
}
void Watched::allgather(std::vector<torch::Tensor>& out, const torch::Tensor& in) {
  collective(Op::kAllgather, in, [&] { inner_.allgather(out, in); });
}
void Watched::all_to_all(torch::Tensor& out, const torch::Tensor& in) {
  collective(Op::kAllToAll, in, [&] { inner_.all_to_all(out, in); });
}
void Watched::all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                         const std::vector<int64_t>& in_splits) {
  collective(Op::kAllToAll, in, [&] { inner_.all_to_all(out, in, out_splits, in_splits); });
}
void Watched::reduce_scatter(torch::Tensor& out, const torch::Tensor& in) {
  collective(Op::kReduceScatter, in, [&] { inner_.reduce_scatter(out, in); });
}
void Watched::send(const torch::Tensor& t, int dst, int tag) {
  collective(Op::kSend, t, [&] { inner_.send(t, dst, tag); });
}
void Watched::recv(torch::Tensor& t, int src, int tag) {
  collective(Op::kRecv, t, [&] { inner_.recv(t, src, tag); });
}
void Watched::barrier() {
  collective(Op::kBarrier, torch::zeros({0}), [&] { inner_.barrier(); });
}

// ---- Faults ----

Faults::Faults(ddplab::LabRun& run, Watched& comm, const Flags& flags) : run_(run), comm_(comm), flags_(flags) {
  fault_rank_ =
      flags_.fault_rank >= 0 ? flags_.fault_rank : (flags_.fault == "extra-collective" ? 0 : run.world_size() - 1);
  if (flags_.fault != "none" && fault_rank_ >= run.world_size()) {
    throw ddplab::ConfigError(fmt::format("--fault-rank {}: the job has {} rank(s)", fault_rank_, run.world_size()));
  }
  if (flags_.fault != "none" && run.world_size() < 2) {
    throw ddplab::ConfigError(fmt::format("--fault {} needs at least 2 ranks", flags_.fault));
  }
  if (flags_.slow_rank >= run.world_size()) {
    throw ddplab::ConfigError(
        fmt::format("--slow-rank {}: the job has {} rank(s)", flags_.slow_rank, run.world_size()));
  }
}

void Faults::begin_step(int64_t step, double last_loss) {
  if (step != flags_.fault_step || flags_.fault == "none") return;
  expected_seq_ = comm_.next_seq();
  if (run_.rank() != fault_rank_) return;
  if (flags_.fault == "extra-collective") {
    // A metric logged on one rank, with an all-reduce inside: the others never issue it.
    torch::Tensor metric = torch::full({1}, last_loss);
    comm_.allreduce(metric);
    ddplab::log::info("rank {}: mean loss so far {:.4f}", run_.rank(), metric.item<double>() / run_.world_size());
  } else if (flags_.fault == "freeze") {
    ddplab::log::warn("rank {}: fault freeze: this rank stops responding at step {}", run_.rank(), step);
    std::raise(SIGSTOP);
  } else if (flags_.fault == "die") {
    ddplab::log::warn("rank {}: fault die: this rank exits at step {}", run_.rank(), step);
    std::_Exit(9);
  }
}

bool Faults::reversed(int64_t step) const {
  return flags_.fault == "bucket-order" && run_.rank() == fault_rank_ && step >= flags_.fault_step;
}

int64_t Faults::steps_for(int rank, int64_t steps) const {
  return flags_.fault == "uneven" && rank == fault_rank_ ? std::min(steps, flags_.fault_step) : steps;
}

void Faults::expect(const std::function<void()>& train) {
  auto& report = run_.report();
  const bool desync_fault = flags_.fault == "extra-collective" || flags_.fault == "bucket-order" ||
                            (flags_.fault == "uneven" && !flags_.join);
  try {
    train();
  } catch (const Desync& d) {
    const bool ok = desync_fault && d.seq == expected_seq_;
    const std::string culprit = d.seq >= 0 && static_cast<size_t>(fault_rank_) < d.calls.size()
                                    ? d.calls[static_cast<size_t>(fault_rank_)]
                                    : std::string();
    report.verdict("desync_named", ok,
                   ok ? fmt::format("the fingerprint check named the fault ({}, rank {}): collective #{}, rank {} "
                                    "issued {}",
                                    flags_.fault, fault_rank_, d.seq, fault_rank_, culprit)
                      : fmt::format("the fingerprint check named collective #{}, but the fault ({}, rank {}) put the "
                                    "ranks out of step at #{}",
                                    d.seq, flags_.fault, fault_rank_, expected_seq_),
                   {{"fault", flags_.fault}, {"seq", d.seq}, {"expected_seq", expected_seq_}, {"calls", d.calls}});
    if (run_.rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    throw;
  } catch (const Hang& h) {
    if (desync_fault) {
      report.verdict("desync_named", false,
                     fmt::format("the job stopped in the transport ({}) instead of at the fingerprint check: the "
                                 "fingerprints did not tell the calls of the fault ({}, rank {}) apart at #{}",
                                 h.stall.said, flags_.fault, fault_rank_, expected_seq_),
                     {{"fault", flags_.fault}, {"seq", -1}, {"expected_seq", expected_seq_}});
    }
    const bool holder_named =
        std::find(h.stall.holding.begin(), h.stall.holding.end(), fault_rank_) != h.stall.holding.end();
    const bool ok = flags_.fault == "freeze" && h.stall.seq == expected_seq_ && holder_named;
    report.verdict("hang_named", ok,
                   ok ? fmt::format("the flight recorder named the hang: collective #{}, rank(s) {} waiting for rank "
                                    "{} ({})",
                                    h.stall.seq, fmt::join(h.stall.waiting, ", "), fault_rank_, h.stall.cause)
                      : fmt::format("the flight recorder's dumps say \"{}\", but the fault ({}, rank {}) stopped the "
                                    "job at #{}",
                                    h.stall.said, flags_.fault, fault_rank_, expected_seq_),
                   {{"fault", flags_.fault},
                    {"seq", h.stall.seq},
                    {"expected_seq", expected_seq_},
                    {"cause", h.stall.cause},
                    {"holding", h.stall.holding},
                    {"waiting", h.stall.waiting}});
    if (run_.rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    throw;
  }
  if (desync_fault) {
    report.verdict("desync_named", false,
                   fmt::format("the job finished although the fault ({}, rank {}) put the ranks out of step at #{}: "
                               "the fingerprints did not tell the calls apart",
                               flags_.fault, fault_rank_, expected_seq_),
                   {{"fault", flags_.fault}, {"seq", -1}, {"expected_seq", expected_seq_}});
  }
}

// ---- Trainer ----

namespace {
/// A loader that sleeps before each batch: the slow rank's input pipeline.
class SlowLoader final : public ddplab::data::Loader {
 public:
  SlowLoader(std::unique_ptr<ddplab::data::Loader> inner, double ms) : inner_(std::move(inner)), ms_(ms) {}
  bool next(ddplab::data::Batch& out) override {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms_));
    return inner_->next(out);
  }

 private:
  std::unique_ptr<ddplab::data::Loader> inner_;
  double ms_;
};
}  // namespace

Trainer::Trainer(ddplab::LabRun& run, Watched& comm, const Flags& flags, ddplab::DeepFM model, Faults& faults)
    : run_(run), comm_(comm), flags_(flags), model_(std::move(model)), faults_(faults) {
  params_ = model_->parameters();
  // Small caps, so that DeepFM's gradients take several all-reduces (the bucket-order fault).
  ddplab::dist::BucketOptions b;
  b.first_bucket_bytes = int64_t{1} << 18;
  b.bucket_cap_bytes = int64_t{4} << 20;
  buckets_ = ddplab::dist::assign_buckets(params_, b);
  adam_ = std::make_unique<torch::optim::Adam>(params_, torch::optim::AdamOptions(run.lr()));
  if (flags_.parity && !flags_.join) throw ddplab::ConfigError("--parity compares the joined gradient: add --join");
}

void Trainer::sync_buckets(bool reversed) {
  std::vector<size_t> order(buckets_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = reversed ? order.size() - 1 - i : i;
  for (size_t b : order) {
    std::vector<torch::Tensor> grads;
    for (size_t p : buckets_[b].params) grads.push_back(params_[p].grad().reshape({-1}));
    torch::Tensor flat = torch::cat(grads);
    comm_.allreduce(flat);
    flat.div_(comm_.size());
    int64_t at = 0;
    for (size_t p : buckets_[b].params) {
      auto g = params_[p].grad();
      g.copy_(flat.slice(0, at, at + g.numel()).view_as(g));
      at += g.numel();
    }
  }
}

double Trainer::step(const ddplab::data::Batch* batch) {
  // A joined rank (no batch) takes no timed step: its all-reduce and update are outside the timer.
  auto& timer = run_.timer();
  auto scope = [&](ddplab::Phase p) {
    return batch != nullptr ? std::make_unique<ddplab::StepTimer::Scope>(timer, p) : nullptr;
  };
  double loss_value = 0;
  for (auto& p : params_) {
    if (p.grad().defined()) {
      p.mutable_grad().zero_();
    } else {
      p.mutable_grad() = torch::zeros_like(p);
    }
  }
  if (batch != nullptr) {
    torch::Tensor loss;
    {
      auto s = scope(ddplab::Phase::kForward);
      loss = ddplab::batch_loss(model_, *batch);
    }
    {
      auto s = scope(ddplab::Phase::kBackward);
      loss.backward();
    }
    loss_value = loss.item<double>();
  }
  bool more = true;
  torch::Tensor joined;
  {
    auto s = scope(ddplab::Phase::kComm);
    if (flags_.join) {
      std::vector<torch::Tensor> grads;
      for (auto& p : params_) grads.push_back(p.grad().reshape({-1}));
      joined = torch::cat(grads);
      more = join_allreduce(comm_, joined, batch != nullptr ? batch->size() : 0);
      int64_t at = 0;
      for (auto& p : params_) {
        p.grad().copy_(joined.slice(0, at, at + p.numel()).view_as(p));
        at += p.numel();
      }
    } else {
      sync_buckets(faults_.reversed(global_step_));
    }
  }
  if (!more) return -1;
  if (flags_.parity) check_join(joined, epoch_, step_);  // before the update: the same weights
  {
    auto s = scope(ddplab::Phase::kOptimizer);
    adam_->step();
  }
  return loss_value;
}

void Trainer::check_join(const torch::Tensor& joined, int64_t epoch, int64_t step) {
  // One process over the same samples: every rank that still had a batch this step, its slice of
  // the global batch, in one batch of a copy of the model (same weights, before the update).
  const int64_t steps = run_.whole_global_batches();
  const auto order = ddplab::data::shuffled_order(run_.train_size(), run_.options().seed, static_cast<uint64_t>(epoch));
  std::vector<uint64_t> samples;
  const int world = run_.world_size();
  for (int r = 0; r < world; ++r) {
    const int64_t mine = faults_.steps_for(r, steps);
    if (step >= mine) continue;
    const auto slice = ddplab::data::global_batch_slice(order, steps, run_.batch(), r, world);
    samples.insert(samples.end(), slice.begin() + step * run_.batch(), slice.begin() + (step + 1) * run_.batch());
  }
  auto batch = ddplab::data::make_batch(run_.train(), samples.data(), samples.size());
  const torch::Device device = run_.device();
  batch.dense = batch.dense.to(device);
  batch.rows = batch.rows.to(device);
  batch.labels = batch.labels.to(device);
  ddplab::DeepFM twin;
  twin->to(device);
  {
    torch::NoGradGuard no_grad;
    auto theirs = twin->parameters();
    for (size_t i = 0; i < params_.size(); ++i) theirs[i].copy_(params_[i]);
  }
  ddplab::batch_loss(twin, batch).backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : twin->parameters()) grads.push_back(p.grad().reshape({-1}));
  const double diff = (torch::cat(grads) - joined).abs().max().item<double>();
  join_max_diff_ = std::max(join_max_diff_, diff);
  ++join_checked_;
  if (static_cast<int64_t>(samples.size()) < world * run_.batch()) ++join_partial_;  // a rank had joined
}

void Trainer::watch_stragglers() {
  torch::Tensor mine =
      torch::tensor({window_.data_wait, window_.compute, window_.comm, static_cast<double>(window_.steps)},
                    torch::kDouble);
  std::vector<torch::Tensor> all;
  for (int r = 0; r < comm_.size(); ++r) all.push_back(torch::empty_like(mine));
  comm_.allgather(all, mine);
  std::vector<PhaseTimes> times;
  for (const auto& a : all) {
    const double* v = a.data_ptr<double>();
    times.push_back(PhaseTimes{v[0], v[1], v[2], static_cast<int64_t>(v[3])});
  }
  window_ = PhaseTimes{};
  const Straggler s = find_straggler(times, run_.global_batch());
  named_.push_back(s);
  if (run_.rank() == 0 && s.rank >= 0) {
    ddplab::log::info(
        "step {}: straggler rank {}: {} +{:.1f} ms a step over the others; it costs the job {:.0f} samples/s", step_,
        s.rank, s.phase, s.excess_s * 1e3, s.cost_samples_s);
  }
}

void Trainer::train_epoch(int64_t epoch) {
  epoch_ = epoch;
  const int64_t steps = run_.whole_global_batches();
  std::unique_ptr<ddplab::data::Loader> loader = run_.global_batch_loader(epoch, faults_.steps_for(run_.rank(), steps));
  if (run_.rank() == flags_.slow_rank && flags_.slow_ms > 0) {
    loader = std::make_unique<SlowLoader>(std::move(loader), flags_.slow_ms);
  }
  run_.begin_epoch(epoch);
  ddplab::data::Batch batch;
  step_ = 0;
  while (true) {
    faults_.begin_step(global_step_, last_loss_);
    const auto t0 = std::chrono::steady_clock::now();
    const double checks0 = comm_.check_seconds();
    if (run_.next_batch(*loader, batch)) {
      last_loss_ = step(&batch);
      run_.end_step(batch, last_loss_);
      const auto& last = run_.timer().last_step();
      window_.data_wait += last.phase(ddplab::Phase::kDataWait);
      window_.compute += last.phase(ddplab::Phase::kForward) + last.phase(ddplab::Phase::kBackward) +
                         last.phase(ddplab::Phase::kOptimizer);
      window_.comm += last.phase(ddplab::Phase::kComm);
      ++window_.steps;
    } else if (!flags_.join || step(nullptr) < 0) {
      break;  // this rank's data ended; with --join, the loop ends when no rank had a sample
    } else {
      ++join_steps_;  // joined: this rank kept the others' all-reduce company
    }
    step_seconds_.push_back(ddplab::seconds_since(t0));
    check_seconds_.push_back(comm_.check_seconds() - checks0);
    ++step_;
    ++global_step_;
    if (flags_.straggler_every > 0 && step_ % flags_.straggler_every == 0) watch_stragglers();
  }
  run_.end_epoch();
}

void Trainer::report() const {
  auto& rep = run_.report();
  json named = json::array();
  for (const auto& s : named_) {
    named.push_back(
        {{"rank", s.rank}, {"phase", s.phase}, {"excess_ms", s.excess_s * 1e3}, {"cost_samples_s", s.cost_samples_s}});
  }
  const double step_med = step_seconds_.empty() ? 0 : ddplab::median(step_seconds_);
  const double check_med = check_seconds_.empty() ? 0 : ddplab::median(check_seconds_);
  rep.json()["hangs"] = {{"fault", faults_.fault()},
                         {"fault_rank", faults_.fault_rank()},
                         {"collectives", comm_.next_seq()},
                         {"fingerprint",
                          {{"every", flags_.fingerprint_every},
                           {"checks", comm_.checks()},
                           {"bytes", comm_.check_bytes()},
                           {"seconds", comm_.check_seconds()},
                           {"median_step_ms", step_med * 1e3},
                           {"median_check_ms_per_step", check_med * 1e3}}},
                         {"join",
                          {{"on", flags_.join},
                           {"joined_steps", join_steps_},
                           {"checked_steps", join_checked_},
                           {"max_abs_diff", join_max_diff_}}},
                         {"stragglers", named}};
  // The check's time includes any wait for the slowest rank that the next collective would have
  // had instead: an upper bound of its cost, and no bound at all beside a rank slowed on purpose.
  if (flags_.fingerprint_every > 0 && !step_seconds_.empty() && flags_.slow_rank < 0) {
    constexpr double kBudget = 0.10;
    const double share = step_med > 0 ? check_med / step_med : 0;
    rep.verdict("fingerprint_overhead", share <= kBudget,
                fmt::format("fingerprint checks every {} collective(s): {:.3f} ms of a {:.2f} ms step (median), {:.1f} "
                            "% (budget {:.0f} %); {} checks of {} bytes",
                            flags_.fingerprint_every, check_med * 1e3, step_med * 1e3, share * 100, kBudget * 100,
                            comm_.checks(), comm_.checks() > 0 ? comm_.check_bytes() / comm_.checks() : 0),
                {{"share", share}, {"checks", comm_.checks()}});
  }
  if (flags_.join && flags_.parity) {
    constexpr double kTolerance = 1e-6;
    const bool ok = join_checked_ > 0 && join_max_diff_ <= kTolerance;
    rep.verdict("join_weighted", ok,
                fmt::format("joined all-reduce vs one process over the same samples: largest difference {:.3g} over {} "
                            "step(s), {} of them with a rank joined (tolerance {:g})",
                            join_max_diff_, join_checked_, join_partial_, kTolerance),
                {{"max_abs_diff", join_max_diff_}, {"steps_with_a_rank_joined", join_partial_}}, true);
  }
  if (flags_.straggler_every > 0 && !named_.empty()) {
    // The windows after the first (its steps include the start-up) must name the slow rank and
    // its loader, or no one when no rank is slowed.
    const bool slowed = flags_.slow_rank >= 0 && flags_.slow_ms > 0;
    int64_t right = 0, judged = 0;
    for (size_t i = named_.size() > 1 ? 1 : 0; i < named_.size(); ++i, ++judged) {
      const auto& s = named_[i];
      right += slowed ? (s.rank == flags_.slow_rank && s.phase == "data_wait") : (s.rank < 0);
    }
    const bool ok = 2 * right > judged;
    rep.verdict("straggler_named", ok,
                slowed ? fmt::format("{} of {} windows named rank {}'s data wait (--slow-rank {} --slow-ms {:g})",
                                     right, judged, flags_.slow_rank, flags_.slow_rank, flags_.slow_ms)
                       : fmt::format("{} of {} windows named no straggler (no rank slowed)", right, judged),
                {{"right", right}, {"windows", judged}, {"slow_rank", flags_.slow_rank}});
  }
}

}  // namespace lab11

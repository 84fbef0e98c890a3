// c10d rendezvous and backends. Every collective is recorded (calls, bytes, time) and waited on
// with the configured timeout, so a missing peer becomes an error naming the collective.
#include "ddplab/dist/process_group.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/config.h"
#include "ddplab/error.h"
#include "ddplab/memory.h"
#include "ddplab/log.h"
#include "mpi_backend.h"

#ifdef DDPLAB_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef DDPLAB_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ddplab::dist {
namespace {

// Gloo writes to its peers' sockets without MSG_NOSIGNAL, so when a peer goes away (it failed, or
// finished first) the next write raises SIGPIPE and kills the process before Gloo can report the
// broken connection. Python ignores SIGPIPE at start-up, which is why PyTorch users never see
// this; a C++ program must do the same for the peer's failure to become an error naming the
// collective. Only the default action is replaced: a program that installed its own handler keeps it.
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ign {};
      ign.sa_handler = SIG_IGN;
      sigemptyset(&ign.sa_mask);
      ::sigaction(SIGPIPE, &ign, nullptr);
    }
  });
}

// --- Gloo's I/O thread -------------------------------------------------------------------------
// Gloo's TCP transport reads every socket of a device in one thread (gloo::transport::tcp::Loop),
// polling level-triggered epoll with a 10 ms timeout. Its handler takes the pair's mutex with
// try_to_lock and, when the thread posting a send or receive holds it, returns without reading:
// the socket stays readable, epoll_wait returns at once, and the loop spins until the mutex is
// free (Pair::handleEvents, gloo 0.0~git20220518, as in PyTorch 1.13 and 2.x). Measured on the
// 2-core VM, 1,000 16 B all-reduces at 2 ranks: 580,195 handleEvents calls, 8,505 of which got the
// mutex. With two ranks on two cores, the two spinning loops hold both cores, the mutex holder
// waits for a scheduler slice, and each collective costs about a millisecond. At SCHED_IDLE the
// loop still runs whenever a core has nothing else to do (so it reads as soon as data arrives on
// an idle machine), but any normal thread that wakes takes its core at once.

std::set<long> thread_ids() {
  std::set<long> ids;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ids.insert(std::strtol(e->d_name, nullptr, 10));
    }
    ::closedir(d);
  }
  return ids;
}

/// The system call thread `tid` of this process is blocked in, or -1 (running, or unreadable).
long blocked_in(long tid) {
  std::ifstream in(fmt::format("/proc/self/task/{}/syscall", tid));
  long nr = -1;
  if (!(in >> nr)) return -1;
  return nr;
}

bool is_epoll_wait(long nr) {
#ifdef SYS_epoll_wait
  if (nr == SYS_epoll_wait) return true;
#endif
#ifdef SYS_epoll_pwait
  if (nr == SYS_epoll_pwait) return true;
#endif
  return false;
}

/// Creating a device starts its loop thread; the threads that appeared meanwhile and wait in
/// epoll are the loop (a rank's other threads poll, or wait on futexes). One creation at a time in
/// a process, so that ranks run as threads (the tests) do not see each other's threads.
std::mutex& device_creation_mutex() {
  static std::mutex m;
  return m;
}

int idle_new_epoll_threads(const std::set<long>& before) {
  int demoted = 0;
  // The loop thread reaches epoll_wait microseconds after it starts; allow a loaded machine 2 s.
  for (int attempt = 0; attempt < 2000 && demoted == 0; ++attempt) {
    const std::set<long> now = thread_ids();
    if (now.empty()) break;  // no /proc
    for (long tid : now) {
      if (before.count(tid) != 0 || !is_epoll_wait(blocked_in(tid))) continue;
      sched_param p{};
      if (::sched_setscheduler(static_cast<pid_t>(tid), SCHED_IDLE, &p) == 0) ++demoted;
    }
    if (demoted == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return demoted;
}

bool idle_gloo_io(const ProcessGroupOptions& opts) {
  const char* v = std::getenv("DDPLAB_GLOO_IO");
  if (v == nullptr || *v == '\0') return opts.idle_gloo_io;
  const std::string s = v;
  if (s == "idle") return true;
  if (s == "normal") return false;
  throw ConfigError(fmt::format("DDPLAB_GLOO_IO={}: expected idle (the default) or normal", s));
}

bool is_loopback(const std::string& addr) {
  return addr.empty() || addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

void require_one_device_per_rank(compat::Store& store, int rank, int size, const std::string& device_key,
                                 const std::string& label) {
  const auto key = [](int r, const char* what) { return fmt::format("ddplab/device/{}/{}", r, what); };
  store.set(key(rank, "key"), std::vector<uint8_t>(device_key.begin(), device_key.end()));
  store.set(key(rank, "label"), std::vector<uint8_t>(label.begin(), label.end()));
  std::vector<std::string> keys(static_cast<size_t>(size)), labels(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const std::vector<uint8_t> k = store.get(key(r, "key"));  // waits for rank r, up to the store's timeout
    const std::vector<uint8_t> l = store.get(key(r, "label"));
    keys[static_cast<size_t>(r)] = std::string(k.begin(), k.end());
    labels[static_cast<size_t>(r)] = std::string(l.begin(), l.end());
  }
  for (int a = 0; a < size; ++a) {
    for (int b = a + 1; b < size; ++b) {
      if (keys[static_cast<size_t>(a)] != keys[static_cast<size_t>(b)]) continue;
      throw ConfigError(fmt::format(
          "rank {}: --backend nccl: ranks {} and {} both run on one GPU ({} and {}); NCCL needs one GPU per rank. "
          "Start at most one rank per GPU of each machine (--device cuda gives local rank N cuda:N), or run the "
          "ranks on --device cpu over Gloo",
          rank, a, b, labels[static_cast<size_t>(a)], labels[static_cast<size_t>(b)]));
    }
  }
}

std::unique_ptr<ProcessGroup> ProcessGroup::join(const Environment& env, torch::Device device,
                                                 const ProcessGroupOptions& opts) {
  ignore_sigpipe_once();  // the TCPStore's sockets too
  c10::intrusive_ptr<compat::Store> store;
  // MPI wires its ranks itself (mpirun). Under the kit's launcher they still share a TCPStore for
  // what it carries besides the rendezvous: each rank's last collective, which names the rank that
  // never entered one when a collective times out. Under a plain mpirun: no store. Rank 0 serves
  // it on a port the kernel picks and MPI tells the others which: the launcher's MASTER_PORT was
  // free when it looked, but mpirun's daemons and MPI_Init open sockets on ephemeral ports before
  // rank 0 binds, and one took it (CI: rank 1 reached another listener, "Connection reset by peer").
  const bool kit_launcher = std::getenv("DDPLAB_LAUNCHER") != nullptr;
  const bool over_mpi = opts.backend == "mpi" && env.world_size > 1;
  if (!env.distributed() || (over_mpi && !kit_launcher)) {
    store = c10::make_intrusive<c10d::HashStore>();
  } else {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(env.master_port);
    o.isServer = env.rank == 0;
    o.numWorkers = static_cast<size_t>(env.world_size);
    o.waitWorkers = !over_mpi;  // over MPI the others learn the port after rank 0 serves it
    o.timeout = opts.timeout;
#ifdef DDPLAB_HAVE_MPI
    if (over_mpi) {
      mpi_init_for(env.rank, env.world_size);
      o.port =
          env.rank == 0 ? 0 : static_cast<std::uint16_t>(mpi_share_from_rank0(0, opts.timeout, "its TCPStore's port"));
    }
#endif
    try {
      store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    } catch (const std::exception& e) {
      throw Error(fmt::format("rank {}: rendezvous at {}:{} failed ({}): {}", env.rank, env.master_addr, o.port,
                              env.rank == 0 ? "serving the TCPStore" : "connecting to rank 0", e.what()));
    }
#ifdef DDPLAB_HAVE_MPI
    if (over_mpi && env.rank == 0) {
      (void)mpi_share_from_rank0(static_cast<c10d::TCPStore*>(store.get())->getPort(), opts.timeout,
                                 "its TCPStore's port");
    }
#endif
  }
  auto pg = std::make_unique<ProcessGroup>(store, env.rank, env.world_size, device, opts);
  return pg;
}

ProcessGroup::ProcessGroup(c10::intrusive_ptr<compat::Store> store, int rank, int size, torch::Device device,
                           const ProcessGroupOptions& opts)
    : rank_(rank), size_(size), store_(std::move(store)), opts_(opts) {
  const std::string& b = opts.backend;
  if (b != "auto" && b != "gloo" && b != "nccl" && b != "mpi") {
    throw ConfigError(fmt::format("--backend {}: expected auto, gloo, nccl or mpi", b));
  }
  if (b == "nccl" && !device.is_cuda())
    throw ConfigError("--backend nccl: NCCL moves CUDA tensors; this run is on the CPU");
  if ((b == "gloo" || b == "mpi") && device.is_cuda()) {
    throw ConfigError(fmt::format("--backend {}: the kit runs CUDA tensors over NCCL (--backend auto or nccl)", b));
  }
  // A rank alone in its job (e.g. one that never read the launcher's variables: lab 02's lesson)
  // has nothing to exchange and trains by itself, as over c10d: MPI would call it one of mpirun's
  // N ranks. It gets the one-rank group every unlaunched program gets.
  if (b == "mpi" && size > 1) {
#ifdef DDPLAB_HAVE_MPI
    backend_ = c10::make_intrusive<MpiBackend>(rank, size);
    backend_name_ = "mpi";
    allreduce_algorithm_ = "Open MPI all-reduce: " + mpi_allreduce_algorithm();
    if (dynamic_cast<c10d::HashStore*>(store_.get()) != nullptr) {
      opts_.publish_interval = std::chrono::milliseconds(0);  // no store shared by the ranks
    }
    start_publisher();
    return;
#else
    throw ConfigError("--backend mpi: this build has no MPI (Debian: libopenmpi-dev; configure the build again)");
#endif
  }
  if (device.is_cuda()) {
#ifdef DDPLAB_HAVE_NCCL
    if (size > 1) {
      // The physical GPU (its PCI bus id), whatever CUDA_VISIBLE_DEVICES numbers it in this rank.
      char host[256] = {}, bus[64] = {};
      ::gethostname(host, sizeof(host) - 1);
      int index = device.has_index() ? device.index() : 0;
      if (!device.has_index()) (void)cudaGetDevice(&index);
      const bool have_bus = cudaDeviceGetPCIBusId(bus, sizeof(bus), index) == cudaSuccess;
      const std::string label = fmt::format("{}/cuda:{}{}", host, index, have_bus ? fmt::format(" (PCI {})", bus) : "");
      require_one_device_per_rank(*store_, rank, size,
                                  have_bus ? fmt::format("{}/{}", host, bus) : fmt::format("{}/cuda:{}", host, index),
                                  label);
    }
    auto o = c10d::ProcessGroupNCCL::Options::create();
    o->timeout = opts.timeout;
    backend_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, rank, size, o);
    backend_name_ = "nccl";
    device_ = device;
#else
    throw ConfigError("--device cuda needs NCCL, and this LibTorch build has no NCCL backend");
#endif
  } else {
#ifdef DDPLAB_HAVE_GLOO
    ignore_sigpipe_once();
    auto o = c10d::ProcessGroupGloo::Options::create(opts.timeout);
    // GLOO_SOCKET_IFNAME (as in PyTorch: a comma-separated list of interfaces) chooses the
    // network; otherwise ranks on one machine talk over loopback, and across machines Gloo binds
    // to the address the host name resolves to.
    const bool idle_io = idle_gloo_io(opts);
    std::unique_lock<std::mutex> creating(device_creation_mutex());
    const std::set<long> before = thread_ids();
    const char* ifnames = std::getenv("GLOO_SOCKET_IFNAME");
    const char* host = std::getenv("MASTER_ADDR");
    if (ifnames != nullptr && *ifnames != '\0') {
      std::string list = ifnames;
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string name = list.substr(at, comma - at);
        if (!name.empty()) {
          try {
            o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
          } catch (const std::exception& e) {
            throw ConfigError(fmt::format("rank {}: GLOO_SOCKET_IFNAME names interface '{}', which Gloo cannot use: {}",
                                          rank, name, e.what()));
          }
        }
        at = comma + 1;
      }
    }
    if (o->devices.empty()) {
      o->devices.push_back(is_loopback(host != nullptr ? host : "")
                               ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                               : c10d::ProcessGroupGloo::createDefaultDevice());
    }
    if (idle_io) {
      idle_io_threads_ = idle_new_epoll_threads(before);
      if (idle_io_threads_ == 0) {
        log::debug(
            "Gloo's I/O thread was not found in /proc/self/task, so it keeps the normal scheduling class; "
            "on a machine with few cores each collective may cost about a millisecond "
            "(docs/concepts/gradient-sync.md)");
      }
    }
    creating.unlock();
    o->threads = 2;
    backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank, size, o);
    backend_name_ = "gloo";
#else
    throw ConfigError(
        "CPU collectives need Gloo, and this build has no Gloo backend (Gloo headers matching "
        "this LibTorch were not found at configure time)");
#endif
  }
  start_publisher();
}

ProcessGroup::~ProcessGroup() {
  stop_publisher();
  release_backend();
}

void ProcessGroup::wait(const c10::intrusive_ptr<compat::Work>& work, Op op) {
  // A blocking collective is always the one entered last.
  wait(work, op, stats_.sequence, stats_.last_bytes);
}

void ProcessGroup::wait(const c10::intrusive_ptr<compat::Work>& work, Op op, int64_t sequence, int64_t bytes) {
  try {
    work->wait(opts_.timeout);
#ifdef DDPLAB_HAVE_MPI
  } catch (const CollectivesOutOfStep& e) {
    failed_ = true;
    throw Error(fmt::format("rank {}: {} #{} ({} bytes): {}", rank_, op_name(op), sequence, bytes, e.what()));
#endif
  } catch (const std::exception& e) {
    failed_ = true;  // the backend is left to abort(), not to a graceful shutdown() that waits on peers
    throw Error(fmt::format("rank {}: {} #{} ({} bytes) did not complete within {} ms. {}. Backend: {}", rank_,
                            op_name(op), sequence, bytes, opts_.timeout.count(), describe_ranks(), e.what()));
  }
}

void ProcessGroup::note_entered(Op op, int64_t sequence, int64_t bytes) {
  entered_op_.store(static_cast<int>(op));
  entered_bytes_.store(bytes);
  entered_seq_.store(sequence);
}

namespace {
std::string progress_key(int rank) { return fmt::format("ddplab/last_collective/{}", rank); }
}  // namespace

void ProcessGroup::publish_progress() {
  const int64_t seq = entered_seq_.load();
  if (seq == published_seq_.load() || !store_) return;
  const std::string v =
      fmt::format("{} {} {}", seq, op_name(static_cast<Op>(entered_op_.load())), entered_bytes_.load());
  try {
    store_->set(progress_key(rank_), std::vector<uint8_t>(v.begin(), v.end()));
    published_seq_.store(seq);
  } catch (const std::exception&) {
    // The store may be gone at shutdown or when rank 0 died; diagnosis is best effort.
  }
}

std::string ProcessGroup::describe_ranks() {
  if (!store_ || opts_.publish_interval.count() == 0) return "no per-rank progress (publishing is off)";
  publish_progress();
  std::vector<std::string> parts;
  for (int r = 0; r < size_; ++r) {
    try {
      if (!store_->check({progress_key(r)})) {
        parts.push_back(fmt::format("rank {} entered no collective yet", r));
        continue;
      }
      const auto raw = store_->get(progress_key(r));
      const std::string v(raw.begin(), raw.end());
      int64_t seq = 0, bytes = 0;
      char op[32] = {0};
      if (std::sscanf(v.c_str(), "%" SCNd64 " %31s %" SCNd64, &seq, op, &bytes) == 3) {
        parts.push_back(fmt::format("rank {} last entered {} #{} ({} bytes)", r, op, seq, bytes));
      }
    } catch (const std::exception&) {
      parts.push_back(fmt::format("rank {}: unknown (the store did not answer)", r));
    }
  }
  return fmt::format("Last collective entered per rank: {}", fmt::join(parts, "; "));
}

void ProcessGroup::start_publisher() {
  if (opts_.publish_interval.count() == 0 || size_ == 1) return;
  // A thread, not a store write per collective: a TCPStore write is a round trip to rank 0, and
  // per-parameter sync issues a dozen collectives a step.
  publisher_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(publisher_mutex_);
    while (!publisher_stop_) {
      publisher_cv_.wait_for(lock, opts_.publish_interval);
      lock.unlock();
      publish_progress();
      lock.lock();
    }
  });
}

void ProcessGroup::stop_publisher() {
  {
    std::lock_guard<std::mutex> lock(publisher_mutex_);
    publisher_stop_ = true;
  }
  publisher_cv_.notify_all();
  if (publisher_.joinable()) publisher_.join();
}

torch::Tensor ProcessGroup::staged(const torch::Tensor& t) const {
  if (!device_.is_cuda() || !t.defined() || t.device() == device_) return t;
  return t.to(device_);
}

void ProcessGroup::unstage(torch::Tensor& t, const torch::Tensor& on_device) {
  if (on_device.defined() && !on_device.is_same(t))
    t.copy_(on_device);  // device to host: waits for the collective's stream
}

void ProcessGroup::allreduce(torch::Tensor& t) {
  Recorder r(*this, Op::kAllreduce, memory::bytes_of(t));
  note_entered(Op::kAllreduce, stats_.sequence, stats_.last_bytes);
  std::vector<at::Tensor> v{staged(t)};
  wait(backend_->allreduce(v), Op::kAllreduce);
  unstage(t, v[0]);
}

/// An allreduce in flight. It remembers its own sequence number and size, because by the time it
/// is waited on, later collectives may have started and stats().last_* describe those instead.
class ProcessGroup::AsyncWork final : public Pending {
 public:
  AsyncWork(ProcessGroup& pg, c10::intrusive_ptr<compat::Work> work, int64_t sequence, int64_t bytes, int lane,
            std::chrono::steady_clock::time_point launched, torch::Tensor host = {}, torch::Tensor on_device = {})
      : pg_(pg),
        work_(std::move(work)),
        sequence_(sequence),
        bytes_(bytes),
        lane_(lane),
        launched_(launched),
        host_(std::move(host)),
        on_device_(std::move(on_device)) {}

  void wait() override {
    if (!work_) return;
    const auto start = std::chrono::steady_clock::now();
    auto work = std::move(work_);
    auto charge = [&] {
      pg_.record_wait(Op::kAllreduce, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      // On the timeline the bar runs from launch to here: while backward computed, and the wait.
      pg_.trace_async(lane_, Op::kAllreduce, launched_, bytes_, sequence_);
    };
    try {
      pg_.wait(work, Op::kAllreduce, sequence_, bytes_);
    } catch (...) {
      host_ = on_device_ = torch::Tensor();
      charge();  // a timed-out wait was still time spent waiting
      throw;
    }
    ProcessGroup::unstage(host_, on_device_);
    host_ = on_device_ = torch::Tensor();  // the staging copy is not kept for the handle's lifetime
    charge();
  }

 private:
  ProcessGroup& pg_;
  c10::intrusive_ptr<compat::Work> work_;
  int64_t sequence_, bytes_;
  int lane_;  // on the trace; -1 when tracing is off
  std::chrono::steady_clock::time_point launched_;
  torch::Tensor host_, on_device_;  // a host tensor reduced through the GPU (NCCL), copied back at wait
};

std::shared_ptr<Pending> ProcessGroup::allreduce_async(torch::Tensor& t) {
  const int64_t bytes = memory::bytes_of(t);
  const int64_t sequence = record_start(Op::kAllreduce, bytes);
  note_entered(Op::kAllreduce, sequence, bytes);
  trace::Recorder* tr = tracer();
  const int lane = tr != nullptr ? tr->begin_collective() : -1;
  const auto launched = tr != nullptr ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  std::vector<at::Tensor> v{staged(t)};
  auto work = backend_->allreduce(v);
  return std::make_shared<AsyncWork>(*this, std::move(work), sequence, bytes, lane, launched, t, v[0]);
}

void ProcessGroup::broadcast(torch::Tensor& t, int root) {
  Recorder r(*this, Op::kBroadcast, memory::bytes_of(t));
  note_entered(Op::kBroadcast, stats_.sequence, stats_.last_bytes);
  std::vector<at::Tensor> v{staged(t)};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  wait(backend_->broadcast(v, o), Op::kBroadcast);
  unstage(t, v[0]);
}

void ProcessGroup::allgather(std::vector<torch::Tensor>& out, const torch::Tensor& in) {
  DDPLAB_CHECK(static_cast<int>(out.size()) == size_,
               fmt::format("allgather: {} output tensors for {} ranks", out.size(), size_));
  Recorder r(*this, Op::kAllgather, memory::bytes_of(in));
  note_entered(Op::kAllgather, stats_.sequence, stats_.last_bytes);
  std::vector<std::vector<at::Tensor>> o(1);
  for (const auto& t : out) o[0].push_back(staged(t));
  std::vector<at::Tensor> i{staged(in)};
  wait(backend_->allgather(o, i), Op::kAllgather);
  for (size_t k = 0; k < out.size(); ++k) unstage(out[k], o[0][k]);
}

void ProcessGroup::all_to_all(torch::Tensor& out, const torch::Tensor& in) {
  DDPLAB_CHECK(in.size(0) % size_ == 0,
               fmt::format("all_to_all: dim 0 ({}) is not divisible by {} ranks", in.size(0), size_));
  Recorder r(*this, Op::kAllToAll, memory::bytes_of(in));
  note_entered(Op::kAllToAll, stats_.sequence, stats_.last_bytes);
  at::Tensor i = staged(in), o = staged(out);
  std::vector<int64_t> equal;  // empty split sizes: equal chunks
  wait(backend_->alltoall_base(o, i, equal, equal), Op::kAllToAll);
  unstage(out, o);
}

void ProcessGroup::all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits) {
  auto check = [&](const std::vector<int64_t>& splits, const torch::Tensor& t, const char* which) {
    DDPLAB_CHECK(static_cast<int>(splits.size()) == size_,
                 fmt::format("all_to_all on rank {}: {} split sizes for {} ranks", rank_, splits.size(), size_));
    int64_t sum = 0;
    for (int64_t n : splits) {
      DDPLAB_CHECK(n >= 0, fmt::format("all_to_all on rank {}: a negative {} split size ({})", rank_, which, n));
      sum += n;
    }
    DDPLAB_CHECK(t.dim() > 0 && sum == t.size(0),
                 fmt::format("all_to_all on rank {}: the {} split sizes add up to {} rows, the {} tensor has {}", rank_,
                             which, sum, which, t.dim() > 0 ? t.size(0) : 0));
  };
  check(in_splits, in, "input");
  check(out_splits, out, "output");
  Recorder r(*this, Op::kAllToAll, memory::bytes_of(in));
  note_entered(Op::kAllToAll, stats_.sequence, stats_.last_bytes);
  at::Tensor i = staged(in), o = staged(out);
  std::vector<int64_t> o_splits = out_splits, i_splits = in_splits;
  wait(backend_->alltoall_base(o, i, o_splits, i_splits), Op::kAllToAll);
  unstage(out, o);
}

void ProcessGroup::reduce_scatter(torch::Tensor& out, const torch::Tensor& in) {
  DDPLAB_CHECK(in.dim() > 0 && in.size(0) % size_ == 0,
               fmt::format("reduce_scatter on rank {}: dim 0 ({}) is not divisible by {} ranks", rank_,
                           in.dim() > 0 ? in.size(0) : 0, size_));
  DDPLAB_CHECK(out.numel() * size_ == in.numel(),
               fmt::format("reduce_scatter on rank {}: the output holds {} elements, a chunk of the input {}", rank_,
                           out.numel(), in.numel() / size_));
  Recorder r(*this, Op::kReduceScatter, memory::bytes_of(in));
  note_entered(Op::kReduceScatter, stats_.sequence, stats_.last_bytes);
  at::Tensor i = staged(in).contiguous();
  at::Tensor o = torch::empty_like(i);
  std::vector<int64_t> equal;  // empty split sizes: equal chunks
  wait(backend_->alltoall_base(o, i, equal, equal), Op::kReduceScatter);
  // o holds chunk rank() of every rank, in rank order: their sum is this rank's chunk of the sum.
  at::Tensor sum = o.view({size_, -1}).sum(0);
  out.copy_(sum.view_as(out));
}

void ProcessGroup::send(const torch::Tensor& t, int dst, int tag) {
  Recorder r(*this, Op::kSend, memory::bytes_of(t));
  note_entered(Op::kSend, stats_.sequence, stats_.last_bytes);
  std::vector<at::Tensor> v{staged(t)};
  wait(backend_->send(v, dst, tag), Op::kSend);
}

void ProcessGroup::recv(torch::Tensor& t, int src, int tag) {
  Recorder r(*this, Op::kRecv, memory::bytes_of(t));
  note_entered(Op::kRecv, stats_.sequence, stats_.last_bytes);
  std::vector<at::Tensor> v{staged(t)};
  wait(backend_->recv(v, src, tag), Op::kRecv);
  unstage(t, v[0]);
}

void ProcessGroup::barrier() {
  Recorder r(*this, Op::kBarrier, 0);
  note_entered(Op::kBarrier, stats_.sequence, stats_.last_bytes);
  wait(backend_->barrier(), Op::kBarrier);
}

void ProcessGroup::shutdown() {
  if (!backend_) return;
  barrier();
  stop_publisher();
  release_backend();
}

void abandon_transport() noexcept {
#ifdef DDPLAB_HAVE_MPI
  abandon_mpi();
#endif
}

void ProcessGroup::release_backend() {
#ifdef DDPLAB_HAVE_MPI
  if (backend_ && failed_ && backend_name_ == "mpi") abandon_mpi();  // no MPI_Finalize waiting for a peer
#endif
  if (backend_) {
    try {
      compat::shutdown_backend(*backend_, /*abort=*/failed_);
    } catch (const std::exception& e) {
      log::warn("rank {}: shutting the {} backend down: {}", rank_, backend_name_, e.what());
    }
  }
  backend_.reset();
  store_.reset();
}

}  // namespace ddplab::dist

#include "mpi_backend.h"

#ifdef DDPLAB_HAVE_MPI

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "ddplab/error.h"

namespace ddplab::dist {
namespace {

std::atomic<bool> abandoned{false};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !abandoned.load()) MPI_Finalize();
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  return std::string(text, static_cast<size_t>(n));
}

void check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw std::runtime_error(fmt::format("{}: {}", what, mpi_error(code)));
}

MPI_Datatype datatype(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kChar: return MPI_INT8_T;
    case at::kBool: return MPI_C_BOOL;
    default:
      throw ConfigError(
          fmt::format("the mpi backend's {} takes float32, float64, int64, int32, int8, uint8 or bool "
                      "tensors, not {}",
                      op, c10::toString(t.scalar_type())));
  }
}

/// A CPU tensor a collective takes: contiguous, with a count MPI can hold.
const at::Tensor& usable(const at::Tensor& t, const char* op) {
  if (!t.device().is_cpu()) throw ConfigError(fmt::format("the mpi backend's {} takes CPU tensors", op));
  if (!t.is_contiguous()) throw ConfigError(fmt::format("the mpi backend's {} takes contiguous tensors", op));
  if (t.numel() > std::numeric_limits<int>::max()) {
    throw ConfigError(
        fmt::format("the mpi backend's {}: {} elements are more than one MPI call counts", op, t.numel()));
  }
  return t;
}

/// The one tensor of a collective's list.
const at::Tensor& the_tensor(const std::vector<at::Tensor>& ts, const char* op) {
  if (ts.size() != 1) throw ConfigError(fmt::format("the mpi backend's {} takes one tensor, not {}", op, ts.size()));
  return usable(ts.front(), op);
}

int as_count(int64_t n) { return static_cast<int>(n); }

/// One collective in flight: the MPI calls that make it, started one after another (a large
/// all-reduce or broadcast goes in chunks: measured on the 2-core VM, 64 MiB as one non-blocking
/// all-reduce reached 1.1 GB/s bus bandwidth, as 1 MiB pieces 5 GB/s), the tensors they read and
/// write (kept alive), and what to do once the last completes (copying a gathered buffer out).
/// Testing drives the progress.
class MpiWork final : public compat::Work {
 public:
  using Start = MpiBackend::Start;

  MpiWork(std::vector<at::Tensor> keep, std::vector<Start> steps, const char* name, std::function<void()> done = {})
      : keep_(std::move(keep)), steps_(std::move(steps)), name_(name), done_(std::move(done)) {
    start_next();
  }

  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return test_locked();
  }
  bool isSuccess() const override { return finished_; }

  bool wait(std::chrono::milliseconds timeout) override {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (test_locked()) return true;
      }
      if (timeout.count() > 0 && std::chrono::steady_clock::now() - start > timeout) {
        throw std::runtime_error(
            fmt::format("MPI: not complete after {} ms (a peer never entered it, or failed)", timeout.count()));
      }
      // Progress is made by testing; yield between tests so that ranks sharing a core (more
      // ranks than cores) let each other run.
      sched_yield();
    }
  }

 private:
  void start_next() {
    if (next_ < steps_.size()) {
      check(steps_[next_](&request_), name_);
      ++next_;
    }
  }

  bool test_locked() {
    while (!finished_) {
      int flag = 0;
      check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (!flag) return false;
      if (next_ < steps_.size()) {
        start_next();
        continue;
      }
      if (done_) done_();
      finished_ = true;
      keep_.clear();
      steps_.clear();
    }
    return true;
  }

  std::mutex mutex_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::vector<at::Tensor> keep_;
  std::vector<Start> steps_;
  size_t next_ = 0;
  const char* name_;
  std::function<void()> done_;
  bool finished_ = false;
};

/// Chunks of at most kChunkBytes over the elements of `t`: (offset in bytes, count).
constexpr int64_t kChunkBytes = int64_t{1} << 20;
std::vector<std::pair<int64_t, int>> chunks(const at::Tensor& t) {
  const int64_t es = t.element_size(), per = std::max<int64_t>(1, kChunkBytes / es);
  if (t.numel() == 0) return {{0, 0}};  // one call all the same: every rank must enter it
  std::vector<std::pair<int64_t, int>> out;
  for (int64_t at = 0; at < t.numel(); at += per)
    out.emplace_back(at * es, static_cast<int>(std::min(per, t.numel() - at)));
  return out;
}

/// A rank's entry in the comparison before a collective: its number, kind, element type, count
/// and root (-1 where none).
constexpr int kEntry = 5;
const char* const kOps[] = {"broadcast", "allreduce", "allgather", "all_to_all", "barrier"};

int64_t op_code(const char* op) {
  for (size_t i = 0; i < std::size(kOps); ++i) {
    if (std::strcmp(kOps[i], op) == 0) return static_cast<int64_t>(i);
  }
  return -1;
}

std::string describe_entry(const int64_t* e) {
  const char* op = e[1] >= 0 && e[1] < static_cast<int64_t>(std::size(kOps)) ? kOps[e[1]] : "?";
  if (e[2] < 0) return op;  // a barrier moves no data
  std::string type = c10::toString(static_cast<c10::ScalarType>(e[2]));
  for (auto& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string out = fmt::format("{} {}[{}]", op, type, e[3]);
  if (e[4] >= 0) out += fmt::format(" from rank {}", e[4]);
  return out;
}

/// The all-gathered entries (this rank's first, then every rank's): throws CollectivesOutOfStep
/// naming each rank's collective unless they all agree.
void compare_entries(const std::vector<int64_t>& table, int n) {
  const int64_t* first = table.data() + kEntry;
  bool same = true;
  for (int r = 1; r < n && same; ++r) {
    same = std::equal(first, first + kEntry, table.data() + kEntry * (r + 1));
  }
  if (same) return;
  std::string ranks;
  for (int r = 0; r < n; ++r) {
    ranks += fmt::format("{}rank {} {}", r == 0 ? "" : "; ", r, describe_entry(table.data() + kEntry * (r + 1)));
  }
  throw CollectivesOutOfStep(fmt::format(
      "collectives out of step at #{}: {} (the mpi backend compared what each rank entered before moving data: "
      "every rank must make the same collectives, of the same type and size, in the same order)",
      first[0], ranks));
}

bool check_from_env() {
  const char* v = std::getenv("DDPLAB_MPI_CHECK");
  if (v == nullptr || *v == '\0') return true;
  const std::string s = v;
  if (s == "on" || s == "1") return true;
  if (s == "off" || s == "0") return false;
  throw ConfigError(fmt::format("DDPLAB_MPI_CHECK={}: expected on (the default) or off", s));
}

}  // namespace

void mpi_init_for(int rank, int size) {
  static std::once_flag once;
  std::call_once(once, [size] {
    if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMIX_RANK") == nullptr) {
      throw ConfigError(
          "--backend mpi: this process was not started by mpirun (no OMPI_COMM_WORLD_SIZE): Open MPI starts the "
          "ranks and wires their shared memory, e.g. mpirun -n 2 PROGRAM ... --backend mpi (docs/concepts/"
          "launching.md), or ddplab launch --backend mpi (or auto) which starts them through mpirun; under ddplab "
          "launch --backend c10d, torchrun or srun use --backend gloo");
    }
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // The kit's all-reduces are non-blocking (MPI_Iallreduce: Open MPI's libnbc, not its tuned
      // blocking collectives). Left to itself libnbc 4.1 sends the whole buffer both ways at 2 ranks;
      // its ring (reduce-scatter, then all-gather: lab 04's model) halves the bytes each rank moves.
      // `ddplab bench allreduce`, 2 ranks on the 2-core VM, 2026-12-07: 1 MiB 368-446 us -> 180-186,
      // 4 MiB 1.45-1.50 ms -> 0.67-0.74, 4 KiB 9.6-12.2 us -> 6.1-6.2, <= 1 KiB the same (3.6-5.8 us).
      // At 4 ranks on 2 cores the ring was slower from 4 to 32 KiB (26 -> 44 us, 42 -> 66) and faster
      // only at 4 MiB (786 -> 555 us), so there libnbc chooses. A value the user set is kept.
      if (size == 2) ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      if (provided < MPI_THREAD_SERIALIZED) {
        throw Error("--backend mpi: this MPI library does not allow calls from more than one thread");
      }
      std::atexit(finalize_at_exit);
    }
  });
  int mpi_rank = -1, mpi_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  if (mpi_rank != rank || mpi_size != size) {
    throw ConfigError(fmt::format("--backend mpi: MPI says rank {} of {}, the launcher's variables rank {} of {}",
                                  mpi_rank, mpi_size, rank, size));
  }
}

std::string mpi_allreduce_algorithm() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) return "unknown";
  std::string name = "unknown";
  int index = -1, count = 0, value = -1;
  MPI_T_cvar_handle handle{};
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    if (count == 1 && MPI_T_cvar_read(handle, &value) == MPI_SUCCESS) {
      static const char* const names[] = {"libnbc's own choice", "ring", "binomial", "rabenseifner",
                                          "recursive doubling"};
      name = value >= 0 && value < 5 ? names[value] : fmt::format("libnbc algorithm {}", value);
    }
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return name;
}

int mpi_share_from_rank0(int value, std::chrono::milliseconds timeout, const char* what) {
  int shared = value;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibcast(&shared, 1, MPI_INT, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int done = 0;;) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done != 0) return shared;
    if (std::chrono::steady_clock::now() > deadline) {
      int rank = -1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      abandon_mpi();
      throw Error(
          fmt::format("rank {}: rank 0's broadcast of {} did not finish in {} s (did every rank start the job?)", rank,
                      what, std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
    }
    sched_yield();
  }
}

MpiBackend::MpiBackend(int rank, int size) : compat::Backend(rank, size), check_(check_from_env()) {
  mpi_init_for(rank, size);
  // Every rank creates its backend at the same point of the job (ProcessGroup::join): the
  // duplicate is made together, and the comparisons never match a collective's data messages.
  if (check_) check(MPI_Comm_dup(MPI_COMM_WORLD, &check_comm_), "MPI_Comm_dup");
}

void abandon_mpi() noexcept { abandoned.store(true); }

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (check_comm_ != MPI_COMM_NULL && !finalized && !abandoned.load()) MPI_Comm_free(&check_comm_);
}

c10::intrusive_ptr<compat::Work> MpiBackend::collective(const char* op, const at::Tensor* t, int64_t count,
                                                        int64_t root, std::vector<at::Tensor> keep,
                                                        std::vector<Start> steps, const char* name,
                                                        std::function<void()> done) {
  const int64_t seq = ++seq_;  // 1-based, as the runtime numbers its collectives ("allreduce #14")
  if (!check_) return c10::make_intrusive<MpiWork>(std::move(keep), std::move(steps), name, std::move(done));
  const int n = getSize();
  auto table = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(kEntry * (n + 1)));
  int64_t* mine = table->data();
  mine[0] = seq;
  mine[1] = op_code(op);
  mine[2] = t != nullptr ? static_cast<int64_t>(t->scalar_type()) : -1;
  mine[3] = count;
  mine[4] = root;
  const MPI_Comm comm = check_comm_;
  std::vector<Start> all;
  all.push_back([table, comm](MPI_Request* r) {
    return MPI_Iallgather(table->data(), kEntry, MPI_INT64_T, table->data() + kEntry, kEntry, MPI_INT64_T, comm, r);
  });
  // The data moves only once every rank's entry is known to match: the first step compares.
  if (!steps.empty()) {
    all.push_back([table, n, first = std::move(steps.front())](MPI_Request* r) {
      compare_entries(*table, n);
      return first(r);
    });
    all.insert(all.end(), std::make_move_iterator(steps.begin() + 1), std::make_move_iterator(steps.end()));
  }
  return c10::make_intrusive<MpiWork>(std::move(keep), std::move(all), name, std::move(done));
}

c10::intrusive_ptr<compat::Work> MpiBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = the_tensor(tensors, "broadcast");
  const MPI_Datatype type = datatype(t, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  auto* base = static_cast<char*>(t.data_ptr());
  std::vector<MpiWork::Start> steps;
  for (const auto& chunk : chunks(t)) {
    char* at = base + chunk.first;
    const int count = chunk.second;
    steps.push_back([=](MPI_Request* r) { return MPI_Ibcast(at, count, type, root, MPI_COMM_WORLD, r); });
  }
  return collective("broadcast", &t, t.numel(), root, {t}, std::move(steps), "MPI_Ibcast");
}

c10::intrusive_ptr<compat::Work> MpiBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  if (opts.reduceOp != c10d::ReduceOp::SUM) throw ConfigError("the mpi backend's allreduce sums only");
  const at::Tensor& t = the_tensor(tensors, "allreduce");
  const MPI_Datatype type = datatype(t, "allreduce");
  auto* base = static_cast<char*>(t.data_ptr());
  std::vector<MpiWork::Start> steps;
  for (const auto& chunk : chunks(t)) {
    char* at = base + chunk.first;
    const int count = chunk.second;
    steps.push_back(
        [=](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, at, count, type, MPI_SUM, MPI_COMM_WORLD, r); });
  }
  return collective("allreduce", &t, t.numel(), -1, {t}, std::move(steps), "MPI_Iallreduce");
}

c10::intrusive_ptr<compat::Work> MpiBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllgatherOptions& /*opts*/) {
  const at::Tensor& in = the_tensor(inputs, "allgather");
  if (outputs.size() != 1 || static_cast<int>(outputs.front().size()) != getSize()) {
    throw ConfigError(fmt::format("the mpi backend's allgather takes one list of {} output tensors", getSize()));
  }
  // Into one buffer of every rank's tensor, then out into the caller's tensors.
  at::Tensor all = at::empty({getSize(), in.numel()}, in.options());
  std::vector<at::Tensor> out = outputs.front();
  const MPI_Datatype type = datatype(in, "allgather");
  const int count = as_count(in.numel());
  std::vector<MpiWork::Start> steps = {[=](MPI_Request* r) {
    return MPI_Iallgather(in.data_ptr(), count, type, all.data_ptr(), count, type, MPI_COMM_WORLD, r);
  }};
  return collective("allgather", &in, in.numel(), -1, {in, all}, std::move(steps), "MPI_Iallgather",
                    [all, out]() mutable {
                      for (size_t r = 0; r < out.size(); ++r) {
                        out[r].copy_(all[static_cast<int64_t>(r)].view(out[r].sizes()));
                      }
                    });
}

c10::intrusive_ptr<compat::Work> MpiBackend::alltoall_base(at::Tensor& out, at::Tensor& in,
                                                           std::vector<int64_t>& out_splits,
                                                           std::vector<int64_t>& in_splits,
                                                           const c10d::AllToAllOptions& /*opts*/) {
  const at::Tensor i = usable(in, "all_to_all");
  const at::Tensor o = usable(out, "all_to_all");
  const MPI_Datatype type = datatype(i, "all_to_all");
  const int n = getSize();
  if (out_splits.empty() && in_splits.empty()) {
    const int count = as_count(i.numel() / n);
    std::vector<MpiWork::Start> steps = {[=](MPI_Request* r) {
      return MPI_Ialltoall(i.data_ptr(), count, type, o.data_ptr(), count, type, MPI_COMM_WORLD, r);
    }};
    return collective("all_to_all", &i, i.numel(), -1, {i, o}, std::move(steps), "MPI_Ialltoall");
  }
  // Split sizes count rows (dim 0); MPI counts elements. The count arrays live in the step, which
  // the work keeps until the call completes.
  const int64_t row_in = i.dim() > 0 && i.size(0) > 0 ? i.numel() / i.size(0) : 1;
  const int64_t row_out = o.dim() > 0 && o.size(0) > 0 ? o.numel() / o.size(0) : 1;
  auto counts = std::make_shared<std::vector<int>>(4 * static_cast<size_t>(n));
  int* c = counts->data();
  int64_t s_at = 0, r_at = 0;
  for (int r = 0; r < n; ++r) {
    c[r] = as_count(in_splits[static_cast<size_t>(r)] * row_in);
    c[n + r] = as_count(s_at);
    s_at += c[r];
    c[2 * n + r] = as_count(out_splits[static_cast<size_t>(r)] * row_out);
    c[3 * n + r] = as_count(r_at);
    r_at += c[2 * n + r];
  }
  std::vector<MpiWork::Start> steps = {[=](MPI_Request* r) {
    int* k = counts->data();
    return MPI_Ialltoallv(i.data_ptr(), k, k + n, type, o.data_ptr(), k + 2 * n, k + 3 * n, type, MPI_COMM_WORLD, r);
  }};
  // Uneven splits differ by rank by design: compared are the kind, the type and the rank count.
  return collective("all_to_all", &i, -static_cast<int64_t>(n), -1, {i, o}, std::move(steps), "MPI_Ialltoallv");
}

c10::intrusive_ptr<compat::Work> MpiBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const at::Tensor& t = the_tensor(tensors, "send");
  const MPI_Datatype type = datatype(t, "send");
  ++seq_;  // not compared (point to point), but numbered as the runtime numbers it
  std::vector<MpiWork::Start> steps = {
      [=](MPI_Request* r) { return MPI_Isend(t.data_ptr(), as_count(t.numel()), type, dst, tag, MPI_COMM_WORLD, r); }};
  return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{t}, std::move(steps), "MPI_Isend");
}

c10::intrusive_ptr<compat::Work> MpiBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  const at::Tensor& t = the_tensor(tensors, "recv");
  const MPI_Datatype type = datatype(t, "recv");
  ++seq_;  // not compared (point to point), but numbered as the runtime numbers it
  std::vector<MpiWork::Start> steps = {
      [=](MPI_Request* r) { return MPI_Irecv(t.data_ptr(), as_count(t.numel()), type, src, tag, MPI_COMM_WORLD, r); }};
  return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{t}, std::move(steps), "MPI_Irecv");
}

c10::intrusive_ptr<compat::Work> MpiBackend::barrier(const c10d::BarrierOptions& /*opts*/) {
  std::vector<MpiWork::Start> steps = {[](MPI_Request* r) { return MPI_Ibarrier(MPI_COMM_WORLD, r); }};
  return collective("barrier", nullptr, 0, -1, {}, std::move(steps), "MPI_Ibarrier");
}

}  // namespace ddplab::dist

#endif  // DDPLAB_HAVE_MPI

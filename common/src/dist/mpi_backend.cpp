#include "mpi_backend.h"

#ifdef DDPLAB_HAVE_MPI

#include <mpi.h>
#include <sched.h>

#include <cstdlib>
#include <functional>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "ddplab/error.h"

namespace ddplab::dist {
namespace {

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
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
  using Start = std::function<int(MPI_Request*)>;  ///< starts one MPI call, returns its error code

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

}  // namespace

void mpi_init_for(int rank, int size) {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMIX_RANK") == nullptr) {
      throw ConfigError(
          "--backend mpi: this process was not started by mpirun (no OMPI_COMM_WORLD_SIZE): Open MPI starts the "
          "ranks and wires their shared memory, e.g. mpirun -n 2 PROGRAM ... --backend mpi (docs/concepts/"
          "launching.md); ddplab launch, torchrun and srun go with --backend gloo");
    }
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
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

MpiBackend::MpiBackend(int rank, int size) : compat::Backend(rank, size) { mpi_init_for(rank, size); }

MpiBackend::~MpiBackend() = default;

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
  return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{t}, std::move(steps), "MPI_Ibcast");
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
  return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{t}, std::move(steps), "MPI_Iallreduce");
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
  return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{in, all}, std::move(steps), "MPI_Iallgather",
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
    return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{i, o}, std::move(steps), "MPI_Ialltoall");
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
  return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{i, o}, std::move(steps), "MPI_Ialltoallv");
}

c10::intrusive_ptr<compat::Work> MpiBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const at::Tensor& t = the_tensor(tensors, "send");
  const MPI_Datatype type = datatype(t, "send");
  std::vector<MpiWork::Start> steps = {
      [=](MPI_Request* r) { return MPI_Isend(t.data_ptr(), as_count(t.numel()), type, dst, tag, MPI_COMM_WORLD, r); }};
  return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{t}, std::move(steps), "MPI_Isend");
}

c10::intrusive_ptr<compat::Work> MpiBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  const at::Tensor& t = the_tensor(tensors, "recv");
  const MPI_Datatype type = datatype(t, "recv");
  std::vector<MpiWork::Start> steps = {
      [=](MPI_Request* r) { return MPI_Irecv(t.data_ptr(), as_count(t.numel()), type, src, tag, MPI_COMM_WORLD, r); }};
  return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{t}, std::move(steps), "MPI_Irecv");
}

c10::intrusive_ptr<compat::Work> MpiBackend::barrier(const c10d::BarrierOptions& /*opts*/) {
  std::vector<MpiWork::Start> steps = {[](MPI_Request* r) { return MPI_Ibarrier(MPI_COMM_WORLD, r); }};
  return c10::make_intrusive<MpiWork>(std::vector<at::Tensor>{}, std::move(steps), "MPI_Ibarrier");
}

}  // namespace ddplab::dist

#endif  // DDPLAB_HAVE_MPI

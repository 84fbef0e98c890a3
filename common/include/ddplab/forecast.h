// The scaling forecast of lab 09 (`ddplab forecast`): the ring model of an all-reduce fitted to
// `ddplab bench allreduce`, the compute of one rank read from a one-rank run, and from both the
// step time, throughput, efficiency and cost of a data-parallel job at any world size, for each
// rung of the gradient-sync ladder and each interconnect of a sourced link table
// (common/links.toml). docs/walkthroughs/lab09_capstone.md shows it next to measured runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddplab::forecast {

/// The ring model of one interconnect (nccl-tests doc/PERFORMANCE.md; NCCL's own tuning model has
/// this form): a ring all-reduce of S bytes over n ranks takes 2(n-1) a + 2(n-1)/n S/B.
struct Ring {
  double latency_s = 0;    ///< a: one step of the ring
  double bytes_per_s = 0;  ///< B: per rank and direction (the bus bandwidth an all-reduce reaches)
};

/// A ring all-reduce of `bytes` over n ranks: 2(n-1) a + 2(n-1)/n bytes/B; 0 for n = 1.
double allreduce_seconds(const Ring& ring, int n, double bytes);
/// A ring all-gather of `bytes_per_rank` from each of n ranks: (n-1) a + (n-1) bytes_per_rank/B.
double allgather_seconds(const Ring& ring, int n, double bytes_per_rank);

/// One all-reduce timing, e.g. a row of `ddplab bench allreduce --json`.
struct Timing {
  double bytes = 0;
  double seconds = 0;
};

/// The fitted model and how well it fits.
struct Fit {
  Ring ring;
  int ranks = 0;                     ///< the world size the timings were taken at
  double median_relative_error = 0;  ///< |model - measured| / measured over the timings
  double worst_relative_error = 0;
  double worst_bytes = 0;  ///< the size where the model misses most
  /// Not empty when the timings do not make a line with a positive latency and bandwidth (small
  /// messages as slow as large ones on a loaded machine): how a and B were taken instead.
  std::string fallback;
};

/// The ring model that best fits all-reduce timings taken at world size n >= 2: t = c0 + c1 S
/// minimising the sum of relative errors |model - t| / t (so the microsecond small messages weigh
/// as much as the large ones, and one outlier - a 64 KiB call that happened to be fast - does not
/// pull the line; iteratively reweighted least squares), a = c0 / (2(n-1)), B = 2(n-1)/n / c1.
/// When that line has a latency or a per-byte term that is not positive (the timings hardly grow
/// with the size, as on a machine where a small collective costs as much as a megabyte), a is the
/// median time of the messages up to 4 KiB over 2(n-1) and B the largest message's bus bandwidth,
/// and `fallback` says so. Throws ConfigError for fewer than two distinct sizes or n < 2.
Fit fit_ring(const std::vector<Timing>& timings, int n);

/// The timings of `ddplab bench allreduce --json FILE` and the world size they were taken at.
/// Throws ConfigError naming the file for anything missing or malformed.
std::pair<std::vector<Timing>, int> load_allreduce_json(const std::string& path);

/// One interconnect of the link table.
struct Link {
  std::string name;       ///< e.g. "nvlink-v100"
  std::string describes;  ///< one line
  Ring ring;
  std::string latency_source, bandwidth_source;
  int max_devices = 0;    ///< the most devices one such domain joins (NVLink: one node); 0: any
  bool estimate = false;  ///< derived from sourced figures rather than read or measured
};

/// Every [[link]] of a TOML link table; `source` names it in errors, which give its line and key.
std::vector<Link> parse_links(const std::string& text, const std::string& source);
/// The kit's table, common/links.toml, compiled into the runtime.
const std::vector<Link>& kit_links();
inline constexpr const char* kKitLinks = "the kit's link table (common/links.toml)";
/// `path`'s table, or the kit's when `path` is empty.
std::vector<Link> links_from(const std::string& path);
/// The link named `name`; a ConfigError listing the table's links if there is none.
const Link& find_link(const std::vector<Link>& links, const std::string& name);

/// What one rank computes in a step: the part that grows with the batch (forward, backward,
/// waiting for data) and the part that does not (the optimizer over every parameter, the loop).
struct Compute {
  double per_sample_s = 0;           ///< forward + backward + data wait, per sample
  double backward_per_sample_s = 0;  ///< the backward part of it: what overlap can hide behind
  double per_step_s = 0;             ///< optimizer and the rest of the step
  double step_seconds(int64_t batch) const { return per_sample_s * static_cast<double>(batch) + per_step_s; }
};

/// The compute of one rank from the report of a one-rank run (its phases and step median: the
/// median step split in the proportions of the phase totals). Throws ConfigError if the report
/// is not of one rank or lacks the phases.
Compute compute_from_report(const nlohmann::json& report);
/// A device known only by its throughput at `batch` (e.g. the seeds' V100: 3,500 samples/s at
/// batch 256): all of it per sample, two thirds of it backward (a backward pass costs about twice
/// the forward's FLOPs).
Compute compute_from_throughput(double samples_per_s);

/// The sparse rung's own work on a rank, besides its collectives: finding the rows a step touched
/// (dist::touched_rows, a scan of each table's dense gradient), and adding each rank's rows back
/// into it and averaging them (dist::average_rows_).
struct SparseWork {
  double scan_s = 0;      ///< per step, every table
  double per_rank_s = 0;  ///< per step and rank whose rows are added, every table
};

/// The gradients one step synchronises: every parameter's size (in parameters() order) and, for
/// the sparse rung, the embedding tables (as the runtime's SparseSync finds them) with the rows a
/// batch of one rank touches; plus the job's own small collectives each step (lab 09's template
/// all-reduces its stop flags every step: a SIGTERM on any rank, rank 0's budget alarm).
///
/// `row_sparse`: under the sparse rung the tables' gradients arrive row-sparse, as with the kit's
/// one-pass Adam (`--adam fused`, DeepFMOptions::sparse_gradients): the rung then searches no dense
/// gradient, and every table's rows travel together in two all-gathers (the per-table row counts,
/// then the packed row ids and rows); its own work is `row_sparse_work`.
struct Model {
  std::vector<std::vector<int64_t>> shapes;  ///< float32 parameters, parameters() order
  double rows_touched = 0;                   ///< distinct table rows in one rank's batch
  double lookups = 0;                        ///< row ids in one rank's batch, repeats included
  int64_t control_allreduces = 0;            ///< 8-byte all-reduces a step besides the gradients'
  SparseWork sparse_work;                    ///< the sparse rung's local work (measure_sparse_work)
  bool row_sparse = false;                   ///< the sparse rung on row-sparse gradients (see above)
  SparseWork row_sparse_work;                ///< its local work (measure_row_sparse_work)
  int64_t parameters() const;
  double gradient_bytes() const;
};
/// DeepFM at `embedding_dim` (the course's model), rows_touched left 0.
Model deepfm_model(int64_t embedding_dim);
/// The sparse rung's local work for `model`'s tables at its rows_touched, timed on this machine
/// with the runtime's operations (the median of `reps`).
SparseWork measure_sparse_work(const Model& model, int reps = 5);
/// The row-sparse rung's local work for `model`'s tables at its rows_touched and lookups, timed on
/// this machine by running the runtime's sparse rung itself on row-sparse gradients over a stand-in
/// communicator whose every rank holds this rank's rows (at 2 and at 4 ranks: per_rank_s is what
/// each further rank adds, scan_s the rest; the medians of `reps`). Every rank's rows being the same
/// rows, the result lists k rows rather than up to n k: a slight underestimate of its building.
SparseWork measure_row_sparse_work(const Model& model, int reps = 5);

/// The embedding rows of a rank's batch: distinct, and looked up (repeats included).
struct BatchRows {
  double distinct = 0;
  double lookups = 0;
};
/// The means over `batches` batches of `batch` samples of the data set's training split, in the
/// order of epoch 0's shuffle with `seed`.
BatchRows measure_batch_rows(const std::string& data_dir, int64_t batch, uint64_t seed, int batches = 8);

/// The rungs the forecast models: dense all-reduce of DDP's buckets after backward, the same
/// overlapped with backward, and the runtime's sparse rung (rows of the tables by all-gather).
enum class Rung { kBucketed, kOverlap, kSparse };
/// "bucketed", "overlap", "sparse" (the --sync names); ConfigError otherwise.
Rung parse_rung(const std::string& name);
const char* rung_name(Rung r);

/// One world size's forecast.
struct StepForecast {
  int ranks = 0;
  int64_t batch = 0;         ///< per rank
  double compute_s = 0;      ///< a rank's compute in one step
  double comm_s = 0;         ///< all the step's collectives, back to back
  double exposed_s = 0;      ///< of it, what the step waits for (overlap hides the rest)
  double step_s = 0;         ///< compute + exposed
  double samples_per_s = 0;  ///< unique samples of the job
  double efficiency = 0;     ///< samples_per_s / (ranks x one rank's samples/s without communication)
  int64_t collectives = 0;   ///< per step
  double bytes = 0;          ///< payload per rank per step
  std::string note;          ///< e.g. which table went dense
};

/// Where the ranks run. A GPU computes while its links move the gradients; a CPU rank with a core
/// of its own has no spare core for Gloo's threads to progress an overlapped all-reduce, and ranks
/// that outnumber the cores take turns at the work: compute and the collectives' copies and sums
/// (their bandwidth terms), not their latency (waiting takes no core).
struct Machine {
  double slowdown = 1.0;      ///< ranks / cores when the ranks outnumber the cores, else 1
  bool overlap_hides = true;  ///< communication progresses while backward runs
  /// This machine's, for a job of `ranks` one-thread ranks on `cores` cores.
  static Machine cpu(int ranks, int cores);
};

/// The forecast of a data-parallel step at `ranks` ranks of `batch` samples each on `machine`.
/// Bucketed/overlap: DDP's buckets (1 MiB first, then 25 MiB, reverse parameter order); overlap
/// exposes max(the last bucket, everything - backward) when the machine lets it hide. Sparse: the
/// other parameters bucketed, and per table an all-gather of the row count, the row ids (int64)
/// and the rows, or the table's all-reduce when the rows of all ranks could pass half of it
/// (SparseSync's rule), plus its local work; with `model.row_sparse`, one all-gather of every
/// table's row count and one of all tables' rows, each row with its 4-byte id (the tables that
/// would pass half all-reduced as before), plus the row-sparse work. Then the model's control
/// all-reduces.
StepForecast predict(const Model& model, const Compute& compute, const Ring& ring, int ranks, int64_t batch, Rung rung,
                     const Machine& machine = {});

/// Dollars of one epoch of `epoch_samples` at the forecast's throughput on `ranks` devices at
/// `usd_per_device_hour`.
double epoch_usd(const StepForecast& f, double epoch_samples, double usd_per_device_hour);

/// |predicted - measured| / measured.
double relative_error(double predicted, double measured);

}  // namespace ddplab::forecast

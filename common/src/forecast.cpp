#include "ddplab/forecast.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>
#include <torch/torch.h>

#include "ddplab/data/loader.h"
#include "ddplab/deepfm.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/error.h"
#include "ddplab/links_toml.h"
#include "toml_entries.h"
#include "ddplab/timer.h"

namespace ddplab::forecast {

namespace {

/// The buckets of `shapes` under the runtime's assignment (dist::assign_buckets), as byte counts in
/// the order they are reduced. Placeholder tensors of the right shapes: only sizes matter.
std::vector<double> bucket_bytes(const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<torch::Tensor> params;
  for (const auto& s : shapes) params.push_back(torch::empty(s, torch::kFloat32));
  std::vector<double> out;
  for (const auto& b : dist::assign_buckets(params)) out.push_back(static_cast<double>(b.bytes));
  return out;
}

/// SparseSync's test for an embedding table (BucketOptions::sparse_min_rows).
bool is_table(const std::vector<int64_t>& s) { return s.size() == 2 && s[0] >= dist::BucketOptions{}.sparse_min_rows; }

}  // namespace

double allreduce_seconds(const Ring& ring, int n, double bytes) {
  if (n <= 1) return 0;
  const double steps = 2.0 * (n - 1);
  return steps * ring.latency_s + steps / n * bytes / ring.bytes_per_s;
}

double allgather_seconds(const Ring& ring, int n, double bytes_per_rank) {
  if (n <= 1) return 0;
  return (n - 1) * (ring.latency_s + bytes_per_rank / ring.bytes_per_s);
}

Fit fit_ring(const std::vector<Timing>& timings, int n) {
  if (n < 2) throw ConfigError(fmt::format("the ring model needs timings of 2 or more ranks, not {}", n));
  std::set<double> sizes;
  for (const auto& t : timings) {
    if (!(t.seconds > 0) || t.bytes < 0) {
      throw ConfigError(fmt::format("an all-reduce timing of {} bytes took {} s: not a timing", t.bytes, t.seconds));
    }
    sizes.insert(t.bytes);
  }
  if (sizes.size() < 2) throw ConfigError("the ring model needs all-reduce timings of at least two sizes");
  // t = c0 + c1 S minimising sum |model - t| / t: iteratively reweighted least squares, starting
  // from least squares of the relative error (weights 1/t^2), then weights 1/(t^2 |relative
  // error|) so that each point counts by its relative error's size rather than its square.
  std::vector<double> w(timings.size());
  for (size_t i = 0; i < timings.size(); ++i) w[i] = 1.0 / (timings[i].seconds * timings[i].seconds);
  double c0 = 0, c1 = 0;
  for (int iteration = 0; iteration < 100; ++iteration) {
    double sw = 0, sws = 0, swss = 0, swt = 0, swst = 0;
    for (size_t i = 0; i < timings.size(); ++i) {
      const auto& t = timings[i];
      sw += w[i];
      sws += w[i] * t.bytes;
      swss += w[i] * t.bytes * t.bytes;
      swt += w[i] * t.seconds;
      swst += w[i] * t.bytes * t.seconds;
    }
    const double det = sw * swss - sws * sws;
    c0 = (swt * swss - sws * swst) / det;
    c1 = (sw * swst - sws * swt) / det;
    for (size_t i = 0; i < timings.size(); ++i) {
      const auto& t = timings[i];
      const double e = std::abs(c0 + c1 * t.bytes - t.seconds) / t.seconds;
      w[i] = 1.0 / (t.seconds * t.seconds * std::max(e, 1e-9));
    }
  }
  Fit f;
  f.ranks = n;
  if (c0 > 0 && c1 > 0) {
    f.ring.latency_s = c0 / (2.0 * (n - 1));
    f.ring.bytes_per_s = 2.0 * (n - 1) / n / c1;
  } else {
    // No line with a positive latency and bandwidth: each term from the sizes it dominates.
    std::vector<double> small;
    const Timing* largest = &timings.front();
    for (const auto& t : timings) {
      if (t.bytes <= 4096) small.push_back(t.seconds);
      if (t.bytes > largest->bytes) largest = &t;
    }
    if (small.empty())
      small.push_back(std::min_element(timings.begin(), timings.end(), [](auto& a, auto& b) {
                        return a.bytes < b.bytes;
                      })->seconds);
    f.ring.latency_s = median(small) / (2.0 * (n - 1));
    f.ring.bytes_per_s = 2.0 * (n - 1) / n * largest->bytes / largest->seconds;
    f.fallback = fmt::format(
        "the timings make no line with a positive latency and bandwidth (fit: {:.3g} s + {:.3g} s a byte): a from the "
        "median of the messages up to 4 KiB, B from the largest ({:.0f} B)",
        c0, c1, largest->bytes);
  }
  std::vector<double> errors;
  for (const auto& t : timings) {
    const double e = relative_error(allreduce_seconds(f.ring, n, t.bytes), t.seconds);
    errors.push_back(e);
    if (e > f.worst_relative_error) {
      f.worst_relative_error = e;
      f.worst_bytes = t.bytes;
    }
  }
  f.median_relative_error = median(errors);
  return f;
}

std::pair<std::vector<Timing>, int> load_allreduce_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the all-reduce timings", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  if (j.value("benchmark", "") != "allreduce" || !j.contains("ranks") || !j.contains("rows")) {
    throw ConfigError(
        fmt::format("{}: not the output of `ddplab bench allreduce --json` (benchmark, ranks, rows)", path));
  }
  std::vector<Timing> out;
  size_t i = 0;
  for (const auto& r : j.at("rows")) {
    if (!r.contains("bytes") || !r.contains("seconds")) {
      throw ConfigError(fmt::format("{}: rows[{}] lacks bytes or seconds", path, i));
    }
    out.push_back({r.at("bytes").get<double>(), r.at("seconds").get<double>()});
    ++i;
  }
  return {out, j.at("ranks").get<int>()};
}

// ---- the link table ----

std::vector<Link> parse_links(const std::string& text, const std::string& source) {
  toml::table root;
  std::vector<Link> links;
  std::set<std::string> names;
  for (const auto& entry : toml_util::toml_entries(root, text, source, "link")) {
    const toml::table* t = entry.first;
    const int line = entry.second;
    auto str = [&](const char* key) { return toml_util::toml_string(*t, key, source, line, "link"); };
    Link l;
    l.name = str("name");
    l.describes = str("describes");
    l.latency_source = str("latency_source");
    l.bandwidth_source = str("bandwidth_source");
    toml_util::toml_known_keys(*t,
                               {"name", "describes", "latency_us", "latency_source", "gb_per_s", "bandwidth_source",
                                "max_devices", "estimate"},
                               source, fmt::format("link '{}'", l.name));
    auto positive = [&](const char* key) {
      const auto v = (*t)[key].value<double>();
      if (!v || !(*v > 0)) {
        throw ConfigError(fmt::format("{}:{}: link '{}': {} must be a number > 0", source, line, l.name, key));
      }
      return *v;
    };
    l.ring.latency_s = positive("latency_us") * 1e-6;
    l.ring.bytes_per_s = positive("gb_per_s") * 1e9;
    const auto max_devices = (*t)["max_devices"].value<int64_t>();
    if (!max_devices || *max_devices < 0) {
      throw ConfigError(
          fmt::format("{}:{}: link '{}': max_devices must be a whole number >= 0 (0: any)", source, line, l.name));
    }
    l.max_devices = static_cast<int>(*max_devices);
    const auto estimate = (*t)["estimate"].value<bool>();
    if (!estimate)
      throw ConfigError(fmt::format("{}:{}: link '{}': needs `estimate = true|false`", source, line, l.name));
    l.estimate = *estimate;
    if (!names.insert(l.name).second) {
      throw ConfigError(fmt::format("{}:{}: link '{}' is listed twice", source, line, l.name));
    }
    links.push_back(std::move(l));
  }
  return links;
}

const std::vector<Link>& kit_links() {
  static const std::vector<Link> table = parse_links(detail::kLinksToml, kKitLinks);
  return table;
}

std::vector<Link> links_from(const std::string& path) {
  if (path.empty()) return kit_links();
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the link table", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_links(text.str(), path);
}

const Link& find_link(const std::vector<Link>& links, const std::string& name) {
  for (const auto& l : links) {
    if (l.name == name) return l;
  }
  std::vector<std::string> names;
  for (const auto& l : links) names.push_back(l.name);
  throw ConfigError(fmt::format("no link '{}' (the table has: {})", name, fmt::join(names, ", ")));
}

// ---- compute and model ----

Compute compute_from_report(const nlohmann::json& report) {
  if (report.value("world_size", 0) != 1) {
    throw ConfigError(fmt::format("the compute of one rank comes from a one-rank run; this report is of {} ranks",
                                  report.value("world_size", 0)));
  }
  const auto& ph = report.at("phases");
  for (const char* key : {"wall", "forward", "backward", "data_wait", "step_median", "steps"}) {
    if (!ph.contains(key)) throw ConfigError(fmt::format("the run report's phases lack '{}'", key));
  }
  const double wall = ph.at("wall").get<double>();
  const double steps = ph.at("steps").get<double>();
  const double batch = report.at("config").at("batch").get<double>();
  if (!(wall > 0) || steps < 1 || batch < 1) throw ConfigError("the run report has no timed steps");
  const double fwd = ph.at("forward").get<double>(), bwd = ph.at("backward").get<double>();
  const double data = ph.at("data_wait").get<double>();
  // The median step, split in the proportions of the phase totals (the first steps are slower).
  const double median_step = ph.at("step_median").get<double>();
  const double scale = median_step / (wall / steps);
  Compute c;
  c.per_sample_s = (fwd + bwd + data) / steps * scale / batch;
  c.backward_per_sample_s = bwd / steps * scale / batch;
  c.per_step_s = std::max(0.0, median_step - c.per_sample_s * batch);
  return c;
}

Compute compute_from_throughput(double samples_per_s) {
  if (!(samples_per_s > 0)) throw ConfigError(fmt::format("a device's throughput must be > 0, not {}", samples_per_s));
  Compute c;
  c.per_sample_s = 1.0 / samples_per_s;
  c.backward_per_sample_s = c.per_sample_s * 2.0 / 3.0;
  return c;
}

int64_t Model::parameters() const {
  int64_t n = 0;
  for (const auto& s : shapes) {
    int64_t k = 1;
    for (int64_t d : s) k *= d;
    n += k;
  }
  return n;
}

double Model::gradient_bytes() const { return 4.0 * static_cast<double>(parameters()); }

Model deepfm_model(int64_t embedding_dim) {
  torch::NoGradGuard no_grad;
  DeepFMOptions o;
  o.embedding_dim = embedding_dim;
  DeepFM m(o);
  Model out;
  for (const auto& p : m->parameters()) out.shapes.push_back(p.sizes().vec());
  return out;
}

BatchRows measure_batch_rows(const std::string& data_dir, int64_t batch, uint64_t seed, int batches) {
  const data::Dataset ds(data_dir, data::Split::kTrain);
  const auto order = data::shuffled_order(ds.size(), seed, 0);
  const int64_t whole = static_cast<int64_t>(ds.size()) / batch;
  const int64_t count = std::min<int64_t>(batches, whole);
  if (count < 1) {
    throw ConfigError(fmt::format("{}: {} training samples hold no batch of {}", data_dir, ds.size(), batch));
  }
  BatchRows out;
  for (int64_t b = 0; b < count; ++b) {
    const auto x = data::make_batch(ds, order.data() + b * batch, static_cast<size_t>(batch));
    out.distinct += static_cast<double>(std::get<0>(torch::_unique(x.rows)).numel());
    out.lookups += static_cast<double>(x.rows.numel());
  }
  out.distinct /= static_cast<double>(count);
  out.lookups /= static_cast<double>(count);
  return out;
}

SparseWork measure_sparse_work(const Model& model, int reps) {
  torch::NoGradGuard no_grad;
  SparseWork w;
  std::vector<double> scans, adds;
  const auto k = static_cast<int64_t>(model.rows_touched);
  for (int r = 0; r < std::max(1, reps); ++r) {
    double scan = 0, add = 0;
    for (const auto& s : model.shapes) {
      if (!is_table(s)) continue;
      // A gradient with k touched rows, as a step leaves it; SparseSync's operations on it.
      torch::Tensor g = torch::zeros(s);
      const torch::Tensor touched = torch::randperm(s[0], torch::kInt64).narrow(0, 0, std::min(k, s[0]));
      g.index_fill_(0, touched, 1.0F);
      auto t0 = StepTimer::Clock::now();
      const torch::Tensor rows = dist::touched_rows(g);
      const torch::Tensor vals = g.index_select(0, rows);
      g.index_fill_(0, rows, 0.0);
      scan += seconds_since(t0);
      t0 = StepTimer::Clock::now();  // per rank: its rows added, and averaged
      g.index_add_(0, rows, vals);
      dist::average_rows_(g, rows, 2);
      add += seconds_since(t0);
    }
    scans.push_back(scan);
    adds.push_back(add);
  }
  w.scan_s = median(scans);
  w.per_rank_s = median(adds);
  return w;
}

namespace {

/// A stand-in world of `n` ranks that all hold this rank's data: an all-gather copies the input to
/// every slot, an all-reduce sums n copies. Enough to run the sparse rung's own work at n ranks
/// without a transport (measure_row_sparse_work); its other collectives are never called.
class Mirror final : public dist::Communicator {
 public:
  explicit Mirror(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  void allreduce(torch::Tensor& t) override { t.mul_(n_); }
  void broadcast(torch::Tensor&, int) override {}
  void allgather(std::vector<torch::Tensor>& out, const torch::Tensor& in) override {
    for (auto& o : out) o.copy_(in);
  }
  void all_to_all(torch::Tensor&, const torch::Tensor&) override { unused("all_to_all"); }
  void all_to_all(torch::Tensor&, const torch::Tensor&, const std::vector<int64_t>&,
                  const std::vector<int64_t>&) override {
    unused("all_to_all");
  }
  void reduce_scatter(torch::Tensor&, const torch::Tensor&) override { unused("reduce_scatter"); }
  void send(const torch::Tensor&, int, int) override { unused("send"); }
  void recv(torch::Tensor&, int, int) override { unused("recv"); }
  void barrier() override {}

 private:
  [[noreturn]] static void unused(const char* op) {
    throw Error(fmt::format("forecast: the sparse rung's measurement called {}, which its stand-in world lacks", op));
  }
  int n_;
};

}  // namespace

SparseWork measure_row_sparse_work(const Model& model, int reps) {
  const auto k = std::max<int64_t>(1, static_cast<int64_t>(model.rows_touched));
  const auto lookups = std::max<int64_t>(k, static_cast<int64_t>(model.lookups));
  std::vector<torch::Tensor> tables, ids, vals;
  for (const auto& s : model.shapes) {
    if (!is_table(s)) continue;
    tables.push_back(torch::zeros(s).requires_grad_(true));
    // A backward's row-sparse gradient: `lookups` ids over k distinct rows, uncoalesced.
    const torch::Tensor distinct = torch::randperm(s[0], torch::kInt64).narrow(0, 0, std::min(k, s[0]));
    const torch::Tensor repeats =
        distinct.index_select(0, torch::randint(distinct.size(0), {lookups - k}, torch::kInt64));
    const torch::Tensor all = torch::cat({distinct, repeats});
    ids.push_back(all.index_select(0, torch::randperm(all.size(0), torch::kInt64)).view({1, -1}));
    vals.push_back(torch::randn({all.size(0), s[1]}));
  }
  if (tables.empty()) return {};
  // One sync per world size, kept across the repetitions as a job keeps its sync across steps: its
  // accumulators size their slot tables (a table's rows) on first use, which a job pays once.
  Mirror two(2), four(4);
  const auto sync2 = dist::make_grad_sync(dist::SyncStrategy::kSparse, two, tables);
  const auto sync4 = dist::make_grad_sync(dist::SyncStrategy::kSparse, four, tables);
  auto seconds_of = [&](dist::GradSync& sync) {
    for (size_t t = 0; t < tables.size(); ++t) {
      tables[t].mutable_grad() = torch::sparse_coo_tensor(ids[t], vals[t], tables[t].sizes());
    }
    const auto t0 = StepTimer::Clock::now();
    sync.before_backward();
    sync.finish();
    return seconds_since(t0);
  };
  (void)seconds_of(*sync2);  // first use, not timed
  (void)seconds_of(*sync4);
  std::vector<double> at2, at4;
  for (int r = 0; r < std::max(1, reps); ++r) {
    at2.push_back(seconds_of(*sync2));
    at4.push_back(seconds_of(*sync4));
  }
  SparseWork w;
  w.per_rank_s = std::max(0.0, (median(at4) - median(at2)) / 2);
  w.scan_s = std::max(0.0, median(at2) - 2 * w.per_rank_s);
  return w;
}

// ---- the forecast ----

Rung parse_rung(const std::string& name) {
  if (name == "bucketed") return Rung::kBucketed;
  if (name == "overlap") return Rung::kOverlap;
  if (name == "sparse") return Rung::kSparse;
  throw ConfigError(fmt::format("--sync {}: the forecast models bucketed, overlap and sparse", name));
}

const char* rung_name(Rung r) {
  switch (r) {
    case Rung::kBucketed: return "bucketed";
    case Rung::kOverlap: return "overlap";
    case Rung::kSparse: return "sparse";
  }
  return "?";
}

Machine Machine::cpu(int ranks, int cores) {
  Machine m;
  m.slowdown = std::max(1.0, static_cast<double>(ranks) / std::max(1, cores));
  m.overlap_hides = ranks < cores;  // a spare core for the communication threads
  return m;
}

StepForecast predict(const Model& model, const Compute& compute, const Ring& ring, int ranks, int64_t batch, Rung rung,
                     const Machine& machine) {
  if (ranks < 1 || batch < 1) throw ConfigError(fmt::format("a forecast of {} rank(s) at batch {}", ranks, batch));
  StepForecast f;
  f.ranks = ranks;
  f.batch = batch;
  f.compute_s = compute.step_seconds(batch);
  const int n = ranks;
  // The collectives' latency terms (waiting: they take no CPU) and bandwidth terms (on a CPU the
  // copies and sums of the payload), kept apart for ranks that take turns at the cores.
  double latency = 0;
  auto reduce = [&](double bytes) {
    f.comm_s += allreduce_seconds(ring, n, bytes);
    latency += 2.0 * (n - 1) * ring.latency_s;
    f.bytes += bytes;
    ++f.collectives;
  };
  auto gather = [&](double bytes_per_rank) {
    f.comm_s += allgather_seconds(ring, n, bytes_per_rank);
    latency += (n - 1) * ring.latency_s;
    f.bytes += bytes_per_rank;
    ++f.collectives;
  };
  double local = 0;  // the sparse rung's own work: exposed, but not communication
  if (n > 1) {
    if (rung == Rung::kSparse) {
      std::vector<std::vector<int64_t>> dense;
      std::vector<std::vector<int64_t>> tables;
      for (const auto& s : model.shapes) (is_table(s) ? tables : dense).push_back(s);
      for (double b : bucket_bytes(dense)) reduce(b);
      const double k = model.rows_touched;
      const double max_density = dist::BucketOptions{}.sparse_max_density;
      std::vector<std::string> went_dense;
      const SparseWork& work = model.row_sparse ? model.row_sparse_work : model.sparse_work;
      local += work.scan_s;
      bool any_sparse = false;
      if (model.row_sparse && !tables.empty()) gather(8.0 * static_cast<double>(tables.size()));  // the counts
      double packed = 0;  // row-sparse: every table's ids (4 bytes) and rows, in one all-gather
      for (const auto& t : tables) {
        const double rows = static_cast<double>(t[0]), cols = static_cast<double>(t[1]);
        // The row count, always; then the rows, unless all ranks' rows could cover half the table.
        if (!model.row_sparse) gather(8);
        if (k * n > max_density * rows) {
          reduce(rows * cols * 4);
          went_dense.push_back(fmt::format("[{} x {}]", t[0], t[1]));
        } else if (model.row_sparse) {
          packed += k * (1 + cols) * 4;
          any_sparse = true;
        } else {
          gather(k * 8);
          gather(k * cols * 4);
          any_sparse = true;
        }
      }
      if (packed > 0) gather(packed);
      if (any_sparse) local += work.per_rank_s * n;
      if (!went_dense.empty()) {
        f.note = fmt::format("table(s) {} all-reduced densely: {} ranks x {:.0f} rows could pass half of it",
                             fmt::join(went_dense, ", "), n, k);
      }
      f.exposed_s = f.comm_s;
    } else {
      const auto buckets = bucket_bytes(model.shapes);
      for (double b : buckets) reduce(b);
      f.exposed_s = f.comm_s;
      if (rung == Rung::kOverlap && machine.overlap_hides && !buckets.empty()) {
        // The last bucket (the embedding tables, whose gradients are ready last) starts when
        // backward ends; the others hide behind what is left of backward.
        const double last = allreduce_seconds(ring, n, buckets.back());
        const double backward = compute.backward_per_sample_s * static_cast<double>(batch);
        f.exposed_s = std::max(last, f.comm_s - backward);
      }
    }
    for (int64_t i = 0; i < model.control_allreduces; ++i) {
      const double before = f.comm_s;
      reduce(8);
      f.exposed_s += f.comm_s - before;
    }
  }
  // Ranks that outnumber the cores take turns at the work (compute, the sparse rung's own, the
  // collectives' copies and sums); the collectives' latency is waiting and takes no turn.
  if (machine.slowdown != 1.0 && f.comm_s > 0) {
    const double bandwidth = f.comm_s - latency;
    const double shared_comm = latency + bandwidth * machine.slowdown;
    f.exposed_s *= shared_comm / f.comm_s;
    f.comm_s = shared_comm;
  }
  f.compute_s *= machine.slowdown;
  f.exposed_s += local * machine.slowdown;
  f.step_s = f.compute_s + f.exposed_s;
  f.samples_per_s = static_cast<double>(n) * static_cast<double>(batch) / f.step_s;
  const double alone = static_cast<double>(batch) / compute.step_seconds(batch);
  f.efficiency = f.samples_per_s / (static_cast<double>(n) * alone);
  return f;
}

double epoch_usd(const StepForecast& f, double epoch_samples, double usd_per_device_hour) {
  const double hours = epoch_samples / f.samples_per_s / 3600.0;
  return hours * f.ranks * usd_per_device_hour;
}

double relative_error(double predicted, double measured) {
  return measured != 0 ? std::abs(predicted - measured) / std::abs(measured) : std::abs(predicted);
}

}  // namespace ddplab::forecast

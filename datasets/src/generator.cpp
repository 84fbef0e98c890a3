// The ctr-small recipe (shared/workload.md), implemented literally: hash-based counters, Zipf ids,
// log-normal dense counts and labels drawn from a fixed FM "teacher" with a calibrated bias.
// Speed (about 1M samples/s per thread) comes from a guide table over each Zipf CDF, prefetched
// cache-aligned teacher rows and a log1p table, never from changing a number: every value is the
// recipe's, bit for bit, on this platform's libm (the test's literal re-implementation checks).
#include "ddplab/data/generator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <thread>

namespace ddplab::data {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
constexpr double kTwoPi = 6.283185307179586476925286766559;  // 2*pi rounded once, as numpy's 2*np.pi
constexpr double kZipfExponent = 1.1;
constexpr double kDenseMax = 1e6;
constexpr int kFmDim = 8;
constexpr int kCountersPerSample = 64;
constexpr int kLabelCounter = 52;

inline uint64_t mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ULL;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return z;
}

inline double uniform(uint64_t key, uint64_t counter) {
  // (h >> 11) < 2^53 converts exactly; adding 0.5 and scaling by 2^-53 are exact too.
  return (static_cast<double>(mix(key + (counter + 1) * kGolden) >> 11) + 0.5) * 0x1p-53;
}

inline double gaussian(uint64_t key, uint64_t counter) {
  return std::sqrt(-2.0 * std::log(uniform(key, counter))) * std::cos(kTwoPi * uniform(key, counter + 1));
}

inline double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Runs fn(chunk) for chunk in [0, chunks) on up to hardware_concurrency threads. Callers write
// per-chunk results and combine them in chunk order, so results never depend on the thread count.
template <typename Fn>
void parallel_chunks(size_t chunks, Fn fn) {
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t nthreads = std::min(chunks, hw);
  if (nthreads <= 1) {
    for (size_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t c = next++; c < chunks; c = next++) fn(c);
  };
  std::vector<std::thread> pool;
  pool.reserve(nthreads - 1);
  for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

// One field's Zipf table. The id for u is #{j : cdf[j] <= u}, i.e. std::upper_bound. A guide table
// of K = 2^k >= C buckets remembers that count at each bucket's left edge b/K, so a lookup starts
// there and scans forward over the boundaries inside one bucket: at most C/K on average, since u
// is uniform. u*K is exact (a power-of-two scale), so the bucket and hence the result are exact.
// (Tried and dropped, no faster here: K = 4C, and a flag on boundary-free buckets that skips the
// CDF load. What did pay: issuing all 26 guide loads before any scan, see features().)
struct ZipfTable {
  uint32_t card = 0;
  double scale = 0.0;           // K
  std::vector<double> cdf;      // card entries; the last is exactly 1.0
  std::vector<uint16_t> guide;  // K + 1 entries: guide[b] = #{j : cdf[j] <= b / K}

  explicit ZipfTable(uint32_t c) : card(c) {
    static_assert(*std::max_element(kCardinality.begin(), kCardinality.end()) <= 65535, "guide entries are uint16");
    cdf.resize(card);
    double sum = 0.0;
    for (uint32_t j = 0; j < card; ++j) {
      sum += std::pow(static_cast<double>(j + 1), -kZipfExponent);
      cdf[j] = sum;
    }
    for (uint32_t j = 0; j < card; ++j) cdf[j] /= sum;  // the last entry becomes exactly 1.0

    uint32_t buckets = 1;
    while (buckets < card) buckets *= 2;
    scale = static_cast<double>(buckets);
    guide.resize(buckets + 1);
    uint32_t j = 0;
    for (uint32_t b = 0; b <= buckets; ++b) {
      const double edge = static_cast<double>(b) / scale;
      while (j < card && cdf[j] <= edge) ++j;
      guide[b] = static_cast<uint16_t>(j);
    }
  }

  uint16_t entry(double u) const {
    // u01 can round up to exactly 1.0 (once in 2^53): guide has K + 1 entries, so bucket K exists.
    return guide[static_cast<uint32_t>(u * scale)];
  }

  uint32_t resolve(uint16_t start, double u) const {
    uint32_t j = start;
    while (j < card && cdf[j] <= u) ++j;
    return std::min(j, card - 1);  // the recipe's min(): only u = 1.0 reaches card
  }

  uint32_t lookup(double u) const { return resolve(entry(u), u); }
};

// teacher_logit with one fixed order of summation; the public Teacher and the generator's
// cache-aligned copy both call it, so they agree bit for bit.
inline double teacher_logit(const double* w1, const double* v, const double* wd, const uint32_t* ids,
                            const double* dense_log1p) {
  double linear = 0.0;
  double sum[kFmDim] = {};
  double sum_sq[kFmDim] = {};
  for (int f = 0; f < kNumSparse; ++f) {
    const size_t row = kOffset[f] + ids[f];
    linear += w1[row];
    const double* vr = v + row * kFmDim;
    for (int k = 0; k < kFmDim; ++k) {
      sum[k] += vr[k];
      sum_sq[k] += vr[k] * vr[k];
    }
  }
  for (int j = 0; j < kNumDense; ++j) linear += wd[j] * (dense_log1p[j] - 1.5);
  double fm = 0.0;
  for (int k = 0; k < kFmDim; ++k) fm += sum[k] * sum[k] - sum_sq[k];
  return linear + 0.5 * fm;
}

}  // namespace

uint64_t mix64(uint64_t z) { return mix(z); }

uint64_t stream_key(uint64_t seed, uint64_t stream) {
  return mix(mix(seed * kGolden + stream) + 0xD1B54A32D192ED03ULL);
}

double u01(uint64_t key, uint64_t counter) { return uniform(key, counter); }

double normal(uint64_t key, uint64_t counter) { return gaussian(key, counter); }

double Teacher::raw_logit(const uint32_t* ids, const double* dense_log1p) const {
  return teacher_logit(w1.data(), v.data(), wd, ids, dense_log1p);
}

double Teacher::raw_logit(const Sample& s) const {
  // float(log1p(x)) is within half a float ulp of log1p(x): for x <= 1e6 that moves expm1 by
  // less than 0.48, so rounding recovers the integer x_j exactly (the generator test checks
  // every x in [0, 1e6]).
  double xlog[kNumDense];
  for (int j = 0; j < kNumDense; ++j) {
    xlog[j] = std::log1p(std::nearbyint(std::expm1(static_cast<double>(s.dense[j]))));
  }
  return raw_logit(s.ids, xlog);
}

double Teacher::logit(const Sample& s) const { return raw_logit(s) + bias; }

struct Generator::Impl {
  uint64_t seed;
  uint64_t sample_key;
  std::vector<ZipfTable> zipf;
  Teacher teacher;
  // A copy of teacher.v whose 8-double rows each fill exactly one 64-byte cache line (a vector's
  // buffer is only 16-byte aligned, so its rows straddle two): one miss per row, not two.
  std::vector<double> v_storage;
  const double* v_aligned = nullptr;
  // log1p of the small integer counts, which are nearly all of them (x >= 1024 needs z > 3.95).
  static constexpr int kLog1pTable = 1024;
  double log1p_small[kLog1pTable];

  void init_tables() {
    for (int x = 0; x < kLog1pTable; ++x) log1p_small[x] = std::log1p(static_cast<double>(x));
    const size_t n = teacher.v.size();
    v_storage.assign(n + 8, 0.0);
    const auto addr = reinterpret_cast<uintptr_t>(v_storage.data());
    v_aligned = v_storage.data() + ((64 - addr % 64) % 64) / sizeof(double);
    std::copy(teacher.v.begin(), teacher.v.end(), v_storage.begin() + (v_aligned - v_storage.data()));
  }

  // Ids and dense inputs of sample i; xlog gets the double log1p(x_j) the teacher uses.
  void features(uint64_t i, Sample& s, double* xlog) const {
    const uint64_t base = i * kCountersPerSample;
    // All 26 guide loads first, free of branches, so their cache misses overlap.
    double u[kNumSparse];
    uint16_t e[kNumSparse];
    for (int f = 0; f < kNumSparse; ++f) {
      u[f] = uniform(sample_key, base + f);
      e[f] = zipf[f].entry(u[f]);
    }
    for (int f = 0; f < kNumSparse; ++f) {
      s.ids[f] = zipf[f].resolve(e[f], u[f]);
      // The teacher reads these rows last; fetching them now hides the misses behind the dense math.
      const size_t row = kOffset[f] + s.ids[f];
      __builtin_prefetch(v_aligned + row * kFmDim);
      __builtin_prefetch(teacher.w1.data() + row);
    }
    for (int j = 0; j < kNumDense; ++j) {
      const double z = gaussian(sample_key, base + kNumSparse + 2 * j);
      const double x = std::min(std::floor(std::exp(1.0 + 1.5 * z)), kDenseMax);  // exp > 0: no lower clip
      xlog[j] = x < kLog1pTable ? log1p_small[static_cast<int>(x)] : std::log1p(x);
      s.dense[j] = static_cast<float>(xlog[j]);
    }
  }

  double raw_logit(const Sample& s, const double* xlog) const {
    return teacher_logit(teacher.w1.data(), v_aligned, teacher.wd, s.ids, xlog);
  }

  void sample(uint64_t i, Sample& s) const {
    double xlog[kNumDense];
    features(i, s, xlog);
    const double p = sigmoid(raw_logit(s, xlog) + teacher.bias);
    s.label = uniform(sample_key, i * kCountersPerSample + kLabelCounter) < p ? 1u : 0u;
  }

  void build_teacher() {
    // Parameter p is normal(key, 2p): w1 for p < R, then v row-major, then wd.
    const uint64_t key = stream_key(seed, kStreamTeacher);
    const uint64_t rows = kTotalRows;
    teacher.w1.resize(rows);
    teacher.v.resize(rows * kFmDim);
    const uint64_t total = rows + rows * kFmDim;
    constexpr uint64_t kChunk = 65536;
    parallel_chunks((total + kChunk - 1) / kChunk, [&](size_t c) {
      const uint64_t end = std::min(total, (c + 1) * kChunk);
      for (uint64_t p = c * kChunk; p < end; ++p) {
        const double n = gaussian(key, 2 * p);
        if (p < rows) {
          teacher.w1[p] = 0.15 * n;
        } else {
          teacher.v[p - rows] = 0.12 * n;
        }
      }
    });
    for (int j = 0; j < kNumDense; ++j) teacher.wd[j] = 0.20 * gaussian(key, 2 * (total + j));
  }

  void calibrate_bias() {
    // Calibration samples need only the features: teacher_logit does not depend on the label.
    std::vector<double> raw(kBiasSamples);
    constexpr uint64_t kChunk = 4096;
    const size_t chunks = (kBiasSamples + kChunk - 1) / kChunk;
    parallel_chunks(chunks, [&](size_t c) {
      Sample s;
      double xlog[kNumDense];
      const uint64_t end = std::min<uint64_t>(kBiasSamples, (c + 1) * kChunk);
      for (uint64_t k = c * kChunk; k < end; ++k) {
        features(kBiasBase + k, s, xlog);
        raw[k] = raw_logit(s, xlog);
      }
    });
    // 80 bisection steps; each step's mean is summed per fixed chunk, then over chunks in order.
    std::vector<double> partial(chunks);
    double lo = -20.0;
    double hi = 20.0;
    for (int step = 0; step < 80; ++step) {
      const double mid = 0.5 * (lo + hi);
      parallel_chunks(chunks, [&](size_t c) {
        double sum = 0.0;
        const uint64_t end = std::min<uint64_t>(kBiasSamples, (c + 1) * kChunk);
        for (uint64_t k = c * kChunk; k < end; ++k) sum += sigmoid(raw[k] + mid);
        partial[c] = sum;
      });
      double sum = 0.0;
      for (double p : partial) sum += p;
      if (sum / static_cast<double>(kBiasSamples) > 0.25) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    teacher.bias = std::round(0.5 * (lo + hi) * 1e4) / 1e4;
  }
};

Generator::Generator(uint64_t seed) : impl_(std::make_unique<Impl>()) {
  impl_->seed = seed;
  impl_->sample_key = stream_key(seed, kStreamSample);
  impl_->zipf.reserve(kNumSparse);
  for (int f = 0; f < kNumSparse; ++f) impl_->zipf.emplace_back(kCardinality[f]);
  impl_->build_teacher();
  impl_->init_tables();
  impl_->calibrate_bias();
}

Generator::~Generator() = default;

uint64_t Generator::seed() const noexcept { return impl_->seed; }

const Teacher& Generator::teacher() const noexcept { return impl_->teacher; }

void Generator::sample(uint64_t index, Sample& out) const { impl_->sample(index, out); }

void Generator::fill(uint64_t first, uint64_t count, Sample* out) const {
  for (uint64_t k = 0; k < count; ++k) impl_->sample(first + k, out[k]);
}

const std::vector<double>& Generator::zipf_cdf(int field) const { return impl_->zipf.at(field).cdf; }

uint32_t Generator::zipf_id(int field, double u) const { return impl_->zipf.at(field).lookup(u); }

}  // namespace ddplab::data

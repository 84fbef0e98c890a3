// Criteo TSV import and export (criteo.h). The import streams each file through zlib (which reads
// plain files as they are), cuts blocks at line ends, parses each block's lines on all threads
// and appends the samples in line order to the shard writers, so the output is the same whatever
// the number of threads.
#include "ddplab/data/criteo.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "ddplab/data/error.h"

namespace ddplab::data {

namespace fs = std::filesystem;

namespace {

const char* field_name(int column) {  // column 0: the label, 1..13: I1..I13, 14..39: C1..C26
  static const std::array<std::string, kCriteoFields> names = [] {
    std::array<std::string, kCriteoFields> n;
    n[0] = "label";
    for (int j = 0; j < kNumDense; ++j) n[1 + j] = fmt::format("I{}", j + 1);
    for (int f = 0; f < kNumSparse; ++f) n[1 + kNumDense + f] = fmt::format("C{}", f + 1);
    return n;
  }();
  return names[static_cast<size_t>(column)].c_str();
}

std::string bad_field(int column, std::string_view text, const char* what) {
  return fmt::format("field {} (column {}): '{}' {}", field_name(column), column + 1,
                     text.size() > 40 ? std::string(text.substr(0, 40)) + "..." : std::string(text), what);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

double elapsed(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// One input file read through zlib in blocks of whole lines.
class LineBlocks {
 public:
  explicit LineBlocks(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) throw DataError(path, std::string("cannot open: ") + std::strerror(errno));
    gzbuffer(file_, 1 << 20);
  }
  ~LineBlocks() {
    if (file_ != nullptr) gzclose(file_);
  }
  LineBlocks(const LineBlocks&) = delete;
  LineBlocks& operator=(const LineBlocks&) = delete;

  /// The next block of whole lines (the last line may lack its newline); false at the end.
  bool next(std::string& block) {
    block.swap(carry_);
    carry_.clear();
    while (!eof_) {
      const size_t have = block.size();
      block.resize(have + kChunk);
      const int n = gzread(file_, block.data() + have, static_cast<unsigned>(kChunk));
      if (n < 0) {
        int err = 0;
        const char* msg = gzerror(file_, &err);
        throw DataError(path_, fmt::format("read failed: {}", err == Z_ERRNO ? std::strerror(errno) : msg));
      }
      block.resize(have + static_cast<size_t>(n));
      if (n == 0) {
        eof_ = true;
        break;
      }
      const size_t last_nl = block.rfind('\n');
      if (last_nl != std::string::npos && last_nl >= have) {
        carry_.assign(block, last_nl + 1, std::string::npos);
        block.resize(last_nl + 1);
        return true;
      }
    }
    return !block.empty();
  }
  const std::string& path() const noexcept { return path_; }

 private:
  static constexpr size_t kChunk = size_t{16} << 20;
  std::string path_;
  gzFile file_ = nullptr;
  std::string carry_;
  bool eof_ = false;
};

/// The lines of a block: [start, end) offsets without the newline.
std::vector<std::pair<size_t, size_t>> split_lines(const std::string& block) {
  std::vector<std::pair<size_t, size_t>> lines;
  size_t pos = 0;
  while (pos < block.size()) {
    const void* nl = std::memchr(block.data() + pos, '\n', block.size() - pos);
    const size_t end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - block.data()) : block.size();
    lines.emplace_back(pos, end);
    pos = end + 1;
  }
  return lines;
}

/// Runs fn(begin, end) over [0, n) in `threads` contiguous parts; rethrows the first exception.
template <typename Fn>
void parallel_ranges(size_t n, int threads, Fn fn) {
  const size_t parts = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(threads), n));
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(parts);
  for (size_t p = 0; p < parts; ++p) {
    const size_t a = n * p / parts, b = n * (p + 1) / parts;
    auto run = [&, a, b, p] {
      try {
        fn(a, b);
      } catch (...) {
        errors[p] = std::current_exception();
      }
    };
    if (p + 1 == parts) {
      run();
    } else {
      pool.emplace_back(run);
    }
  }
  for (auto& t : pool) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

/// A parsed block: each line's record or its error.
struct ParsedBlock {
  std::vector<CriteoRecord> records;
  std::vector<std::string> errors;  ///< per line; empty when the line is good
};

ParsedBlock parse_block(const std::string& block, int threads) {
  const auto lines = split_lines(block);
  ParsedBlock out;
  out.records.resize(lines.size());
  out.errors.resize(lines.size());
  parallel_ranges(lines.size(), threads, [&](size_t a, size_t b) {
    for (size_t i = a; i < b; ++i) {
      out.errors[i] =
          parse_criteo_line(std::string_view(block).substr(lines[i].first, lines[i].second - lines[i].first),
                            out.records[i]);
    }
  });
  return out;
}

/// Per field, hash -> id for the vocabulary map.
using Vocabulary = std::array<std::unordered_map<uint32_t, uint32_t>, kNumSparse>;

Vocabulary build_vocabulary(const std::array<std::unordered_map<uint32_t, uint64_t>, kNumSparse>& counts,
                            uint64_t min_count) {
  Vocabulary v;
  for (int f = 0; f < kNumSparse; ++f) {
    std::vector<std::pair<uint64_t, uint32_t>> seen;  // (count, hash)
    for (const auto& kv : counts[static_cast<size_t>(f)]) {
      if (kv.second >= min_count) seen.emplace_back(kv.second, kv.first);
    }
    std::sort(seen.begin(), seen.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    const size_t keep = std::min<size_t>(seen.size(), kCardinality[static_cast<size_t>(f)] - 1);
    for (size_t i = 0; i < keep; ++i) v[static_cast<size_t>(f)][seen[i].second] = static_cast<uint32_t>(i + 1);
  }
  return v;
}

}  // namespace

std::string parse_criteo_line(std::string_view line, CriteoRecord& out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  out = CriteoRecord{};
  size_t pos = 0;
  for (int col = 0; col < kCriteoFields; ++col) {
    const size_t tab = line.find('\t', pos);
    const bool last = col + 1 == kCriteoFields;
    if (!last && tab == std::string_view::npos) {
      return fmt::format("expected {} tab-separated fields, found {}", kCriteoFields, col + 1);
    }
    if (last && tab != std::string_view::npos) {
      size_t n = kCriteoFields;
      for (size_t p = tab; p != std::string_view::npos; p = line.find('\t', p + 1)) ++n;
      return fmt::format("expected {} tab-separated fields, found {}", kCriteoFields, n);
    }
    const std::string_view v = line.substr(pos, last ? std::string_view::npos : tab - pos);
    pos = tab + 1;
    if (col == 0) {
      if (v != "0" && v != "1") return bad_field(col, v, "is not 0 or 1");
      out.label = v == "1" ? 1 : 0;
    } else if (col <= kNumDense) {
      int64_t x = 0;
      if (!v.empty()) {
        size_t i = v[0] == '-' ? 1 : 0;
        if (i == v.size()) return bad_field(col, v, "is not an integer");
        bool big = false;
        for (; i < v.size(); ++i) {
          if (v[i] < '0' || v[i] > '9') return bad_field(col, v, "is not an integer");
          if (!big) {
            x = x * 10 + (v[i] - '0');
            big = x > kMaxDenseCount;
          }
        }
        if (v[0] == '-') {
          x = 0;  // DLRM: negative counts as 0
        } else if (big) {
          x = kMaxDenseCount;
          ++out.clamped;
        }
      }
      out.dense[col - 1] = static_cast<float>(std::log1p(static_cast<double>(x)));
    } else {
      uint32_t h = 0;
      if (v.size() > 8) return bad_field(col, v, "is not a 32-bit hexadecimal hash");
      for (char c : v) {
        const int d = hex_digit(c);
        if (d < 0) return bad_field(col, v, "is not a 32-bit hexadecimal hash");
        h = (h << 4) | static_cast<uint32_t>(d);
      }
      out.hashes[col - 1 - kNumDense] = h;
    }
  }
  return {};
}

std::string format_criteo_line(const Sample& s) {
  std::string line = s.label ? "1" : "0";
  for (int j = 0; j < kNumDense; ++j) {
    line += fmt::format("\t{}", static_cast<int64_t>(std::nearbyint(std::expm1(static_cast<double>(s.dense[j])))));
  }
  for (int f = 0; f < kNumSparse; ++f) line += fmt::format("\t{:08x}", s.ids[f]);
  return line;
}

CriteoImportResult import_criteo(const CriteoImportOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& dir = opts.out_dir;
  if (dir.empty()) throw DataError("(no directory)", "import: the output directory is empty");
  if (opts.inputs.empty()) throw DataError(dir, "import: no input files");
  if (opts.shard_size == 0) throw DataError(dir, "import: shard size must be at least 1");
  if (!(opts.test_fraction >= 0.0 && opts.test_fraction < 1.0)) {
    throw DataError(dir, fmt::format("import: the test fraction must be in [0, 1), got {}", opts.test_fraction));
  }
  const int threads =
      opts.threads > 0 ? opts.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  CriteoImportResult r;
  r.threads = threads;

  // Pass 1: count the lines (to place the test split) and, for the vocabulary, the hashes.
  std::array<std::unordered_map<uint32_t, uint64_t>, kNumSparse> counts;
  uint64_t total = 0;
  std::string block;
  for (const auto& path : opts.inputs) {
    LineBlocks in(path);
    while (in.next(block)) {
      if (opts.map == CategoricalMap::kVocabulary) {
        const ParsedBlock parsed = parse_block(block, threads);
        for (size_t i = 0; i < parsed.records.size(); ++i) {
          if (!parsed.errors[i].empty()) continue;  // reported in pass 2 with its line
          for (int f = 0; f < kNumSparse; ++f) {
            const uint32_t h = parsed.records[i].hashes[f];
            if (h != 0) ++counts[static_cast<size_t>(f)][h];
          }
        }
        total += parsed.records.size();
      } else {
        total += static_cast<uint64_t>(std::count(block.begin(), block.end(), '\n'));
        if (block.back() != '\n') ++total;
      }
    }
  }
  if (total == 0) throw DataError(opts.inputs.front(), "no lines to import");
  const uint64_t train_lines =
      total - static_cast<uint64_t>(std::floor(static_cast<double>(total) * opts.test_fraction));
  const Vocabulary vocab =
      opts.map == CategoricalMap::kVocabulary ? build_vocabulary(counts, opts.min_count) : Vocabulary{};

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw DataError(dir, "cannot create the directory: " + ec.message());
  const fs::path meta_path = fs::path(dir) / "meta.json";
  fs::remove(meta_path, ec);  // an interrupted import must never look complete
  if (ec) throw DataError(meta_path.string(), "cannot remove the old file: " + ec.message());
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if ((name.rfind("train-", 0) == 0 || name.rfind("test-", 0) == 0) && entry.path().extension() == ".bin") {
      fs::remove(entry.path(), ec);  // shards of an earlier data set would confuse a reader
    }
  }

  // Pass 2: parse, map and write in line order.
  r.meta.seed = 0;
  r.meta.shard_size = opts.shard_size;
  std::unique_ptr<ShardWriter> writer;
  std::vector<Sample> pending;  // of the open shard, appended in one write per block
  Split current = Split::kTrain;
  uint64_t in_split = 0, clicks[2] = {0, 0};
  auto flush = [&] {
    if (!pending.empty()) writer->append(pending.data(), pending.size());
    pending.clear();
  };
  auto close_shard = [&] {
    if (!writer) return;
    flush();
    writer->commit();
    (current == Split::kTrain ? r.meta.train_shards : r.meta.test_shards)
        .push_back(fs::path(writer->path()).filename().string());
    writer.reset();
  };
  uint64_t line_no = 0;  // over the whole stream
  for (const auto& path : opts.inputs) {
    LineBlocks in(path);
    uint64_t file_line = 0;
    while (in.next(block)) {
      r.bytes += block.size();
      const auto tp = std::chrono::steady_clock::now();
      const ParsedBlock parsed = parse_block(block, threads);
      r.parse_seconds += elapsed(tp);
      for (size_t i = 0; i < parsed.records.size(); ++i, ++line_no) {
        ++file_line;
        if (!parsed.errors[i].empty()) {
          if (!opts.skip_malformed) throw DataError(path, fmt::format("line {}: {}", file_line, parsed.errors[i]));
          ++r.skipped;
          continue;
        }
        const CriteoRecord& rec = parsed.records[i];
        Sample s{};
        s.label = rec.label;
        std::memcpy(s.dense, rec.dense, sizeof(s.dense));
        for (int f = 0; f < kNumSparse; ++f) {
          const uint32_t h = rec.hashes[f];
          if (opts.map == CategoricalMap::kHash) {
            s.ids[f] = h % kCardinality[static_cast<size_t>(f)];
          } else {
            const auto& m = vocab[static_cast<size_t>(f)];
            const auto it = m.find(h);
            s.ids[f] = h == 0 || it == m.end() ? 0 : it->second;
          }
        }
        r.clamped += static_cast<uint64_t>(rec.clamped);
        const Split split = line_no < train_lines ? Split::kTrain : Split::kTest;
        if (split != current) {
          close_shard();
          current = split;
          in_split = 0;
        }
        if (!writer) {
          const auto& names = current == Split::kTrain ? r.meta.train_shards : r.meta.test_shards;
          const uint64_t base = current == Split::kTrain ? 0 : kTestBase;
          writer = std::make_unique<ShardWriter>(
              (fs::path(dir) / fmt::format("{}-{:05d}.bin", split_name(current), names.size())).string(), r.meta.seed,
              base + in_split);
        }
        pending.push_back(s);
        ++in_split;
        ++(current == Split::kTrain ? r.meta.train_count : r.meta.test_count);
        clicks[current == Split::kTrain ? 0 : 1] += s.label;
        if (writer->count() + pending.size() == opts.shard_size) close_shard();
      }
      if (writer) flush();
    }
  }
  r.lines = line_no;
  close_shard();
  if (r.meta.train_count == 0) throw DataError(dir, "import: no training samples (every line was skipped?)");
  r.meta.train_click_rate = static_cast<double>(clicks[0]) / static_cast<double>(r.meta.train_count);
  r.meta.test_click_rate =
      r.meta.test_count ? static_cast<double>(clicks[1]) / static_cast<double>(r.meta.test_count) : 0.0;
  write_metadata(dir, r.meta);
  r.seconds = elapsed(t0);
  r.mb_per_s_per_thread = r.parse_seconds > 0 ? static_cast<double>(r.bytes) / (r.parse_seconds * threads) / 1e6 : 0.0;
  return r;
}

uint64_t export_tsv(const std::string& dir, Split split, const std::string& out_path, uint64_t limit) {
  const Dataset ds(dir, split);
  const uint64_t n = limit > 0 ? std::min(limit, ds.size()) : ds.size();
  const std::string tmp = out_path + ".tmp";
  const fs::path parent = fs::path(out_path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) throw DataError(parent.string(), "cannot create the directory: " + ec.message());
  }
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw DataError(tmp, std::string("cannot create: ") + std::strerror(errno));
    std::string buf;
    for (uint64_t i = 0; i < n; ++i) {
      buf += format_criteo_line(ds[i]);
      buf += '\n';
      if (buf.size() > (size_t{1} << 20) || i + 1 == n) {
        out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
        buf.clear();
      }
    }
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw DataError(tmp, std::string("write failed: ") + std::strerror(errno));
    }
  }
  std::error_code ec;
  fs::rename(tmp, out_path, ec);
  if (ec) throw DataError(out_path, "cannot rename the temporary into place: " + ec.message());
  return n;
}

}  // namespace ddplab::data

// The shard file format and meta.json: atomic writers and a validating, memory-mapped reader.
// Every failure names the file, and for a bad byte in a shard the offset, so a student who
// finds a corrupt data set knows which file to delete and where it went wrong.
#include "ddplab/data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "ddplab/data/error.h"

namespace ddplab::data {

namespace fs = std::filesystem;

namespace {

constexpr char kMetaFile[] = "meta.json";
constexpr char kMetaFormat[] = "ddplab.ctr-small";
constexpr int kMetaVersion = 1;

std::string errno_text(int err) { return std::strerror(err); }

// The pieces of an atomic write: the data goes to `path` + ".tmp", which is fsynced and renamed
// over `path`, so readers see the old file or the complete new one, never a prefix. Every error
// removes the temporary and throws a DataError naming `path`.
int create_temporary(const std::string& path) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw DataError(path, "cannot create " + tmp + ": " + errno_text(err));
  }
  return fd;
}

[[noreturn]] void abandon_temporary(const std::string& path, int fd, const std::string& what, int err) {
  if (fd >= 0) ::close(fd);
  ::unlink((path + ".tmp").c_str());
  throw DataError(path, what + " " + path + ".tmp: " + errno_text(err));
}

// pwrite()s all n bytes at `offset`, retrying short writes.
void write_at(const std::string& path, int fd, const void* data, size_t n, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) abandon_temporary(path, fd, "cannot write", w < 0 ? errno : EIO);
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void commit_temporary(const std::string& path, int fd) {
  if (::fsync(fd) != 0) abandon_temporary(path, fd, "cannot fsync", errno);
  if (::close(fd) != 0) abandon_temporary(path, -1, "cannot close", errno);
  const std::string tmp = path + ".tmp";
  if (::rename(tmp.c_str(), path.c_str()) != 0) abandon_temporary(path, -1, "cannot rename", errno);
  // Persist the rename itself; best effort, since some file systems refuse fsync on a directory.
  const fs::path parent = fs::path(path).parent_path();
  const int dfd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// The checks of one header field against the value this build writes.
void expect_field(const std::string& path, uint64_t offset, const char* name, uint32_t got, uint32_t want) {
  if (got != want) {
    throw DataError(path, offset,
                    std::string(name) + " is " + std::to_string(got) + ", expected " + std::to_string(want));
  }
}

template <typename T>
T get_key(const nlohmann::json& j, const std::string& file, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) throw DataError(file, std::string("missing key \"") + key + "\"");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw DataError(file, std::string("bad value for key \"") + key + "\": " + e.what());
  }
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

// ---- meta.json ----

Metadata read_metadata(const std::string& dir) {
  const std::string file = (fs::path(dir) / kMetaFile).string();
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError(file, "cannot open (no data set here? run `ddplab data gen --out " + dir + "`)");
  std::stringstream buf;
  buf << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(buf.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError(file, e.byte, std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) throw DataError(file, "malformed: the top level is not a JSON object");
  const auto format = get_key<std::string>(j, file, "format");
  if (format != kMetaFormat) {
    throw DataError(file, "key \"format\" is \"" + format + "\", expected \"" + kMetaFormat + "\"");
  }
  Metadata m;
  m.version = get_key<int>(j, file, "version");
  if (m.version != kMetaVersion) {
    throw DataError(file, "key \"version\" is " + std::to_string(m.version) + ", this build reads " +
                              std::to_string(kMetaVersion));
  }
  m.seed = get_key<uint64_t>(j, file, "seed");
  m.train_count = get_key<uint64_t>(j, file, "train_count");
  m.test_count = get_key<uint64_t>(j, file, "test_count");
  m.shard_size = get_key<uint64_t>(j, file, "shard_size");
  m.teacher_bias = get_key<double>(j, file, "teacher_bias");
  m.teacher_test_auc = get_key<double>(j, file, "teacher_test_auc");
  m.teacher_test_logloss = get_key<double>(j, file, "teacher_test_logloss");
  m.train_click_rate = get_key<double>(j, file, "train_click_rate");
  m.test_click_rate = get_key<double>(j, file, "test_click_rate");
  m.train_shards = get_key<std::vector<std::string>>(j, file, "train_shards");
  m.test_shards = get_key<std::vector<std::string>>(j, file, "test_shards");
  if (m.shard_size == 0) throw DataError(file, "key \"shard_size\" is 0");
  // Shards live next to meta.json: a path would let a data set reach outside its directory.
  const std::pair<const char*, const std::vector<std::string>*> lists[] = {{"train_shards", &m.train_shards},
                                                                           {"test_shards", &m.test_shards}};
  for (const auto& [key, names] : lists) {
    for (const std::string& name : *names) {
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        throw DataError(file, std::string("key \"") + key + "\": \"" + name + "\" is not a plain file name");
      }
    }
  }
  return m;
}

void write_metadata(const std::string& dir, const Metadata& meta) {
  nlohmann::ordered_json j;
  j["format"] = kMetaFormat;
  j["version"] = meta.version;
  j["seed"] = meta.seed;
  j["train_count"] = meta.train_count;
  j["test_count"] = meta.test_count;
  j["shard_size"] = meta.shard_size;
  j["record_size"] = sizeof(Sample);  // informative: the shard headers are authoritative
  j["teacher_bias"] = meta.teacher_bias;
  j["teacher_test_auc"] = meta.teacher_test_auc;
  j["teacher_test_logloss"] = meta.teacher_test_logloss;
  j["train_click_rate"] = meta.train_click_rate;
  j["test_click_rate"] = meta.test_click_rate;
  j["train_shards"] = meta.train_shards;
  j["test_shards"] = meta.test_shards;
  const std::string text = j.dump(2) + "\n";
  const std::string file = (fs::path(dir) / kMetaFile).string();
  const int fd = create_temporary(file);
  write_at(file, fd, text.data(), text.size(), 0);
  commit_temporary(file, fd);
}

// ---- shards ----

ShardWriter::ShardWriter(const std::string& path, uint64_t seed, uint64_t first_index)
    : path_(path), fd_(create_temporary(path)) {
  std::memcpy(header_.magic, kShardMagic, sizeof(header_.magic));
  header_.version = kShardVersion;
  header_.record_size = sizeof(Sample);
  header_.num_dense = kNumDense;
  header_.num_sparse = kNumSparse;
  header_.first_index = first_index;
  header_.count = 0;
  header_.seed = seed;
  header_.checksum = fnv1a64(nullptr, 0);
  header_.reserved = 0;
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink((path_ + ".tmp").c_str());
  }
}

void ShardWriter::append(const Sample* records, uint64_t count) {
  if (fd_ < 0) throw DataError(path_, "append after commit or after an error");
  const size_t bytes = static_cast<size_t>(count * sizeof(Sample));
  header_.checksum = fnv1a64(records, bytes, header_.checksum);
  const int fd = std::exchange(fd_, -1);  // a failed write closes it and removes the temporary
  write_at(path_, fd, records, bytes, sizeof(ShardHeader) + header_.count * sizeof(Sample));
  fd_ = fd;
  header_.count += count;
}

void ShardWriter::commit() {
  if (fd_ < 0) throw DataError(path_, "commit after commit or after an error");
  const int fd = std::exchange(fd_, -1);  // from here on, the helpers own the cleanup
  write_at(path_, fd, &header_, sizeof(header_), 0);
  commit_temporary(path_, fd);
}

void write_shard(const std::string& path, uint64_t seed, uint64_t first_index, const Sample* records, uint64_t count) {
  ShardWriter w(path, seed, first_index);
  w.append(records, count);
  w.commit();
}

ShardReader::ShardReader(const std::string& path, bool verify_checksum, bool in_memory) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw DataError(path, "cannot open: " + errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError(path, "cannot stat: " + errno_text(err));
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < sizeof(ShardHeader)) {
    ::close(fd);
    throw DataError(path, file_size,
                    "file ends inside the " + std::to_string(sizeof(ShardHeader)) + "-byte header (truncated)");
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_SHARED, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) throw DataError(path, "cannot mmap: " + errno_text(map_err));
  map_ = map;
  map_size_ = file_size;
  header_ = static_cast<const ShardHeader*>(map_);
  records_ = reinterpret_cast<const Sample*>(static_cast<const char*>(map_) + sizeof(ShardHeader));

  // From here on a throw must unmap: the destructor does not run for a failed constructor.
  try {
    const ShardHeader& h = *header_;
    if (std::memcmp(h.magic, kShardMagic, sizeof(h.magic)) != 0) {
      throw DataError(path, offsetof(ShardHeader, magic), "bad magic (not a ddplab shard)");
    }
    expect_field(path, offsetof(ShardHeader, version), "version", h.version, kShardVersion);
    expect_field(path, offsetof(ShardHeader, record_size), "record_size", h.record_size, sizeof(Sample));
    expect_field(path, offsetof(ShardHeader, num_dense), "num_dense", h.num_dense, kNumDense);
    expect_field(path, offsetof(ShardHeader, num_sparse), "num_sparse", h.num_sparse, kNumSparse);
    const uint64_t data_bytes = file_size - sizeof(ShardHeader);
    // count * 160 could overflow for a garbage count; compare by division instead.
    const uint64_t max_records = data_bytes / sizeof(Sample);
    if (h.count > max_records) {
      throw DataError(path, file_size,
                      "truncated: the header declares " + std::to_string(h.count) +
                          " records, the data ends here after " + std::to_string(max_records) + " records" +
                          (data_bytes % sizeof(Sample) ? " and part of one" : ""));
    }
    const uint64_t expected_size = sizeof(ShardHeader) + h.count * sizeof(Sample);
    if (file_size != expected_size) {
      throw DataError(path, expected_size,
                      std::to_string(file_size - expected_size) + " trailing bytes after the " +
                          std::to_string(h.count) + " records the header declares");
    }
    if (verify_checksum) {
      verify_records();
      this->verify_checksum();
    }
    if (in_memory) {
      // Whole 2 MiB pages, so that the kernel can back all of it with huge pages.
      constexpr size_t kHuge = size_t{2} << 20;
      const size_t size = (file_size + kHuge - 1) / kHuge * kHuge;
      void* copy = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (copy == MAP_FAILED) {
        const int err = errno;
        throw DataError(path,
                        "cannot allocate " + std::to_string(size) + " bytes to hold it in memory: " + errno_text(err));
      }
      ::madvise(copy, size, MADV_HUGEPAGE);  // advice: without it (or THP disabled) 4 KiB pages
      std::memcpy(copy, map_, file_size);
      ::munmap(map_, map_size_);
      map_ = copy;
      map_size_ = size;
      in_memory_ = true;
      header_ = static_cast<const ShardHeader*>(map_);
      records_ = reinterpret_cast<const Sample*>(static_cast<const char*>(map_) + sizeof(ShardHeader));
    }
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

ShardReader::~ShardReader() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      header_(std::exchange(o.header_, nullptr)),
      records_(std::exchange(o.records_, nullptr)),
      in_memory_(std::exchange(o.in_memory_, false)) {}

ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
  if (this != &o) {
    if (map_ != nullptr) ::munmap(map_, map_size_);
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    header_ = std::exchange(o.header_, nullptr);
    records_ = std::exchange(o.records_, nullptr);
    in_memory_ = std::exchange(o.in_memory_, false);
  }
  return *this;
}

void ShardReader::verify_checksum() const {
  const uint64_t got = fnv1a64(records_, header_->count * sizeof(Sample));
  if (got != header_->checksum) {
    char msg[128];
    std::snprintf(msg, sizeof(msg), "checksum mismatch: header 0x%016llx, records hash to 0x%016llx (corrupt data)",
                  static_cast<unsigned long long>(header_->checksum), static_cast<unsigned long long>(got));
    throw DataError(path_, msg);
  }
}

void ShardReader::verify_records() const {
  // A dense input is log1p(x) with 0 <= x <= 1e6 (workload.md); anything else is corruption.
  const float dense_max = static_cast<float>(std::log1p(1e6));
  for (uint64_t i = 0; i < header_->count; ++i) {
    const Sample& s = records_[i];
    const uint64_t at = sizeof(ShardHeader) + i * sizeof(Sample);
    if (s.label > 1) {
      throw DataError(path_, at + offsetof(Sample, label),
                      "record " + std::to_string(i) + ": label " + std::to_string(s.label) + " is not 0 or 1");
    }
    for (int j = 0; j < kNumDense; ++j) {
      const float x = s.dense[j];
      if (!(x >= 0.0f && x <= dense_max)) {  // also catches NaN
        throw DataError(path_, at + offsetof(Sample, dense) + j * sizeof(float),
                        "record " + std::to_string(i) + ": dense[" + std::to_string(j) + "] = " + std::to_string(x) +
                            " is outside [0, log1p(1e6)]");
      }
    }
    for (int f = 0; f < kNumSparse; ++f) {
      if (s.ids[f] >= kCardinality[f]) {
        throw DataError(path_, at + offsetof(Sample, ids) + f * sizeof(uint32_t),
                        "record " + std::to_string(i) + ": id " + std::to_string(s.ids[f]) + " of field " +
                            std::to_string(f) + " is not below its cardinality " + std::to_string(kCardinality[f]));
      }
    }
  }
}

}  // namespace ddplab::data

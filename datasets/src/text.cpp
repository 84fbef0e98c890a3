// Criteo-layout text read in place (text.h).
#include "ddplab/data/text.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "ddplab/data/criteo.h"
#include "ddplab/data/error.h"

namespace ddplab::data {

TextFile::TextFile(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(path_, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError(path_, std::string("cannot stat: ") + std::strerror(err));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    if (map == MAP_FAILED) throw DataError(path_, std::string("cannot mmap: ") + std::strerror(err));
    ::madvise(map, size_, MADV_SEQUENTIAL);
    data_ = static_cast<const char*>(map);
  } else {
    ::close(fd);
  }
}

TextFile::~TextFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

std::string_view TextFile::read(uint64_t begin, uint64_t end) const {
  if (begin > size_) {
    throw DataError(path_, begin, fmt::format("read past the end of the file ({} bytes)", size_));
  }
  end = std::clamp(end, begin, size_);
  bytes_read_.fetch_add(end - begin, std::memory_order_relaxed);
  return {data_ + begin, static_cast<size_t>(end - begin)};
}

std::string_view TextFile::read_line(uint64_t start) const {
  if (start >= size_) throw DataError(path_, start, fmt::format("no line starts here: the file has {} bytes", size_));
  const char* p = data_ + start;
  const auto* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(size_ - start)));
  const size_t len = nl ? static_cast<size_t>(nl - p) : static_cast<size_t>(size_ - start);
  bytes_read_.fetch_add(len + (nl ? 1 : 0), std::memory_order_relaxed);
  return {p, len};
}

uint64_t TextFile::line_number(uint64_t offset) const {
  offset = std::min(offset, size_);
  return 1 + static_cast<uint64_t>(std::count(data_, data_ + offset, '\n'));
}

std::vector<uint64_t> line_starts(const TextFile& file, ByteRange range) {
  range.end = std::min(range.end, file.size());
  if (range.begin >= range.end) return {};
  if (range.begin > 0 && file.read(range.begin - 1, range.begin)[0] != '\n') {
    throw DataError(file.path(), range.begin,
                    "the range does not begin at a line start (the byte before is not '\\n')");
  }
  const std::string_view bytes = file.read(range.begin, range.end);
  std::vector<uint64_t> starts;
  starts.reserve(bytes.size() / 200 + 1);
  size_t pos = 0;
  while (pos < bytes.size()) {
    starts.push_back(range.begin + pos);
    const void* nl = std::memchr(bytes.data() + pos, '\n', bytes.size() - pos);
    if (!nl) break;
    pos = static_cast<size_t>(static_cast<const char*>(nl) - bytes.data()) + 1;
  }
  return starts;
}

Batch parse_text_batch(const TextFile& file, const uint64_t* starts, size_t count) {
  std::vector<Sample> samples(count);
  CriteoRecord rec;
  for (size_t i = 0; i < count; ++i) {
    const std::string_view line = file.read_line(starts[i]);
    std::string problem = parse_criteo_line(line, rec);
    if (!problem.empty()) {
      throw DataError(file.path(), fmt::format("line {}: {}", file.line_number(starts[i]), problem));
    }
    Sample& s = samples[i];
    s.label = rec.label;
    std::memcpy(s.dense, rec.dense, sizeof(s.dense));
    for (int f = 0; f < kNumSparse; ++f) s.ids[f] = rec.hashes[f] % kCardinality[static_cast<size_t>(f)];
  }
  Batch b = make_batch(samples.data(), count, 0);
  b.indices.assign(starts, starts + count);
  return b;
}

}  // namespace ddplab::data

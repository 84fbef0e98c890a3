// Criteo-layout text read in place: a memory-mapped file read through byte ranges (counting the
// bytes read, so a lab can show how much of the file a rank touched), the start of every line of
// a range, and a batch parsed from lines. Lab 08 feeds DeepFM from such text; `ddplab data export
// tsv` writes it and `ddplab data import criteo` converts it once into binary shards.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ddplab/data/loader.h"

namespace ddplab::data {

/// A half-open range of byte offsets [begin, end) of a file.
struct ByteRange {
  uint64_t begin = 0, end = 0;
  uint64_t size() const noexcept { return end > begin ? end - begin : 0; }
  bool operator==(const ByteRange& o) const noexcept { return begin == o.begin && end == o.end; }
};

/// A text file mapped read-only. read() and read_line() are the only ways to its bytes and counts them, so
/// bytes_read() is what this process touched (what a reader without a mapping would have read).
/// Thread-safe.
class TextFile {
 public:
  /// Maps `path`; throws DataError naming it if it cannot be opened or mapped. An empty file is
  /// allowed (no lines).
  explicit TextFile(std::string path);
  ~TextFile();
  TextFile(const TextFile&) = delete;
  TextFile& operator=(const TextFile&) = delete;

  const std::string& path() const noexcept { return path_; }
  uint64_t size() const noexcept { return size_; }
  /// The bytes [begin, min(end, size())); adds their number to bytes_read(). Throws DataError if
  /// begin > size().
  std::string_view read(uint64_t begin, uint64_t end) const;
  /// The line beginning at byte `start` without its newline (a carriage return before it is kept:
  /// the parser ignores it), counting the line and its newline as read. Throws DataError if start >= size().
  std::string_view read_line(uint64_t start) const;
  /// Bytes returned by read() and read_line() so far.
  uint64_t bytes_read() const noexcept { return bytes_read_.load(std::memory_order_relaxed); }
  /// The 1-based number of the line holding byte `offset`, for error messages: counts the line
  /// ends before it without going through read() (so it does not count as reading).
  uint64_t line_number(uint64_t offset) const;

 private:
  std::string path_;
  const char* data_ = nullptr;
  uint64_t size_ = 0;
  mutable std::atomic<uint64_t> bytes_read_{0};
};

/// The start offset of every line that begins in `range` (a line is the bytes up to and including
/// its '\n'; the file's last line may lack it), reading the range once. range.begin must be 0 or
/// follow a '\n' (a line start); throws DataError otherwise.
std::vector<uint64_t> line_starts(const TextFile& file, ByteRange range);

/// Parses the lines beginning at starts[0..count) into a batch, categoricals mapped as `ddplab
/// data import criteo --categoricals hash` maps them (hash mod the field's cardinality: exact for
/// text that `ddplab data export tsv` wrote). The batch's indices are the lines' start offsets.
/// Throws DataError "FILE: line N: field ... " for a malformed line.
Batch parse_text_batch(const TextFile& file, const uint64_t* starts, size_t count);

}  // namespace ddplab::data

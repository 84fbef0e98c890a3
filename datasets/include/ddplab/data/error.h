// datasets/ has its own small error type so it does not reach up into common/ (design.md, Layers).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ddplab::data {

/// Bad or unreadable data: the message always names the file and, where it applies, the byte offset.
class DataError : public std::runtime_error {
 public:
  DataError(const std::string& file, const std::string& what) : std::runtime_error(file + ": " + what), file_(file) {}
  DataError(const std::string& file, uint64_t offset, const std::string& what)
      : std::runtime_error(file + " at byte " + std::to_string(offset) + ": " + what),
        file_(file),
        offset_(offset),
        has_offset_(true) {}
  const std::string& file() const noexcept { return file_; }
  uint64_t offset() const noexcept { return offset_; }
  bool has_offset() const noexcept { return has_offset_; }

 private:
  std::string file_;
  uint64_t offset_ = 0;
  bool has_offset_ = false;
};

}  // namespace ddplab::data

// Test support: a folder of the test's own under the system's temporary folder, removed with it.
// Every test that writes files uses this (as a member, or through the ScratchTest fixture), so a
// test's files never collide with another test's or another ctest process's, and never outlive it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

namespace ddplab::testing {

class ScratchDir {
 public:
  /// ddplab-<purpose>-<pid>-<n> under the temporary folder, made empty; `purpose` defaults to the
  /// running test's suite and name.
  explicit ScratchDir(std::string purpose = "") {
    static std::atomic<int> counter{0};
    if (purpose.empty()) purpose = running_test_name();
    dir_ = std::filesystem::temp_directory_path() /
           ("ddplab-" + purpose + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  /// The path of `name` in the folder (not created).
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  /// Writes `text` (bytes as given) to `name`, making its parent folders; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = dir_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

 private:
  static std::string running_test_name() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    if (info == nullptr) return "test";
    std::string name = std::string(info->test_suite_name()) + "-" + info->name();
    for (char& c : name) {
      if (c == '/') c = '-';  // parameterized tests: Suite/Name/0
    }
    return name;
  }
  std::filesystem::path dir_;
};

/// A fixture whose every test has its own scratch_ folder (path and write name files in it).
class ScratchTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return scratch_.path(name); }
  std::string write(const std::string& name, const std::string& text) const { return scratch_.write(name, text); }
  ScratchDir scratch_;
};

}  // namespace ddplab::testing

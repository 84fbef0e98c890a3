// Error types of the runtime. Every error carries where it happened (rank, file:line) so that a
// message from one of N processes can be traced to its source: "[rank 3] grad_sync.cpp:88: ...".
#pragma once

#include <stdexcept>
#include <string>

namespace ddplab {

/// Base of all ddplab errors. what() is "[rank R] file:line: message" (rank omitted when unknown).
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file = nullptr, int line = 0);
  const std::string& message() const noexcept { return message_; }

 private:
  std::string message_;
};

/// A user-supplied value is wrong (flag, environment variable, config file): names it and its value.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// Thrown by a skeleton's exercise stub. The lab driver reports the exercise as "not attempted"
/// and exits with kExitNotAttempted; the grader scores it 0 without calling it a crash.
class NotImplemented : public Error {
 public:
  /// exercise: the id in the handout and the STUDENT CODE marker, e.g. "01.1".
  explicit NotImplemented(const std::string& exercise, const std::string& what = "");
  const std::string& exercise() const noexcept { return exercise_; }

 private:
  std::string exercise_;
};

/// Process exit codes shared by the labs, the launcher and the grader.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotAttempted = 3;

/// Sets the rank shown in error messages and log lines of this process (-1: none).
void set_process_rank(int rank);
int process_rank();

}  // namespace ddplab

/// Throws ExcType with the current file and line: DDPLAB_THROW(ConfigError, "bad --batch " + v).
#define DDPLAB_THROW(ExcType, msg) throw ExcType((msg), __FILE__, __LINE__)
/// Throws ddplab::Error with file and line unless cond holds.
#define DDPLAB_CHECK(cond, msg)                                    \
  do {                                                             \
    if (!(cond)) throw ::ddplab::Error((msg), __FILE__, __LINE__); \
  } while (0)

// Test helper: ranks as threads, each with its own real Gloo process group over one in-memory
// store (the c10d tests' pattern), so collectives are tested in one process.
#pragma once

#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "ddplab/dist/process_group.h"

namespace ddplab::testing {

/// Runs fn(pg) on `world` threads, one ProcessGroup each; rethrows the first failure. A deadlock
/// shows up as a collective timeout error, not a hung test.
template <typename Fn>
void run_ranks(int world, Fn fn, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::ProcessGroupOptions o;
        o.timeout = timeout;
        dist::ProcessGroup pg(store, r, world, torch::kCPU, o);
        fn(pg);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace ddplab::testing

// Test helper: ranks as threads, each with its own real Gloo process group over one in-memory
// store (the c10d tests' pattern), so collectives are tested in one process.
#pragma once

#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "ddplab/dist/process_group.h"
#include "ddplab/error.h"

namespace ddplab::testing {

/// How much an error thrown on a thread-rank says about the cause of a failed test: a stub's
/// NotImplemented first (the grader reads it as "not attempted"), then any error of the rank's own,
/// last the errors a rank gets because a peer left (its sockets closed as its process group was
/// destroyed while unwinding). Which of these a thread catches first is a race, so run_ranks
/// orders by cause, not by time.
inline int failure_rank_order(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const NotImplemented&) {
    return 0;
  } catch (const std::exception& x) {
    const std::string what = x.what();
    for (const char* peer_left : {"Connection closed by peer", "Connection reset by peer", "Broken pipe"}) {
      if (what.find(peer_left) != std::string::npos) return 2;
    }
    return 1;
  } catch (...) {
    return 1;
  }
}

/// Runs fn(pg) on `world` threads, one ProcessGroup each; rethrows the failure that names the cause
/// (failure_rank_order; the lowest rank among equals). A deadlock shows up as a collective timeout
/// error, not a hung test.
template <typename Fn>
void run_ranks(int world, Fn fn, std::chrono::milliseconds timeout = std::chrono::seconds(30),
               bool idle_gloo_io = false) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::ProcessGroupOptions o;
        o.timeout = timeout;
        // Ranks as threads put several Gloo I/O loops into one process that shares its cores with
        // whatever else runs (ctest -j2, the grader's other jobs): at SCHED_IDLE (the kit's default
        // for a rank process, process_group.h) such a loop can wait behind every busy thread of the
        // machine. These tests check results, not latency: the loops keep the normal class unless a
        // test asks for the kit's default (`idle_gloo_io`; DDPLAB_GLOO_IO overrides either way).
        o.idle_gloo_io = idle_gloo_io;
        dist::ProcessGroup pg(store, r, world, torch::kCPU, o);
        fn(pg);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::exception_ptr cause;
  for (auto& e : errors) {
    if (e && (!cause || failure_rank_order(e) < failure_rank_order(cause))) cause = e;
  }
  if (cause) std::rethrow_exception(cause);
}

}  // namespace ddplab::testing

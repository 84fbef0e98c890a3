// The machine's spare cores, probed before a failed timing check is measured again (contention.h).
#include "ddplab/grader/contention.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace ddplab::grader {
namespace {

using Clock = std::chrono::steady_clock;

/// Integer work the optimizer cannot drop; returns its result so it is used.
uint64_t spin(uint64_t iterations) {
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (uint64_t i = 0; i < iterations; ++i) x = x * 6364136223846793005ULL + (x >> 29) + i;
  return x;
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

/// `threads` threads run `iterations` each, started together; the wall time of the slowest.
double together(int threads, uint64_t iterations, std::atomic<uint64_t>& sink) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      sink.fetch_add(spin(iterations), std::memory_order_relaxed);
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto start = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  return seconds(start, Clock::now());
}

}  // namespace

double parallel_capacity(int threads) {
  threads = std::max(1, threads);
  std::atomic<uint64_t> sink{0};
  // Size the work to ~20 ms on one core: several scheduler time slices, so a core shared with
  // another busy thread shows as half a core.
  uint64_t iterations = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    sink.fetch_add(spin(iterations));
    if (seconds(t0, Clock::now()) >= 0.005 || iterations >= (uint64_t{1} << 36)) break;
    iterations *= 2;
  }
  iterations *= 4;
  std::vector<double> tries;
  for (int k = 0; k < 3; ++k) {
    const double one = together(1, iterations, sink);
    const double all = together(threads, iterations, sink);
    tries.push_back(all > 0 ? threads * one / all : threads);
  }
  std::sort(tries.begin(), tries.end());
  return std::min(static_cast<double>(threads), tries[1]);
}

QuietWait wait_for_quiet_machine(int threads, double share, double max_wait_s, double pause_s,
                                 const std::function<double(int)>& probe, const std::function<void(double)>& sleep,
                                 const std::function<void(const std::string&)>& say) {
  QuietWait w;
  w.capacity = probe(threads);
  w.quiet = w.capacity >= share * threads;
  if (w.quiet) return w;
  say(
      fmt::format("the machine gives {:.1f} of {} cores now (another process or the hypervisor holds the rest): "
                  "waiting up to {:.0f} s for it to be quiet before measuring again",
                  w.capacity, threads, max_wait_s));
  while (!w.quiet && w.waited_s + pause_s <= max_wait_s) {
    sleep(pause_s);
    w.waited_s += pause_s;
    w.capacity = probe(threads);
    w.quiet = w.capacity >= share * threads;
  }
  return w;
}

}  // namespace ddplab::grader

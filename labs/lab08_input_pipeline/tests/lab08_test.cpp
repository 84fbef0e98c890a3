// Lab 08's public tests: the prefetching loader's order, bound, errors and shutdown (08.1), and
// the byte ranges of shard-aware reading (08.2). Each exercise's tests call only its own code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "lab08.h"

#include "ddplab/data/error.h"
#include "scratch_dir.h"

namespace {

namespace fs = std::filesystem;
using lab08::Batch;
using lab08::BatchSource;
using lab08::PrefetchLoader;

/// Batch k holds index k and a tensor [k]. Making batch k takes delay_ms(k), so that with several
/// workers later batches often finish first; batch `throw_at` throws a DataError naming a file and
/// line. Records which threads made batches and how many were started.
class FakeSource final : public BatchSource {
 public:
  FakeSource(int64_t n, std::function<int(int64_t)> delay_ms = nullptr, int64_t throw_at = -1)
      : n_(n), delay_ms_(std::move(delay_ms)), throw_at_(throw_at), made_(static_cast<size_t>(n)) {}
  int64_t num_batches() const override { return n_; }
  Batch make(int64_t k) const override {
    started_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      tids_.insert(::gettid());
      made_.at(static_cast<size_t>(k))++;
    }
    if (delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_(k)));
    if (k == throw_at_)
      throw ddplab::data::DataError("day_0.tsv", fmt::format("line {}: field I3 (column 4)", 100 + k));
    Batch b;
    b.dense = torch::full({1, 1}, static_cast<float>(k));
    b.indices = {static_cast<uint64_t>(k)};
    return b;
  }
  int64_t started() const { return started_.load(); }
  std::set<pid_t> tids() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tids_;
  }
  std::vector<int> made() const {
    std::lock_guard<std::mutex> lock(mu_);
    return made_;
  }

 private:
  int64_t n_;
  std::function<int(int64_t)> delay_ms_;
  int64_t throw_at_;
  mutable std::atomic<int64_t> started_{0};
  mutable std::mutex mu_;
  mutable std::set<pid_t> tids_;
  mutable std::vector<int> made_;
};

/// Delays that make batch k slower than the ones after it in a pattern of 4: 6, 4, 2, 0 ms.
int staggered(int64_t k) { return static_cast<int>(6 - 2 * (k % 4)); }

/// Runs f on a thread and waits up to `seconds` for it; false if it has not returned (it is then
/// left running, detached: a deadlock must not hang the test binary).
bool returns_within(std::function<void()> f, int seconds) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  std::thread([f = std::move(f), done] {
    f();
    done->set_value();
  }).detach();
  return finished.wait_for(std::chrono::seconds(seconds)) == std::future_status::ready;
}

/// Runs f on a thread and waits up to `seconds` for it: true if it returned (an exception it threw
/// is rethrown here, so a stub's NotImplemented reaches the test), false if it still runs (it is
/// then left running, detached, holding what it captured: a hang fails its own test, not the
/// binary). f must own (capture by value) everything it uses.
bool ends_within(std::function<void()> f, int seconds) {
  struct Outcome {
    std::promise<void> done;
    std::exception_ptr error;
  };
  auto outcome = std::make_shared<Outcome>();
  auto finished = outcome->done.get_future();
  std::thread([f = std::move(f), outcome] {
    try {
      f();
    } catch (...) {
      outcome->error = std::current_exception();
    }
    outcome->done.set_value();
  }).detach();
  if (finished.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) return false;
  if (outcome->error) std::rethrow_exception(outcome->error);
  return true;
}

/// A source whose batches wait at a gate: make(k) for k in `held` blocks until open() (or until
/// one of them has waited 5 s, which opens it for all: a loader that never lets it open still
/// ends; with `forever`, only open() opens it), and counts how many makes are in progress at once.
/// Batch `throw_at` opens the gate and throws; the held batches then take 200 ms more, so the
/// error is filed well before them.
class GatedSource final : public BatchSource {
 public:
  GatedSource(int64_t n, std::set<int64_t> held, int64_t throw_at = -1, bool forever = false)
      : n_(n), held_(std::move(held)), throw_at_(throw_at), forever_(forever) {}
  int64_t num_batches() const override { return n_; }
  Batch make(int64_t k) const override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++started_;
      most_at_once_ = std::max(most_at_once_, ++inside_);
      changed_.notify_all();
      if (held_.count(k) > 0 && forever_) changed_.wait(lock, [&] { return open_; });
      if (held_.count(k) > 0 && !changed_.wait_for(lock, std::chrono::seconds(5), [&] { return open_; })) {
        open_ = true;  // nobody opened it in 5 s: open it for every batch, so the pass ends
        changed_.notify_all();
      }
      --inside_;
    }
    // Released by the error: its worker has 200 ms to file it before the batches before it are made.
    if (held_.count(k) > 0 && throw_at_ >= 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (k == throw_at_) {
      open();  // the batches before it may finish only now: after the error
      throw ddplab::data::DataError("day_1.tsv", fmt::format("line {}: field C7 (column 21)", 100 + k));
    }
    Batch b;
    b.dense = torch::full({1, 1}, static_cast<float>(k));
    b.indices = {static_cast<uint64_t>(k)};
    return b;
  }
  void open() const {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  /// Waits up to `seconds` until `count` makes are in progress at once; whether they were.
  bool wait_inside(int count, int seconds) const {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(seconds), [&] { return inside_ >= count; });
  }
  int most_at_once() const {
    std::lock_guard<std::mutex> lock(mu_);
    return most_at_once_;
  }
  int64_t started() const {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }

 private:
  int64_t n_;
  std::set<int64_t> held_;
  int64_t throw_at_;
  bool forever_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  mutable bool open_ = false;
  mutable int inside_ = 0, most_at_once_ = 0;
  mutable int64_t started_ = 0;
};

// First of all: the destructor joins, it returns only once no worker is inside make() any more.
// (First, because a detached worker of an earlier test would crash the binary before this one
// could say why.) (A worker
// detached instead would run on into the freed State: a crash, some time later, anywhere.)
TEST(Lab08Prefetch, TheDestructorWaitsForAWorkerStillMakingABatch) {
  auto* source = new GatedSource(4, {0}, -1, true);
  auto* loader = new PrefetchLoader(*source, 1, 1);
  ASSERT_TRUE(source->wait_inside(1, 10)) << "no worker started batch 0 within 10 s";
  auto destroyed = std::make_shared<std::promise<void>>();
  auto returned = destroyed->get_future();
  std::thread([loader, destroyed] {
    delete loader;
    destroyed->set_value();
  }).detach();
  // Batch 0 is held: a destructor that joins cannot return before the gate opens.
  if (returned.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready) {
    // The worker is still in make(), held at the gate forever (source leaked): it must not run
    // on into the freed loader.
    FAIL() << "the destructor returned while a worker was still inside make(): it must join the workers "
              "(a detached worker runs on into the destroyed loader's state)";
  }
  source->open();
  ASSERT_TRUE(returned.wait_for(std::chrono::seconds(10)) == std::future_status::ready)
      << "the destructor did not return within 10 s of the last make() ending";
  EXPECT_EQ(source->started(), 1) << "the workers went on making batches after the destructor began";
  delete source;
}

// Second (the first that runs a whole pass): a loader that stalls (a lost wake-up, a batch never
// made) fails here first, so its diagnosis leads the list when the other tests stall too.
TEST(Lab08Prefetch, HandsOutTheSynchronousLoadersOrderWhicheverWorkerFinishesFirst) {
  for (int workers : {1, 2, 4}) {
    SCOPED_TRACE(fmt::format("{} worker(s)", workers));
    struct Pass {
      FakeSource source{40, staggered};
      std::vector<uint64_t> got;
      std::vector<std::string> problems;
      bool false_after_end = false;
      std::atomic<bool> destroying{false};
    };
    auto pass = std::make_shared<Pass>();
    const bool ended = ends_within(
        [pass, workers] {
          PrefetchLoader loader(pass->source, workers, 4);
          Batch b;
          while (loader.next(b) && pass->got.size() <= 40) {
            if (b.indices.size() != 1 || b.dense.item<float>() != static_cast<float>(b.indices[0])) {
              pass->problems.push_back(fmt::format("batch #{}: its tensors and indices differ", pass->got.size()));
            }
            pass->got.push_back(b.indices.empty() ? UINT64_MAX : b.indices[0]);
          }
          pass->false_after_end = !loader.next(b);
          pass->destroying = true;
        },
        5);
    if (!ended) {
      ADD_FAILURE() << (pass->destroying ? "the destructor did not return within 5 s after a full pass"
                                         : fmt::format("the pass stopped after {} of 40 batches: next() waited 5 s for "
                                                       "a batch ({} started): a lost wake-up",
                                                       pass->got.size(), pass->source.started()));
      continue;  // the pass is still running: its figures are not to be read
    }
    for (const auto& p : pass->problems) ADD_FAILURE() << p;
    EXPECT_LE(pass->got.size(), 40u) << "more batches than the source has";
    EXPECT_TRUE(pass->false_after_end) << "next() after the end must keep returning false";
    std::vector<uint64_t> expected(40);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = i;
    EXPECT_EQ(pass->got, expected) << "with " << workers
                                   << " worker(s) the batches must come out in the order 0, 1, 2, ... (SyncLoader's)";
    EXPECT_EQ(pass->source.made(), std::vector<int>(40, 1)) << "every batch must be made exactly once";
  }
}

TEST(Lab08Prefetch, MakesBatchesAheadOnWorkerThreadsButNeverMoreThanTheDepth) {
  const int depth = 3;
  struct Pass {
    // Each batch takes 1 ms to make, so batches being made count: a worker that measures room by
    // the finished batches alone (forgetting those in progress) starts more than depth ahead.
    FakeSource source{30, [](int64_t) { return 1; }};
    int64_t most_ahead = 0, handed = 0, started_then = 0;
    pid_t consumer = 0;
  };
  auto pass = std::make_shared<Pass>();
  const bool ended = ends_within(
      [pass] {
        pass->consumer = ::gettid();
        PrefetchLoader loader(pass->source, 4, depth);
        Batch b;
        for (int64_t handed = 1; loader.next(b); ++handed) {
          // A slow training step: an unbounded loader would run far ahead meanwhile.
          std::this_thread::sleep_for(std::chrono::milliseconds(3));
          const int64_t started = pass->source.started();
          if (started - handed > pass->most_ahead) {
            pass->most_ahead = started - handed;
            pass->handed = handed;
            pass->started_then = started;
          }
        }
      },
      5);
  ASSERT_TRUE(ended) << "a pass of 30 batches did not end within 5 s";
  EXPECT_LE(pass->most_ahead, depth) << "after " << pass->handed << " batches were handed out, " << pass->started_then
                                     << " had been started: more than the queue depth (" << depth
                                     << ") ahead of the consumer, so memory is not bounded";
  EXPECT_GE(pass->most_ahead, 1) << "no batch was ever made ahead of the consumer: the loader does not prefetch";
  EXPECT_EQ(pass->source.tids().count(pass->consumer), 0u) << "batches must be made on worker threads, not in next()";
}

TEST(Lab08Prefetch, AWorkerErrorReachesTheConsumerAfterTheBatchesBeforeIt) {
  auto* source = new FakeSource(20, staggered, 5);
  auto* loader = new PrefetchLoader(*source, 3, 4);
  struct Seen {
    std::vector<uint64_t> got;
    bool ended = false;  // next() returned false
    std::string error;
    bool data_error = false;
  };
  auto seen = std::make_shared<Seen>();
  const bool returned = ends_within(
      [loader, seen] {
        Batch b;
        try {
          while (seen->got.size() < 20 && !seen->ended) {
            if (loader->next(b)) {
              seen->got.push_back(b.indices.at(0));
            } else {
              seen->ended = true;
            }
          }
        } catch (const ddplab::data::DataError& e) {
          seen->error = e.what();
          seen->data_error = true;
        } catch (const std::exception& e) {
          seen->error = e.what();
        }
      },
      5);
  ASSERT_TRUE(returned) << "next() did not return within 5 s (after " << seen->got.size()
                        << " batches): it waits for a batch the workers have made or will never make";
  EXPECT_EQ(seen->got, (std::vector<uint64_t>{0, 1, 2, 3, 4}))
      << "batches 0-4 come before the one whose making threw (5), and nothing after it";
  if (seen->error.empty() && seen->ended) {
    ADD_FAILURE() << "next() returned false (the end of the pass) instead of throwing batch 5's error: the training "
                     "loop would end its epoch early, quietly, and the run would succeed";
  } else if (seen->error.empty()) {
    ADD_FAILURE() << "next() returned batches past batch 5, whose making threw";
  } else {
    EXPECT_TRUE(seen->data_error) << "next() threw something other than the worker's error: " << seen->error;
    EXPECT_NE(seen->error.find("day_0.tsv: line 105: field I3"), std::string::npos) << seen->error;
  }
  ASSERT_TRUE(returns_within([loader] { delete loader; }, 10))
      << "the destructor did not return within 10 s after a worker's error";
  EXPECT_EQ(lab08::threads_still_running(source->tids()), 0) << "a worker thread outlived the loader";
  delete source;
}

// The error is met first, while the batches before it are still being made: it must still wait
// for them (batches 0-4 are held until batch 5 has thrown).
TEST(Lab08Prefetch, AnErrorMetFirstStillWaitsForTheBatchesBeforeIt) {
  auto* source = new GatedSource(12, {0, 1, 2, 3, 4}, 5);
  auto* loader = new PrefetchLoader(*source, 6, 6);
  struct Seen {
    std::vector<uint64_t> got;
    std::string error;
  };
  auto seen = std::make_shared<Seen>();
  const bool ended = ends_within(
      [loader, seen] {
        Batch b;
        try {
          while (seen->got.size() < 12 && loader->next(b)) seen->got.push_back(b.indices.at(0));
        } catch (const std::exception& e) {
          seen->error = e.what();
        }
      },
      10);
  ASSERT_TRUE(ended) << "next() did not return within 10 s";
  EXPECT_EQ(seen->got, (std::vector<uint64_t>{0, 1, 2, 3, 4}))
      << "batch 5 failed before batches 0-4 were made; they must still be handed out first, then batch 5's error";
  EXPECT_NE(seen->error.find("day_1.tsv: line 105: field C7"), std::string::npos)
      << "the error next() threw: \"" << seen->error << "\"";
  ASSERT_TRUE(returns_within([loader] { delete loader; }, 10)) << "the destructor did not return within 10 s";
  delete source;
}

// Several workers exist to parse batches at the same time: with 3 workers and room for 4, the
// first 3 batches are made at once (each waits until all three are in make(), or 5 s).
TEST(Lab08Prefetch, WorkersMakeBatchesAtTheSameTime) {
  auto* source = new GatedSource(6, {0, 1, 2});
  auto* loader = new PrefetchLoader(*source, 3, 4);
  const bool three_at_once = source->wait_inside(3, 5);
  source->open();
  const bool ended = ends_within(
      [loader] {
        Batch b;
        while (loader->next(b)) {
        }
        delete loader;
      },
      10);
  ASSERT_TRUE(ended) << "the pass did not end within 10 s";
  EXPECT_TRUE(three_at_once) << "3 workers never made batches at the same time (at most " << source->most_at_once()
                             << " at once): source.make() must run outside the lock, or the workers take turns "
                                "and next() waits for each parse";
  delete source;
}

TEST(Lab08Prefetch, StoppingEarlyWithWorkersWaitingForRoomDoesNotDeadlock) {
  auto* source = new FakeSource(100);
  auto* loader = new PrefetchLoader(*source, 3, 2);
  Batch b;
  ASSERT_TRUE(loader->next(b));
  ASSERT_TRUE(loader->next(b));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the queue fills; the workers wait for room
  ASSERT_TRUE(returns_within([loader] { delete loader; }, 10))
      << "the destructor did not return within 10 s after the consumer took 2 of 100 batches: workers waiting "
         "for room in the queue must be woken and told to stop";
  EXPECT_LT(source->started(), 100) << "the workers went on making batches nobody asked for";
  EXPECT_EQ(lab08::threads_still_running(source->tids()), 0) << "a worker thread outlived the loader";
  delete source;
}

TEST(Lab08Prefetch, NoThreadOutlivesTheLoaderAfterAFullPass) {
  auto source = std::make_shared<FakeSource>(12, staggered);
  ASSERT_TRUE(ends_within(
      [source] {
        PrefetchLoader loader(*source, 4, 3);
        Batch b;
        while (loader.next(b)) {
        }
      },
      5))
      << "a pass of 12 batches and the loader's destruction did not end within 5 s";
  EXPECT_GE(source->tids().size(), 1u);
  EXPECT_EQ(lab08::threads_still_running(source->tids()), 0)
      << "a worker thread is still running after the loader was destroyed";
}

TEST(Lab08Prefetch, AnEmptySourceEndsAtOnce) {
  const FakeSource source(0);
  PrefetchLoader loader(source, 2, 2);
  Batch b;
  EXPECT_FALSE(loader.next(b));
}

/// In a child process (a death test): each of workers 0 (depth 2) and depth 0 (2 workers) must be
/// refused with a ddplab::Error naming it; exits 0 if both are, else 1 (accepted), 2 (another
/// message) or 3 (another exception), saying which on stderr.
void refuses_both(const BatchSource& source) {
  for (auto [w, d, what] : {std::tuple{0, 2, "workers"}, std::tuple{2, 0, "depth"}}) {
    try {
      PrefetchLoader loader(source, w, d);
      std::fprintf(stderr, "accepted workers %d, depth %d\n", w, d);
      std::_Exit(1);
    } catch (const ddplab::Error& e) {
      if (std::string(e.what()).find(what) != std::string::npos) continue;
      std::fprintf(stderr, "the error does not name the %s: %s\n", what, e.what());
      std::_Exit(2);
    } catch (...) {
      std::fprintf(stderr, "workers %d, depth %d: threw something other than a ddplab::Error\n", w, d);
      std::_Exit(3);
    }
  }
  std::_Exit(0);
}

TEST(Lab08Prefetch, RejectsWorkersOrDepthBelowOne) {
  const FakeSource source(4);
  {
    const FakeSource none(0);            // nothing to make: the worker ends, whatever the destructor does
    PrefetchLoader written(none, 1, 1);  // a stub stops here: not attempted
  }
  // The refusals in a child process: a constructor that throws while its threads run ends the
  // program (std::terminate: a joinable std::thread destroyed), which must fail this test alone.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(refuses_both(source), ::testing::ExitedWithCode(0), "")
      << "workers 0 or depth 0 must be refused with a ddplab::Error naming the value, thrown before any thread "
         "starts (killed by a signal: the constructor threw with its threads running, std::terminate)";
}

// ---- 08.2 ----

class Lab08Range : public ddplab::testing::ScratchTest {};

/// Lines of lengths 1..97 in a repeating pattern (some empty), `n` of them, the last with or
/// without its '\n'.
std::string uneven_lines(int n, bool trailing_newline) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    s += std::string(static_cast<size_t>((i * 37) % 98), static_cast<char>('a' + i % 26));
    if (i + 1 < n || trailing_newline) s += '\n';
  }
  return s;
}

/// The first line start at or after p (reading the whole text: the test's own oracle).
uint64_t line_start_at_or_after(const std::string& s, uint64_t p) {
  if (p == 0) return 0;
  for (uint64_t q = p; q < s.size(); ++q) {
    if (s[q - 1] == '\n') return q;
  }
  return s.size();
}

TEST_F(Lab08Range, TheRangesTileTheFileEachBeginningAtTheFirstLineStartOfItsShare) {
  for (bool trailing : {true, false}) {
    for (int lines : {1, 5, 200}) {
      const std::string s = uneven_lines(lines, trailing);
      const lab08::TextFile f(write(fmt::format("t{}_{}.txt", lines, trailing), s));
      for (int world : {1, 2, 3, 4, 7, 16}) {
        uint64_t expected_begin = 0;
        for (int r = 0; r < world; ++r) {
          const lab08::ByteRange got = lab08::line_aligned_range(f, r, world);
          const uint64_t nominal = s.size() * static_cast<uint64_t>(r) / static_cast<uint64_t>(world);
          const uint64_t nominal_next = s.size() * static_cast<uint64_t>(r + 1) / static_cast<uint64_t>(world);
          EXPECT_EQ(got.begin, expected_begin) << "rank " << r << " of " << world << " (" << lines
                                               << " lines): must begin where rank " << r - 1 << " ends";
          EXPECT_EQ(got.begin, line_start_at_or_after(s, nominal))
              << "rank " << r << " of " << world << ": the first line start at or after " << nominal;
          EXPECT_EQ(got.end, line_start_at_or_after(s, nominal_next)) << "rank " << r << " of " << world;
          expected_begin = got.end;
        }
        EXPECT_EQ(expected_begin, s.size()) << "the last range must end at the file's size";
      }
    }
  }
}

TEST_F(Lab08Range, EveryLineBelongsToExactlyOneRank) {
  const std::string s = uneven_lines(1000, true);
  const lab08::TextFile f(write("t.txt", s));
  const auto all = ddplab::data::line_starts(f, {0, f.size()});
  for (int world : {2, 3, 8}) {
    std::vector<uint64_t> joined;
    for (int r = 0; r < world; ++r) {
      const auto mine = ddplab::data::line_starts(f, lab08::line_aligned_range(f, r, world));
      joined.insert(joined.end(), mine.begin(), mine.end());
    }
    EXPECT_EQ(joined, all) << world << " ranks: the ranks' lines, in rank order, must be the file's lines";
  }
}

TEST_F(Lab08Range, ReadsOnlyNearTheBoundariesNotTheFile) {
  const std::string s = uneven_lines(20000, true);  // ~1 MB, lines up to 97 bytes
  const lab08::TextFile f(write("big.txt", s));
  const uint64_t slack = 2 * (98 + 4096);
  for (int world : {1, 2, 4}) {
    for (int r = 0; r < world; ++r) {
      const uint64_t before = f.bytes_read();
      (void)lab08::line_aligned_range(f, r, world);
      const uint64_t read = f.bytes_read() - before;
      EXPECT_LE(read, slack) << "rank " << r << " of " << world << " read " << read << " of the file's " << f.size()
                             << " bytes to find its range: only the bytes near its two boundaries are needed";
    }
  }
}

TEST_F(Lab08Range, AnEmptyFileGivesEveryRankAnEmptyRange) {
  const lab08::TextFile f(write("empty.txt", ""));
  for (int r = 0; r < 3; ++r) {
    const auto got = lab08::line_aligned_range(f, r, 3);
    EXPECT_EQ(got.begin, 0u);
    EXPECT_EQ(got.end, 0u);
  }
}

TEST_F(Lab08Range, RejectsARankOutsideTheWorld) {
  const lab08::TextFile f(write("t.txt", "a\nb\n"));
  for (auto [r, w] : {std::pair{2, 2}, std::pair{-1, 2}, std::pair{0, 0}}) {
    try {
      (void)lab08::line_aligned_range(f, r, w);
      ADD_FAILURE() << "accepted rank " << r << " of " << w;
    } catch (const ddplab::NotImplemented&) {
      throw;
    } catch (const ddplab::Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
    }
  }
}

}  // namespace

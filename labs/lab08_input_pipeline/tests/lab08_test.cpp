// Lab 08's public tests: the prefetching loader's order, bound, errors and shutdown (08.1), and
// the byte ranges of shard-aware reading (08.2). Each exercise's tests call only its own code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
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

class Lab08PrefetchOrder : public ::testing::TestWithParam<int> {};

TEST_P(Lab08PrefetchOrder, HandsOutTheSynchronousLoadersOrderWhicheverWorkerFinishesFirst) {
  const int workers = GetParam();
  const FakeSource source(40, staggered);
  std::vector<uint64_t> got;
  {
    PrefetchLoader loader(source, workers, 4);
    Batch b;
    while (loader.next(b)) {
      ASSERT_EQ(b.indices.size(), 1u);
      EXPECT_EQ(b.dense.item<float>(), static_cast<float>(b.indices[0])) << "a batch's tensors and indices differ";
      got.push_back(b.indices[0]);
      ASSERT_LE(got.size(), 40u) << "more batches than the source has";
    }
    EXPECT_FALSE(loader.next(b)) << "next() after the end must keep returning false";
  }
  std::vector<uint64_t> expected(40);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = i;
  EXPECT_EQ(got, expected) << "with " << workers
                           << " worker(s) the batches must come out in the order 0, 1, 2, ... (SyncLoader's)";
  EXPECT_EQ(source.made(), std::vector<int>(40, 1)) << "every batch must be made exactly once";
}

INSTANTIATE_TEST_SUITE_P(Workers, Lab08PrefetchOrder, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param) + "_workers"; });

TEST(Lab08Prefetch, MakesBatchesAheadOnWorkerThreadsButNeverMoreThanTheDepth) {
  const int depth = 3;
  const FakeSource source(30);
  int64_t most_ahead = 0;
  {
    PrefetchLoader loader(source, 4, depth);
    Batch b;
    int64_t handed = 0;
    while (loader.next(b)) {
      ++handed;
      // A slow training step: an unbounded loader would run far ahead meanwhile.
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      const int64_t ahead = source.started() - handed;
      most_ahead = std::max(most_ahead, ahead);
      ASSERT_LE(ahead, depth) << "after " << handed << " batches were handed out, " << source.started()
                              << " had been started: more than the queue depth (" << depth
                              << ") ahead of the consumer, so memory is not bounded";
    }
  }
  EXPECT_GE(most_ahead, 1) << "no batch was ever made ahead of the consumer: the loader does not prefetch";
  EXPECT_EQ(source.tids().count(::gettid()), 0u) << "batches must be made on worker threads, not in next()";
}

TEST(Lab08Prefetch, AWorkerErrorReachesTheConsumerAfterTheBatchesBeforeIt) {
  auto* source = new FakeSource(20, staggered, 5);
  auto* loader = new PrefetchLoader(*source, 3, 4);
  Batch b;
  for (uint64_t k = 0; k < 5; ++k) {
    ASSERT_TRUE(loader->next(b)) << "batch " << k << " comes before the one that fails";
    EXPECT_EQ(b.indices[0], k);
  }
  try {
    loader->next(b);
    FAIL() << "next() returned batch 5, whose making threw";
  } catch (const ddplab::data::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("day_0.tsv: line 105: field I3"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    FAIL() << "next() threw something other than the worker's error: " << e.what();
  }
  ASSERT_TRUE(returns_within([loader] { delete loader; }, 10))
      << "the destructor did not return within 10 s after a worker's error";
  EXPECT_EQ(lab08::threads_still_running(source->tids()), 0) << "a worker thread outlived the loader";
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
  const FakeSource source(12, staggered);
  {
    PrefetchLoader loader(source, 4, 3);
    Batch b;
    while (loader.next(b)) {
    }
  }
  EXPECT_GE(source.tids().size(), 1u);
  EXPECT_EQ(lab08::threads_still_running(source.tids()), 0)
      << "a worker thread is still running after the loader was destroyed";
}

TEST(Lab08Prefetch, AnEmptySourceEndsAtOnce) {
  const FakeSource source(0);
  PrefetchLoader loader(source, 2, 2);
  Batch b;
  EXPECT_FALSE(loader.next(b));
}

TEST(Lab08Prefetch, RejectsWorkersOrDepthBelowOne) {
  const FakeSource source(4);
  for (auto [w, d, what] : {std::tuple{0, 2, "workers"}, std::tuple{2, 0, "depth"}}) {
    try {
      PrefetchLoader loader(source, w, d);
      ADD_FAILURE() << "accepted workers " << w << ", depth " << d;
    } catch (const ddplab::NotImplemented&) {
      throw;
    } catch (const ddplab::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
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

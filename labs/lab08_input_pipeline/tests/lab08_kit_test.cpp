// Lab 08's kit (lab08_kit.h) on synthetic input: the grader's broken line is the line asked for,
// flags that do not go together are refused, and the watch counts batches made ahead of the
// loop (when each batch is started, against the batches the loop received) and the threads that
// made them, including after they are gone. Only the synchronous loader runs: no student code.
#include "lab08_kit.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "ddplab/error.h"

namespace {

/// 8 batches, each holding its own number: nothing to parse.
class Counting final : public lab08::BatchSource {
 public:
  int64_t num_batches() const override { return 8; }
  lab08::Batch make(int64_t k) const override {
    lab08::Batch b;
    b.indices = {static_cast<uint64_t>(k)};
    return b;
  }
};

TEST(Lab08Kit, TheBrokenLineIsTheOneAskedForAndAShortTextIsRefused) {
  const std::string text = "1\t5\t6\n0\t7\t8\n1\t9\t10\n";
  EXPECT_EQ(lab08::break_line(text, 1), "1\tx5\t6\n0\t7\t8\n1\t9\t10\n");
  EXPECT_EQ(lab08::break_line(text, 3), "1\t5\t6\n0\t7\t8\n1\tx9\t10\n");
  EXPECT_THROW(lab08::break_line(text, 4), ddplab::ConfigError);
  EXPECT_THROW(lab08::break_line(text, 0), ddplab::ConfigError);
}

TEST(Lab08Kit, FlagsThatDoNotGoTogetherAreRefused) {
  lab08::Flags f;
  EXPECT_NO_THROW(lab08::check_flags(f));
  f.source = "binary";
  EXPECT_NO_THROW(lab08::check_flags(f));
  f.loader = "prefetch";
  EXPECT_THROW(lab08::check_flags(f), ddplab::ConfigError);
  f = lab08::Flags{};
  f.text = "train.tsv";
  f.corrupt_line = 3;
  EXPECT_THROW(lab08::check_flags(f), ddplab::ConfigError);
}

/// A loader whose workers are the test's own calls: next() hands out the next batch number and,
/// before returning, runs `in_next(handed)`, what a worker woken by next() would do meanwhile.
class Scripted final : public ddplab::data::Loader {
 public:
  explicit Scripted(int64_t n) : n_(n) {}
  std::function<void(int64_t)> in_next;
  std::function<void()> fail_at_next;
  bool next(lab08::Batch& out) override {
    if (fail_at_next) fail_at_next();
    if (k_ >= n_) return false;
    out = lab08::Batch{};
    out.indices = {static_cast<uint64_t>(k_++)};
    if (in_next) in_next(k_);
    return true;
  }

 private:
  int64_t n_, k_ = 0;
};

/// The driver's loop: every batch of `loader`, with `step(handed)` as the training step.
void train(ddplab::data::Loader& loader, const std::function<void(int64_t)>& step) {
  lab08::Batch b;
  int64_t handed = 0;
  while (loader.next(b)) step(++handed);
}

// A depth-2 loader whose workers start a batch while the training step runs (the usual case: the
// queue fills during the step). The most made ahead is 2, reached when each batch is started;
// sampled when the loop receives a batch (the kit's old moment) it read 1, and a loader 3 ahead
// read 2: "within the bound".
TEST(Lab08Kit, AheadIsMeasuredWhenABatchIsStartedNotWhenTheLoopReceivesOne) {
  const Counting inner;  // 8 batches
  for (int ahead : {1, 2, 3, 4}) {
    lab08::WatchedSource w(inner);
    lab08::WatchedLoader loop(std::make_unique<Scripted>(w.num_batches()), w);
    int64_t started = 0;
    for (; started < ahead; ++started) (void)w.make(started);  // the workers fill the queue first
    train(loop, [&](int64_t handed) {
      while (started < std::min<int64_t>(handed + ahead, w.num_batches())) (void)w.make(started++);
    });
    EXPECT_EQ(w.handed(), 8);
    EXPECT_EQ(w.max_ahead(), ahead) << "a loader that starts batch k while k < (batches received) + " << ahead;
  }
}

// The loader may hand its batch out, and a worker start the next one, before next() has returned
// to the loop: a next() in progress counts as received, so a loader that keeps its bound exactly
// is not read one over it.
TEST(Lab08Kit, ABatchStartedWhileNextIsReturningIsNotReadOverTheBound) {
  const Counting inner;
  lab08::WatchedSource w(inner);
  auto scripted = std::make_unique<Scripted>(w.num_batches());
  int64_t started = 0;
  scripted->in_next = [&](int64_t handed) {
    while (started < std::min<int64_t>(handed + 2, w.num_batches())) (void)w.make(started++);
  };
  lab08::WatchedLoader loop(std::move(scripted), w);
  for (; started < 2; ++started) (void)w.make(started);
  train(loop, [](int64_t) {});
  EXPECT_EQ(w.max_ahead(), 2);
  EXPECT_EQ(w.handed(), 8);
}

TEST(Lab08Kit, ASynchronousLoaderIsNeverAheadAndAFailedNextHandsNothingOut) {
  const Counting inner;
  lab08::WatchedSource w(inner);
  lab08::WatchedLoader loop(std::make_unique<lab08::SyncLoader>(w), w);
  train(loop, [](int64_t) {});
  EXPECT_EQ(w.handed(), 8);
  EXPECT_EQ(w.max_ahead(), 0);
  // A next() that throws hands nothing out and ends its call: a batch started afterwards counts
  // against what the loop really received.
  lab08::WatchedSource v(inner);
  auto failing = std::make_unique<Scripted>(v.num_batches());
  failing->fail_at_next = [] { throw ddplab::Error("a worker's error"); };
  lab08::WatchedLoader broken(std::move(failing), v);
  lab08::Batch b;
  EXPECT_THROW(broken.next(b), ddplab::Error);
  EXPECT_EQ(v.handed(), 0);
  (void)v.make(0);
  EXPECT_EQ(v.max_ahead(), 1);
}

TEST(Lab08Kit, TheWatchKnowsTheThreadsThatMadeBatches) {
  const Counting inner;
  lab08::WatchedSource w(inner);
  for (int64_t k = 0; k < 3; ++k) (void)w.make(k);
  EXPECT_EQ(w.max_ahead(), 3);
  EXPECT_EQ(w.makers(), 1);  // this thread, which threads_alive() does not count
  EXPECT_EQ(w.threads_alive(), 0);
  std::atomic<bool> release{false};
  std::thread worker([&] {
    (void)w.make(4);
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (w.makers() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(w.threads_alive(), 1);  // a maker still running: what outlives a loader
  lab08::LoaderFigures all;
  all.add(w);
  all.add(w);
  EXPECT_EQ(all.max_ahead, 5);  // batch 4 started with none received
  EXPECT_EQ(all.threads_left, 2);
  EXPECT_EQ(all.makers, 2);
  release = true;
  worker.join();
  EXPECT_EQ(w.threads_alive(), 0);  // joined: gone
}

}  // namespace

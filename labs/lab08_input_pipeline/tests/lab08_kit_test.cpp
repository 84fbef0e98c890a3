// Lab 08's kit (lab08_kit.h) on synthetic input: the grader's broken line is the line asked for,
// flags that do not go together are refused, and the watch counts batches made ahead of the
// loop and the threads that made them, including after they are gone. No student code runs.
#include "lab08_kit.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "ddplab/data/generator.h"
#include "ddplab/error.h"

namespace {

class Counting final : public lab08::BatchSource {
 public:
  int64_t num_batches() const override { return 8; }
  lab08::Batch make(int64_t k) const override {
    const ddplab::data::Generator gen(1);
    std::vector<ddplab::data::Sample> samples(2);
    gen.fill(static_cast<uint64_t>(2 * k), 2, samples.data());
    return ddplab::data::make_batch(samples.data(), samples.size(), static_cast<uint64_t>(2 * k));
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

TEST(Lab08Kit, TheWatchCountsBatchesMadeAheadAndTheThreadsThatMadeThem) {
  const Counting inner;
  lab08::WatchedSource w(inner);
  EXPECT_EQ(w.num_batches(), 8);
  // Three batches made before the loop took the first: two ahead.
  for (int64_t k = 0; k < 3; ++k) (void)w.make(k);
  w.handed(1);
  (void)w.make(3);
  w.handed(2);
  EXPECT_EQ(w.max_ahead(), 2);
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
  EXPECT_EQ(all.max_ahead, 2);
  EXPECT_EQ(all.threads_left, 2);
  EXPECT_EQ(all.makers, 2);
  release = true;
  worker.join();
  EXPECT_EQ(w.threads_alive(), 0);  // joined: gone
}

}  // namespace

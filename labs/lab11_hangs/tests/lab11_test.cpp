// Lab 11's public tests: the contracts of lab11.h. Ranks run as threads with real Gloo groups.
// Run them with build/<tree>/bin/lab11_hangs_tests.
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lab11.h"
#include "lab11_kit.h"
#include "scratch_dir.h"
#include "thread_ranks.h"
#include "ddplab/dist/loopback.h"

namespace {

using ddplab::dist::Op;
using ddplab::dist::ProcessGroup;
using ddplab::flight::Entry;
using ddplab::flight::State;
using ddplab::testing::run_ranks;
using lab11::Call;
using lab11::Reduce;

Call allreduce(std::vector<int64_t> shape) {
  return Call{Op::kAllreduce, Reduce::kSum, torch::kFloat, std::move(shape)};
}

uint64_t of(const std::vector<Call>& calls) {
  uint64_t h = 0;
  for (const auto& c : calls) h = lab11::fingerprint(h, c);
  return h;
}

// ---- 11.1 ----

TEST(Lab11Fingerprint, TheSameCallsGiveTheSameFingerprintEveryTime) {
  const std::vector<Call> calls = {allreduce({4096}), Call{Op::kAllgather, Reduce::kNone, torch::kLong, {2, 3}},
                                   Call{Op::kBroadcast, Reduce::kNone, torch::kFloat, {}}};
  EXPECT_EQ(of(calls), of(calls));
  EXPECT_NE(of(calls), of({}));  // a call changes the running value
}

TEST(Lab11Fingerprint, EveryFieldTheRanksMustAgreeOnCounts) {
  const Call base = allreduce({64, 8});
  auto differs = [&](Call c, const char* what) { EXPECT_NE(of({base}), of({c})) << what; };
  differs(Call{Op::kAllgather, Reduce::kSum, torch::kFloat, {64, 8}}, "the op");
  differs(Call{Op::kAllreduce, Reduce::kNone, torch::kFloat, {64, 8}}, "the reduction");
  differs(Call{Op::kAllreduce, Reduce::kSum, torch::kDouble, {64, 8}}, "the dtype");
  differs(allreduce({64, 9}), "the last dimension");
  differs(allreduce({65, 8}), "the first dimension");
  differs(allreduce({512}), "the number of dimensions, same elements");
  differs(allreduce({8, 64}), "the dimensions' order, same elements");
  differs(allreduce({64, 8, 1}), "a trailing dimension of 1");
}

TEST(Lab11Fingerprint, OrderCountsAndSoDoesTheRunningValue) {
  const Call a = allreduce({4096}), b = allreduce({1024});
  EXPECT_NE(of({a, b}), of({b, a}));
  EXPECT_NE(lab11::fingerprint(1, a), lab11::fingerprint(2, a));
}

TEST(Lab11Fingerprint, BucketsOfEverySizeAreToldApart) {
  // One rank's bucket of n elements where the others have another size: every size from 1 to
  // 4096 must give its own fingerprint after the same history.
  std::set<uint64_t> seen;
  const uint64_t history = of({allreduce({7}), allreduce({3})});
  for (int64_t n = 1; n <= 4096; ++n) seen.insert(lab11::fingerprint(history, allreduce({n})));
  EXPECT_EQ(seen.size(), 4096u);
}

TEST(Lab11Fingerprint, TheKitsCheckNamesTheFirstCollectiveTheRanksIssueDifferently) {
  // Through the kit's communicator, checking before every collective (K = 1) and every third (K = 3):
  // rank 1 all-reduces 3 elements where rank 0 all-reduces 5, as collective #2. Every rank must
  // stop with a Desync naming #2 and both calls, before the transport sees the mismatch.
  for (int64_t k : {1, 3}) {
    run_ranks(2, [k](ProcessGroup& pg) {
      lab11::Flags f;
      f.fingerprint_every = k;
      f.flight = 0;
      lab11::Watched comm(pg, f, "");
      torch::Tensor a = torch::ones({4});
      comm.allreduce(a);
      comm.allreduce(a);
      torch::Tensor odd = torch::ones({pg.rank() == 0 ? 5 : 3});
      try {
        comm.allreduce(odd);
        ADD_FAILURE() << "K=" << k << ": rank " << pg.rank() << " was not stopped";
      } catch (const lab11::Desync& d) {
        EXPECT_EQ(d.seq, 2) << d.what();
        EXPECT_EQ(d.calls, (std::vector<std::string>{"allreduce float[5]", "allreduce float[3]"})) << d.what();
      }
    });
  }
}

TEST(Lab11Fingerprint, TheKitsCheckLetsIdenticalCallsThroughWithOneAllGatherPerKCollectives) {
  run_ranks(2, [](ProcessGroup& pg) {
    lab11::Flags f;
    f.fingerprint_every = 4;
    f.flight = 0;
    lab11::Watched comm(pg, f, "");
    for (int i = 0; i < 8; ++i) {
      torch::Tensor t = torch::full({3 + i}, static_cast<float>(pg.rank()));
      comm.allreduce(t);
      EXPECT_TRUE(torch::equal(t, torch::full({3 + i}, 1.0f)));
    }
    EXPECT_EQ(comm.checks(), 2);
  });
}

// ---- 11.2 ----

Entry entry(int64_t seq, State s = State::kEnqueued) {
  return Entry{seq, Op::kAllreduce, {seq + 1}, "float", 0.5 * static_cast<double>(seq), -1, s};
}

std::vector<int64_t> seqs(const lab11::Ring& ring) {
  std::vector<int64_t> out;
  for (const auto& e : lab11::in_order(ring)) out.push_back(e.seq);
  return out;
}

TEST(Lab11Ring, KeepsTheLastCapacityEntries) {
  lab11::Ring ring;
  ring.capacity = 4;
  for (int64_t k = 0; k < 3; ++k) lab11::record(ring, entry(k));
  EXPECT_EQ(seqs(ring), (std::vector<int64_t>{0, 1, 2}));
  for (int64_t k = 3; k < 10; ++k) lab11::record(ring, entry(k));
  EXPECT_EQ(seqs(ring), (std::vector<int64_t>{6, 7, 8, 9}));
  EXPECT_EQ(ring.recorded, 10);
}

TEST(Lab11Ring, ACompletionUpdatesItsEntryInPlace) {
  lab11::Ring ring;
  ring.capacity = 3;
  for (int64_t k = 0; k < 5; ++k) {
    lab11::record(ring, entry(k));
    Entry done = entry(k, State::kCompleted);
    done.ended_s = done.enqueued_s + 0.1;
    lab11::record(ring, done);
  }
  lab11::record(ring, entry(5));
  const auto kept = lab11::in_order(ring);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].seq, 3);
  EXPECT_EQ(kept[0].state, State::kCompleted);
  EXPECT_DOUBLE_EQ(kept[1].ended_s, 2.1);
  EXPECT_EQ(kept[2].seq, 5);
  EXPECT_EQ(kept[2].state, State::kEnqueued);
  EXPECT_EQ(ring.recorded, 6);  // an update is not a new collective
}

TEST(Lab11Ring, AnUpdateDoesNotMakeAnEntryYounger) {
  // The oldest entry completes last (an asynchronous collective); the next new one still replaces it.
  lab11::Ring ring;
  ring.capacity = 2;
  lab11::record(ring, entry(0));
  lab11::record(ring, entry(1));
  lab11::record(ring, entry(0, State::kCompleted));
  lab11::record(ring, entry(2));
  EXPECT_EQ(seqs(ring), (std::vector<int64_t>{1, 2}));
}

TEST(Lab11Ring, AThousandCollectivesLaterItStillHoldsOnlyTheLast) {
  for (size_t cap : {size_t{1}, size_t{16}}) {
    lab11::Ring ring;
    ring.capacity = cap;
    for (int64_t k = 0; k < 1000; ++k) {
      lab11::record(ring, entry(k));
      lab11::record(ring, entry(k, State::kCompleted));
    }
    lab11::record(ring, entry(1000, State::kEnqueued));
    const auto kept = lab11::in_order(ring);
    ASSERT_EQ(kept.size(), cap);
    EXPECT_EQ(kept.back().seq, 1000);
    EXPECT_EQ(kept.back().state, State::kEnqueued);
    EXPECT_EQ(kept.front().seq, 1001 - static_cast<int64_t>(cap));
    EXPECT_LE(ring.slots.size(), cap) << "the ring's memory grows with the collectives recorded";
  }
}

TEST(Lab11Ring, ATimedOutCollectiveIsDumpedAndTheDumpsNameWhoHoldsItUp) {
  // Rank 1 skips collective #3: rank 0 times out there, dumps its ring, asks rank 1 for its dump
  // (rank 1's watcher answers while it waits) and throws a Hang naming #3 and rank 1.
  ddplab::testing::ScratchDir dir;
  const std::string flight = (dir.dir() / "flight").string();
  run_ranks(
      2,
      [&](ProcessGroup& pg) {
        lab11::Flags f;
        f.fingerprint_every = 0;
        f.flight = 2;  // a ring smaller than the run: only the last two can tell
        f.grace_s = 5;
        lab11::Watched comm(pg, f, flight);
        torch::Tensor t = torch::ones({6});
        for (int i = 0; i < 3; ++i) comm.allreduce(t);
        if (pg.rank() == 1) {
          // Wait until rank 0 has dumped and asked, stay alive for the watcher to answer.
          for (int i = 0; i < 200 && !std::filesystem::exists(flight + "/rank1.json"); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
          return;
        }
        try {
          comm.allreduce(t);
          ADD_FAILURE() << "rank 0's collective #3 did not time out";
        } catch (const lab11::Hang& h) {
          EXPECT_EQ(h.stall.seq, 3) << h.what();
          EXPECT_EQ(h.stall.cause, "not entered") << h.what();
          EXPECT_EQ(h.stall.waiting, (std::vector<int>{0})) << h.what();
          EXPECT_EQ(h.stall.holding, (std::vector<int>{1})) << h.what();
        }
        const auto dumps = ddplab::flight::read_dumps(flight, 2);
        ASSERT_TRUE(dumps[0] && dumps[1]);
        ASSERT_EQ(dumps[0]->entries.size(), 2u);
        EXPECT_EQ(dumps[0]->entries[1].seq, 3);
        EXPECT_EQ(dumps[0]->entries[1].state, State::kFailed);
        EXPECT_EQ(dumps[1]->entries.back().seq, 2);
        EXPECT_EQ(dumps[1]->entries.back().state, State::kCompleted);
      },
      std::chrono::milliseconds(1500));
}

// ---- 11.3 ----

TEST(Lab11Join, EveryRankGetsTheMeanOverAllItsSamples) {
  // Rank r saw r + 1 samples whose mean gradient is (r + 1) x ones: the mean over all samples is
  // sum (r + 1)^2 / sum (r + 1), not the mean of the ranks' means.
  for (int world : {2, 3}) {
    run_ranks(world, [world](ProcessGroup& pg) {
      const int64_t n = pg.rank() + 1;
      torch::Tensor g = torch::full({5}, static_cast<float>(n));
      pg.reset_stats();
      EXPECT_TRUE(lab11::join_allreduce(pg, g, n));
      double num = 0, den = 0;
      for (int r = 1; r <= world; ++r) num += r * r, den += r;
      EXPECT_TRUE(torch::allclose(g, torch::full({5}, static_cast<float>(num / den)), 1e-6, 1e-7)) << g;
      EXPECT_EQ(pg.stats().ops[static_cast<size_t>(Op::kAllreduce)].calls, 1) << "one all-reduce a step";
      EXPECT_EQ(pg.stats().total_calls(), 1);
    });
  }
}

TEST(Lab11Join, AJoinedRankAddsNothingAndTheOthersGoOn) {
  run_ranks(3, [](ProcessGroup& pg) {
    // Rank 1's data has run out: it contributes zeros and no samples.
    const int64_t n = pg.rank() == 1 ? 0 : 4;
    torch::Tensor g = pg.rank() == 1 ? torch::zeros({2, 3}) : torch::full({2, 3}, pg.rank() == 0 ? 1.0f : 3.0f);
    EXPECT_TRUE(lab11::join_allreduce(pg, g, n));
    EXPECT_TRUE(torch::allclose(g, torch::full({2, 3}, 2.0f))) << g;  // (4 x 1 + 4 x 3) / 8
  });
}

TEST(Lab11Join, WhenEveryRankHasJoinedTheEpochIsOver) {
  run_ranks(2, [](ProcessGroup& pg) {
    torch::Tensor g = torch::zeros({4});
    EXPECT_FALSE(lab11::join_allreduce(pg, g, 0));
    EXPECT_TRUE(torch::equal(g, torch::zeros({4})));
  });
}

TEST(Lab11Join, OneRankAloneKeepsItsOwnMean) {
  ddplab::dist::Loopback comm;
  torch::Tensor g = torch::tensor({1.5f, -2.0f});
  EXPECT_TRUE(lab11::join_allreduce(comm, g, 7));
  EXPECT_TRUE(torch::allclose(g, torch::tensor({1.5f, -2.0f})));
}

// ---- 11.4 ----

lab11::PhaseTimes per_step(double data_ms, double compute_ms, double comm_ms, int64_t steps = 4) {
  const double s = static_cast<double>(steps) / 1000;
  return lab11::PhaseTimes{data_ms * s, compute_ms * s, comm_ms * s, steps};
}

TEST(Lab11Straggler, ASlowLoaderIsNamedByItsDataWaitThoughComputeIsTheBiggestPhase) {
  // Rank 1 waits 8 ms a step for data; compute is 20 ms everywhere; rank 0 waits for rank 1 in the
  // all-reduce. Rank 1's biggest phase is compute, but what makes it slow is its data wait.
  const auto s = lab11::find_straggler({per_step(0.2, 20, 9), per_step(8.2, 20.1, 1)}, 1024);
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.phase, "data_wait");
  EXPECT_NEAR(s.excess_s, 0.008, 1e-9);
  // A step now takes 29.3 ms (rank 1: 8.2 + 20.1 + 1); without the straggler 8.1 ms less.
  const double now = 1024 / 0.0293, then = 1024 / (0.0293 - 0.0081);
  EXPECT_NEAR(s.cost_samples_s, then - now, 1e-6 * then);
}

TEST(Lab11Straggler, SlowComputeIsNamedAsCompute) {
  const auto s = lab11::find_straggler({per_step(1, 20, 12), per_step(1, 20.5, 12), per_step(1.2, 32, 1)}, 768);
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.phase, "compute");
  EXPECT_NEAR(s.excess_s, 0.032 - 0.02025, 1e-9);  // over the median of the others' compute
}

TEST(Lab11Straggler, RanksWithinTheThresholdAreNoStraggler) {
  const auto s = lab11::find_straggler({per_step(1, 20, 2), per_step(1, 21.5, 1), per_step(1, 20.4, 2)}, 768, 0.1);
  EXPECT_EQ(s.rank, -1);
  EXPECT_EQ(s.phase, "");
  EXPECT_EQ(s.cost_samples_s, 0);
  // The same figures with a 5 % threshold: rank 1 (22.5 ms of work vs 21.2 median) is one.
  EXPECT_EQ(lab11::find_straggler({per_step(1, 20, 2), per_step(1, 21.5, 1), per_step(1, 20.4, 2)}, 768, 0.05).rank, 1);
}

TEST(Lab11Straggler, TheOthersMedianIsTheReferenceNotTheirMean) {
  // Four ranks: rank 3 is slowed by 10 ms of data wait; rank 0 happens to compute 6 ms more, which
  // must not shift the reference of the others (median 20, not mean 22).
  const auto s =
      lab11::find_straggler({per_step(0, 26, 10), per_step(0, 20, 16), per_step(0, 20, 16), per_step(10, 20, 6)}, 2048);
  EXPECT_EQ(s.rank, 0 + 3);
  EXPECT_EQ(s.phase, "data_wait");
  EXPECT_NEAR(s.excess_s, 0.010, 1e-9);
}

}  // namespace

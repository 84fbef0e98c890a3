// The flight recorder's dump format and the merge that names a stalled collective (flight.h).
#include "ddplab/flight.h"

#include <gtest/gtest.h>

#include "ddplab/error.h"
#include "scratch_dir.h"

namespace ddplab::flight {
namespace {

Entry entry(int64_t seq, dist::Op op, int64_t n, State s) {
  Entry e;
  e.seq = seq;
  e.op = op;
  e.shape = {n};
  e.dtype = "float";
  e.enqueued_s = 0.1 * static_cast<double>(seq);
  e.ended_s = s == State::kEnqueued ? -1 : e.enqueued_s + 0.01;
  e.state = s;
  return e;
}

/// A rank that completed collectives [0, n) of the same all-reduce, then `last` if given.
Dump rank_dump(int rank, int world, int64_t n, std::optional<Entry> last = std::nullopt) {
  Dump d;
  d.rank = rank;
  d.world = world;
  for (int64_t k = 0; k < n; ++k) d.entries.push_back(entry(k, dist::Op::kAllreduce, 4096, State::kCompleted));
  if (last) d.entries.push_back(*last);
  return d;
}

TEST(FlightDiagnose, ARankWithoutADumpHoldsUpTheOnesWaiting) {
  std::vector<std::optional<Dump>> dumps = {rank_dump(0, 3, 5, entry(5, dist::Op::kAllreduce, 4096, State::kFailed)),
                                            rank_dump(1, 3, 5, entry(5, dist::Op::kAllreduce, 4096, State::kEnqueued)),
                                            std::nullopt};
  const Stall s = diagnose(dumps);
  EXPECT_EQ(s.seq, 5);
  EXPECT_EQ(s.cause, "no dump");
  EXPECT_EQ(s.waiting, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.holding, (std::vector<int>{2}));
  EXPECT_NE(s.said.find("rank 2 left no dump"), std::string::npos) << s.said;
}

TEST(FlightDiagnose, ARankThatNeverEnteredTheCollectiveIsNamed) {
  std::vector<std::optional<Dump>> dumps = {rank_dump(0, 2, 7, entry(7, dist::Op::kAllreduce, 4096, State::kFailed)),
                                            rank_dump(1, 2, 7)};
  const Stall s = diagnose(dumps);
  EXPECT_EQ(s.seq, 7);
  EXPECT_EQ(s.cause, "not entered");
  EXPECT_EQ(s.waiting, (std::vector<int>{0}));
  EXPECT_EQ(s.holding, (std::vector<int>{1}));
  EXPECT_NE(s.said.find("rank 1 never entered it: its last is #6"), std::string::npos) << s.said;
}

TEST(FlightDiagnose, DifferentCollectivesAtOneNumberAreAMismatchEvenWhenBothCompleted) {
  // Rank 0 issued an extra 1-element all-reduce as #3; Gloo paired it with rank 1's gradients.
  Dump a = rank_dump(0, 3, 3, entry(3, dist::Op::kAllreduce, 1, State::kCompleted));
  a.entries.push_back(entry(4, dist::Op::kAllreduce, 4096, State::kFailed));
  Dump b = rank_dump(1, 3, 3, entry(3, dist::Op::kAllreduce, 4096, State::kCompleted));
  Dump c = rank_dump(2, 3, 3, entry(3, dist::Op::kAllreduce, 4096, State::kFailed));
  const Stall s = diagnose({a, b, c});
  EXPECT_EQ(s.seq, 3);
  EXPECT_EQ(s.cause, "mismatch");
  EXPECT_EQ(s.holding, (std::vector<int>{0}));  // the odd one out of three
  EXPECT_EQ(s.waiting, (std::vector<int>{1, 2}));
  EXPECT_NE(s.said.find("rank 0 allreduce float[1]"), std::string::npos) << s.said;
}

TEST(FlightDiagnose, TwoRanksThatDisagreeAreBothNamedForNeitherIsTheMajority) {
  const Stall s = diagnose({rank_dump(0, 2, 2, entry(2, dist::Op::kAllreduce, 1, State::kFailed)),
                            rank_dump(1, 2, 2, entry(2, dist::Op::kAllgather, 1, State::kFailed))});
  EXPECT_EQ(s.seq, 2);
  EXPECT_EQ(s.cause, "mismatch");
  EXPECT_TRUE(s.waiting.empty());
  EXPECT_EQ(s.holding, (std::vector<int>{0, 1}));
}

TEST(FlightDiagnose, NothingWaitingIsNoStall) {
  const Stall s = diagnose({rank_dump(0, 2, 4), rank_dump(1, 2, 4)});
  EXPECT_EQ(s.seq, -1);
  EXPECT_EQ(s.cause, "");
}

TEST(FlightDiagnose, OnlyTheRingsEntriesCountNotWhatTheyLeftOut) {
  // A ring of 4 that kept the first four of ten collectives: all completed, so the dumps show no
  // stall at all, although rank 0 waits in #9. The merge can only say what the rings kept.
  Dump a = rank_dump(0, 2, 4), b = rank_dump(1, 2, 4);
  EXPECT_EQ(diagnose({a, std::nullopt}).seq, -1);
  a.entries.erase(a.entries.begin());
  a.entries.push_back(entry(9, dist::Op::kAllreduce, 4096, State::kFailed));
  EXPECT_EQ(diagnose({a, std::nullopt}).seq, 9);
}

class FlightDumps : public ddplab::testing::ScratchTest {};

TEST_F(FlightDumps, RoundTripThroughTheFolderAndTheTable) {
  Dump a = rank_dump(0, 3, 2, entry(2, dist::Op::kAllreduce, 4096, State::kFailed));
  a.reason = "collective #2 timed out";
  write_dump(scratch_.dir(), a);
  const auto dumps = read_dumps(scratch_.dir(), 3);
  ASSERT_EQ(dumps.size(), 3u);
  ASSERT_TRUE(dumps[0].has_value());
  EXPECT_FALSE(dumps[1].has_value());
  EXPECT_EQ(dumps[0]->entries, a.entries);
  EXPECT_EQ(dumps[0]->reason, a.reason);
  const Stall s = diagnose(dumps);
  const std::string t = table(dumps, s);
  EXPECT_NE(t.find("2 <"), std::string::npos) << t;
  EXPECT_NE(t.find("allreduce float[4096] failed"), std::string::npos) << t;
  EXPECT_NE(t.find("(no dump)"), std::string::npos) << t;
}

TEST_F(FlightDumps, AMalformedDumpNamesItsFileAndEntry) {
  nlohmann::json j = to_json(rank_dump(1, 2, 1));
  j["entries"][0]["state"] = "sleeping";
  EXPECT_THROW(
      {
        try {
          from_json(j, "x/rank1.json");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("x/rank1.json: entries[0]: unknown state 'sleeping'"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(read_dumps(scratch_.dir()), Error);  // an empty folder
}

}  // namespace
}  // namespace ddplab::flight

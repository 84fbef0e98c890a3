// Run report: schema fields, atomic write, load validation, sample ledger digests, parameter digest.
#include "ddplab/report.h"

#include <sched.h>

#include "ddplab/launch.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "ddplab/error.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;

namespace {

TEST(RunReport, AVerdictIsRecordedOnceUnderItsIdAndABadIdIsRefused) {
  ddplab::RunReport r("lab04_grad_sync", 1, 2);
  r.verdict("order_in_layout", true, "launch order: the layout's", {{"steps", 16}});
  r.verdict("params_identical", false, "parameters at the end: DIFFERENT");
  r.verdict("order_in_layout", false, "launch order: NOT the layout's", {{"first_bad_step", 3}});  // replaces
  const auto& v = r.json()["verdicts"];
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v["order_in_layout"]["ok"], false);
  EXPECT_EQ(v["order_in_layout"]["said"], "launch order: NOT the layout's");
  EXPECT_EQ(v["order_in_layout"]["figures"]["first_bad_step"], 3);
  EXPECT_EQ(v["params_identical"]["figures"], nlohmann::json::object());
  for (const char* bad : {"", "Order", "order-in-layout", "a b"}) {
    EXPECT_THROW(r.verdict(bad, true, "x"), ddplab::Error) << "'" << bad << "'";
  }
}

TEST(SampleLedger, SetDigestIsOrderIndependentOrderDigestIsNot) {
  ddplab::SampleLedger a, b;
  a.add(std::vector<uint64_t>{1, 2, 3, 4});
  b.add(std::vector<uint64_t>{4, 3, 2, 1});
  EXPECT_EQ(a.set_digest(), b.set_digest());
  EXPECT_NE(a.order_digest(), b.order_digest());
  EXPECT_EQ(a.count(), 4u);
  EXPECT_EQ(a.head(), (std::vector<uint64_t>{1, 2, 3, 4}));
}

TEST(SampleLedger, ShardsAddUpToTheRangeDigestOnlyWhenDisjointAndCovering) {
  ddplab::SampleLedger r0, r1, dup;
  for (uint64_t i = 0; i < 100; i += 2) r0.add(i);
  for (uint64_t i = 1; i < 100; i += 2) r1.add(i);
  EXPECT_EQ(r0.set_digest() + r1.set_digest(), ddplab::SampleLedger::range_set_digest(0, 100));
  for (uint64_t i = 0; i < 100; ++i) dup.add(i < 50 ? i : i - 50);  // samples 0..49 twice
  EXPECT_NE(dup.set_digest(), ddplab::SampleLedger::range_set_digest(0, 100));
}

TEST(SampleLedger, CountsPartlyOverlappingShardsExactlyFromTheirBitmaps) {
  // Two ranks each take 50 of 100 samples, the second starting 2 positions after the first (a
  // block offset by rank x world instead of rank x share): 100 processed, 52 distinct. The digests
  // alone can only say "at most 100".
  ddplab::SampleLedger r0, r1;
  for (uint64_t i = 0; i < 50; ++i) r0.add(i);
  for (uint64_t i = 2; i < 52; ++i) r1.add(i);
  const std::vector<uint64_t> sets{r0.set_digest(), r1.set_digest()}, samples{50, 50};
  const auto blind = ddplab::epoch_unique_samples(sets, samples, 100);
  EXPECT_EQ(blind.unique, 100u);
  EXPECT_FALSE(blind.exact);
  const auto exact = ddplab::epoch_unique_samples(sets, samples, 100, {r0.seen(), r1.seen()});
  EXPECT_EQ(exact.unique, 52u);
  EXPECT_TRUE(exact.exact);
  EXPECT_FALSE(exact.replicated);
  // Disjoint and covering: all 100; indices past n do not count.
  ddplab::SampleLedger a, b;
  for (uint64_t i = 0; i < 100; i += 2) a.add(i);
  for (uint64_t i = 1; i < 100; i += 2) b.add(i);
  b.add(130);
  EXPECT_EQ(ddplab::epoch_unique_samples({a.set_digest(), b.set_digest()}, {50, 51}, 100, {a.seen(), b.seen()}).unique,
            100u);
  // Every rank the same: one rank's share, flagged as replicated.
  const auto same =
      ddplab::epoch_unique_samples({r0.set_digest(), r0.set_digest()}, {50, 50}, 100, {r0.seen(), r0.seen()});
  EXPECT_EQ(same.unique, 50u);
  EXPECT_TRUE(same.replicated);
  // One rank without a bitmap: back to the digests.
  EXPECT_FALSE(ddplab::epoch_unique_samples(sets, samples, 100, {r0.seen()}).exact);
}

TEST(SampleLedger, DropsItsBitmapPastTheCap) {
  ddplab::SampleLedger led;
  led.add(3);
  EXPECT_TRUE(led.seen_complete());
  EXPECT_EQ(led.seen().size(), 1u);
  led.add(ddplab::SampleLedger::kSeenCap);
  EXPECT_FALSE(led.seen_complete());
  EXPECT_TRUE(led.seen().empty());
  led.add(5);  // stays dropped
  EXPECT_FALSE(led.seen_complete());
  EXPECT_EQ(led.count(), 3u);
}

TEST(SampleLedger, BitmapTextRoundTripsAndBadTextNamesWhere) {
  for (const std::vector<uint64_t>& words :
       std::vector<std::vector<uint64_t>>{{},
                                          {1},
                                          {0xFFFFFFFFFFFFFFFFULL, 0x8000000000000001ULL},
                                          {7, 0, 0x0123456789ABCDEFULL}}) {
    EXPECT_EQ(ddplab::decode_seen(ddplab::encode_seen(words), "x"), words);
  }
  EXPECT_EQ(ddplab::encode_seen({1}), "AQAAAAAAAAA=");  // bytes 01 00 .. 00, as any base64 tool writes them
  try {
    ddplab::decode_seen("AQAA*AAAAAA=", "rank 1's report: epochs.0.seen");
    FAIL() << "no error";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1's report: epochs.0.seen"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("character 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ddplab::decode_seen("AQA", "x"), ddplab::Error);       // not a multiple of 4
  EXPECT_THROW(ddplab::decode_seen("AQAAAA==", "x"), ddplab::Error);  // 4 bytes: not a word
}

TEST(ParameterDigest, EqualForEqualWeightsDifferentAfterAnyChange) {
  torch::manual_seed(1);
  torch::nn::Linear a(5, 3);
  torch::nn::Linear b(5, 3);
  {
    torch::NoGradGuard g;
    b->weight.copy_(a->weight);
    b->bias.copy_(a->bias);
  }
  EXPECT_EQ(ddplab::parameter_digest(*a), ddplab::parameter_digest(*b));
  {
    torch::NoGradGuard g;
    b->bias[2] += 1e-6f;
  }
  EXPECT_NE(ddplab::parameter_digest(*a), ddplab::parameter_digest(*b));
  EXPECT_EQ(ddplab::parameter_digest(*a).size(), 16u);
}

TEST(RunReport, WritesVersionedReportAtomicallyAndLoadsIt) {
  const ddplab::testing::ScratchDir scratch;
  const fs::path dir = scratch.dir();
  ddplab::RunReport r("lab01", 1, 2);
  r.set_config({{"batch", 512}});
  r.add_step(0, 0.7);
  r.add_step(0, 0.6);
  ddplab::SampleLedger led;
  led.add(std::vector<uint64_t>{5, 6});
  r.add_epoch(0, 2, led, 1.5);
  ddplab::StepTimer t;
  t.add(ddplab::Phase::kForward, 0.5);
  for (double wait : {0.001, 0.004, 0.002}) {
    t.begin_step();
    t.add(ddplab::Phase::kDataWait, wait);
    t.end_step();
  }
  r.set_phases(t);
  r.set_samples(1024, 1024);
  r.add_not_attempted("01.2");
  r.add_not_attempted("01.2");  // recorded once
  r.set_status("not_attempted");
  r.capture_memory();
  const std::string path = (dir / "sub" / "rank1.json").string();
  r.write(path);
  // No temporary file is left behind.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir / "sub")) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1u);

  const auto j = ddplab::RunReport::load(path);
  EXPECT_EQ(j["schema"], "ddplab.run-report");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["steps"]["loss"].size(), 2u);
  EXPECT_EQ(j["epochs"][0]["samples"], 2);
  EXPECT_EQ(j["epochs"][0]["set_digest"], ddplab::hex64(led.set_digest()));
  EXPECT_EQ(ddplab::decode_seen(j["epochs"][0]["seen"].get<std::string>(), "seen"),
            std::vector<uint64_t>{(1u << 5) | (1u << 6)});
  EXPECT_DOUBLE_EQ(j["phases"]["forward"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["phases"]["data_wait"].get<double>(), 0.007);
  EXPECT_DOUBLE_EQ(j["phases"]["step_medians"]["data_wait"].get<double>(), 0.002);  // each step's, the middle one
  EXPECT_DOUBLE_EQ(j["phases"]["step_medians"]["forward"].get<double>(), 0.0);      // outside every step
  EXPECT_EQ(j["not_attempted"], nlohmann::json::array({"01.2"}));
  EXPECT_GT(j["memory"]["peak_rss_bytes"].get<uint64_t>(), 0u);
}

TEST(RunReport, SaysWhichCoresTheRankHad) {
  // A rank bound by `ddplab launch --bind` has one core of two; the report must show it, so a
  // 1-rank and a 2-rank run are compared on what each rank had.
  cpu_set_t saved;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(saved), &saved), 0);
  const std::vector<int> cores = ddplab::allowed_cpus();
  ASSERT_FALSE(cores.empty());
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cores.back(), &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
  ddplab::RunReport r("lab03", 1, 2);
  r.set_device("cpu", 1);
  ::sched_setaffinity(0, sizeof(saved), &saved);
  EXPECT_EQ(r.json().at("cores"), std::to_string(cores.back()));
  EXPECT_EQ(r.json().at("threads"), 1);
}

TEST(RunReport, LoadRejectsGarbageWrongSchemaAndVersion) {
  const ddplab::testing::ScratchDir scratch;
  const fs::path dir = scratch.dir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  try {
    ddplab::RunReport::load(write("garbage.json", "{\"schema\": "));
    FAIL();
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("garbage.json is not valid JSON at byte"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ddplab::RunReport::load(write("other.json", "{\"schema\": \"x\", \"version\": 1}")), ddplab::Error);
  try {
    ddplab::RunReport::load(write("v9.json", "{\"schema\": \"ddplab.run-report\", \"version\": 9}"));
    FAIL();
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has version 9"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ddplab::RunReport::load((dir / "missing.json").string()), ddplab::Error);
}

TEST(WriteFileAtomic, FailureNamesThePathAndLeavesNoTemporary) {
  const ddplab::testing::ScratchDir scratch;
  const fs::path dir = scratch.dir();
  const fs::path blocker = dir / "file";
  std::ofstream(blocker) << "x";
  // A path below a regular file cannot be created.
  const std::string bad = (blocker / "report.json").string();
  try {
    ddplab::write_file_atomic(bad, "{}");
    FAIL();
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("report.json"), std::string::npos) << e.what();
  }
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1u);
}

}  // namespace

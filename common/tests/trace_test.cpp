// The timeline (--trace): the Chrome Trace Event shape, phases nested in their steps, the
// first/last-N bound, collectives on their own track (through a real Gloo group), merge and the
// atomic write. Only the order of clock readings is asserted, never a duration.
#include "ddplab/trace.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "thread_ranks.h"
#include "ddplab/config.h"
#include "ddplab/error.h"
#include "ddplab/options.h"
#include "ddplab/timer.h"
#include "scratch_dir.h"

namespace {

using ddplab::Phase;
using ddplab::StepTimer;
using ddplab::trace::Recorder;
using nlohmann::json;

/// One step as train_step times it, on a timer that records on `rec`.
void fake_step(StepTimer& t) {
  t.begin_step();
  for (Phase p : {Phase::kDataWait, Phase::kForward, Phase::kBackward, Phase::kComm, Phase::kOptimizer}) {
    auto s = t.scope(p);
  }
  t.end_step();
}

json events_of(const json& doc, const std::string& ph) {
  json out = json::array();
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == ph) out.push_back(e);
  return out;
}

std::vector<int64_t> step_numbers(const json& doc) {
  std::vector<int64_t> s;
  for (const auto& e : events_of(doc, "X"))
    if (e["cat"] == "step") s.push_back(e["args"]["step"].get<int64_t>());
  return s;
}

TEST(Trace, EveryEventHasTheChromeFieldsAndPhasesNestInTheirStep) {
  Recorder rec(3, 4, 0);
  StepTimer t;
  t.set_trace(&rec);
  for (int i = 0; i < 3; ++i) fake_step(t);
  const json doc = json::parse(rec.to_json());

  ASSERT_TRUE(doc["traceEvents"].is_array());
  for (const auto& e : doc["traceEvents"]) {
    for (const char* k : {"name", "ph", "ts", "dur", "pid", "tid"}) EXPECT_TRUE(e.contains(k)) << k << " in " << e;
    EXPECT_EQ(e["pid"], 3);
  }
  bool named = false;
  for (const auto& e : events_of(doc, "M"))
    if (e["name"] == "process_name") named = e["args"]["name"] == "rank 3";
  EXPECT_TRUE(named);
  EXPECT_EQ(step_numbers(doc), (std::vector<int64_t>{0, 1, 2}));

  // Each phase lies inside exactly the step of its number, on the steps track.
  std::map<int64_t, std::pair<double, double>> steps;
  for (const auto& e : events_of(doc, "X"))
    if (e["cat"] == "step")
      steps[e["args"]["step"]] = {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
  std::map<std::string, int> phases;
  for (const auto& e : events_of(doc, "X")) {
    if (e["cat"] != "phase") continue;
    ++phases[e["name"]];
    EXPECT_EQ(e["tid"], ddplab::trace::kStepsTid);
    const double b = e["ts"].get<double>(), end = b + e["dur"].get<double>();
    int inside = 0;
    for (const auto& [n, span] : steps) inside += b >= span.first && end <= span.second + 1e-3;
    EXPECT_EQ(inside, 1) << e;
  }
  for (const char* p : {"data_wait", "forward", "backward", "comm", "optimizer"}) EXPECT_EQ(phases[p], 3) << p;
  EXPECT_EQ(doc["otherData"]["schema"], "ddplab.trace");
  EXPECT_EQ(doc["otherData"]["world_size"], 4);
  EXPECT_EQ(doc["otherData"]["steps_total"], 3);
}

TEST(Trace, KeepsTheFirstAndLastNSteps) {
  Recorder rec(0, 1, 3);
  StepTimer t;
  t.set_trace(&rec);
  for (int i = 0; i < 10; ++i) fake_step(t);
  // The loader's last, empty fetch: a step begun and cancelled leaves nothing behind.
  t.begin_step();
  { auto s = t.scope(Phase::kDataWait); }
  t.cancel_step();
  const json doc = json::parse(rec.to_json());
  EXPECT_EQ(step_numbers(doc), (std::vector<int64_t>{0, 1, 2, 7, 8, 9}));
  EXPECT_EQ(doc["otherData"]["steps_kept"], json::parse("[[0,3],[7,10]]"));
  int phases = 0;
  for (const auto& e : events_of(doc, "X")) phases += e["cat"] == "phase";
  EXPECT_EQ(phases, 6 * 5);

  // Fewer than 2N steps: all of them, once.
  Recorder few(0, 1, 3);
  StepTimer t2;
  t2.set_trace(&few);
  for (int i = 0; i < 5; ++i) fake_step(t2);
  EXPECT_EQ(step_numbers(json::parse(few.to_json())), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Trace, FileStaysSmallOverALongRun) {
  // 10,000 steps with the default bound: the file holds 100 steps, whatever the run's length.
  Recorder rec(0, 1, 50);
  StepTimer t;
  t.set_trace(&rec);
  for (int i = 0; i < 10000; ++i) fake_step(t);
  EXPECT_EQ(step_numbers(json::parse(rec.to_json())).size(), 100u);
  EXPECT_LT(rec.to_json().size(), 100u * 1024u);
}

#ifdef DDPLAB_HAVE_GLOO
TEST(Trace, CollectivesGoOnTheirOwnTrackWithOpBytesAndSequence) {
  ddplab::testing::run_ranks(2, [](ddplab::dist::ProcessGroup& pg) {
    auto rec = std::make_shared<Recorder>(pg.rank(), 2, 0);
    pg.set_trace(rec);
    StepTimer t;
    t.set_trace(rec.get());
    auto before = torch::ones({16});
    pg.allreduce(before);  // outside any step
    t.begin_step();
    std::shared_ptr<ddplab::dist::Pending> a, b;
    auto ga = torch::ones({256}), gb = torch::ones({8});
    {
      auto s = t.scope(Phase::kBackward);
      a = pg.allreduce_async(ga);  // two in flight at once, as bucketed overlap launches them
      b = pg.allreduce_async(gb);
    }
    {
      auto s = t.scope(Phase::kComm);
      a->wait();
      b->wait();
    }
    t.end_step();
    const json doc = json::parse(rec->to_json());

    std::map<int, std::string> threads;
    for (const auto& e : events_of(doc, "M"))
      if (e["name"] == "thread_name") threads[e["tid"]] = e["args"]["name"];
    json backward;
    for (const auto& e : events_of(doc, "X"))
      if (e["name"] == "backward") backward = e;
    ASSERT_FALSE(backward.is_null());
    std::vector<json> colls;
    for (const auto& e : events_of(doc, "X"))
      if (e["cat"] == "collective") colls.push_back(e);
    ASSERT_EQ(colls.size(), 3u);
    std::set<int> async_tids;
    for (const auto& e : colls) {
      EXPECT_GE(e["tid"].get<int>(), ddplab::trace::kCollectivesTid);
      EXPECT_EQ(threads[e["tid"]].rfind("collectives", 0), 0u) << e;
      EXPECT_EQ(e["args"]["op"], "allreduce");
      if (e["args"]["async"] == true) {
        async_tids.insert(e["tid"].get<int>());
        EXPECT_EQ(e["args"]["step"], 0);
        // Launched inside backward, completed in the comm phase: the bar starts under backward.
        EXPECT_GE(e["ts"].get<double>(), backward["ts"].get<double>());
        EXPECT_LE(e["ts"].get<double>(), backward["ts"].get<double>() + backward["dur"].get<double>());
      } else {
        EXPECT_EQ(e["args"]["step"], -1);
        EXPECT_EQ(e["args"]["bytes"], 16 * 4);
        EXPECT_EQ(e["args"]["seq"], 1);
      }
    }
    EXPECT_EQ(async_tids.size(), 2u) << "two collectives in flight at once need two lanes";
    std::set<int64_t> bytes, seqs;
    for (const auto& e : colls)
      bytes.insert(e["args"]["bytes"].get<int64_t>()), seqs.insert(e["args"]["seq"].get<int64_t>());
    EXPECT_EQ(bytes, (std::set<int64_t>{64, 1024, 32}));
    EXPECT_EQ(seqs, (std::set<int64_t>{1, 2, 3}));
  });
}
#endif

json rank_doc(int rank, int64_t origin_steady_ns, const std::string& boot) {
  Recorder rec(rank, 2, 0);
  StepTimer t;
  t.set_trace(&rec);
  fake_step(t);
  fake_step(t);
  json doc = json::parse(rec.to_json());
  doc["otherData"]["origin_steady_ns"] = origin_steady_ns;
  doc["otherData"]["boot_id"] = boot;
  return doc;
}

TEST(Trace, MergeKeepsRanksApartAlignsTheirOriginsAndSortsByTs) {
  // Rank 1 started its clock 2 ms after rank 0: its events move 2000 us later.
  const json r0 = rank_doc(0, 5'000'000, "boot-a"), r1 = rank_doc(1, 7'000'000, "boot-a");
  const auto m = ddplab::trace::merge({{"rank1.json", r1}, {"rank0.json", r0}});
  EXPECT_EQ(m.alignment, "steady_clock");
  EXPECT_EQ(m.shift_us, (std::vector<double>{2000.0, 0.0}));
  std::set<int> pids;
  double last = -1;
  bool metadata_done = false;
  size_t x = 0;
  for (const auto& e : m.doc["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "M") {
      EXPECT_FALSE(metadata_done) << "metadata events come first";
      continue;
    }
    metadata_done = true;
    ++x;
    EXPECT_GE(e["ts"].get<double>(), last);
    last = e["ts"].get<double>();
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(x, events_of(r0, "X").size() + events_of(r1, "X").size());
  double first_r1 = 1e18;
  for (const auto& e : events_of(m.doc, "X"))
    if (e["pid"] == 1) first_r1 = std::min(first_r1, e["ts"].get<double>());
  EXPECT_GE(first_r1, 2000.0);

  // Two machines: steady clocks are unrelated, so the system clocks align them.
  EXPECT_EQ(ddplab::trace::merge({{"a", rank_doc(0, 1, "boot-a")}, {"b", rank_doc(1, 2, "boot-b")}}).alignment,
            "system_clock");
  // The same rank twice is a mistake (one file given twice); the error names both files.
  try {
    ddplab::trace::merge({{"x/rank0.json", r0}, {"y/rank0.json", r0}});
    FAIL() << "no error";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("x/rank0.json and y/rank0.json both hold rank 0"), std::string::npos)
        << e.what();
  }
}

TEST(Trace, WriteIsAtomicAndLoadNamesWhatIsWrong) {
  const ddplab::testing::ScratchDir scratch;
  const auto dir = scratch.dir();
  const std::string path = (dir / "sub" / "rank0.json").string();
  Recorder rec(0, 1, 0);
  StepTimer t;
  t.set_trace(&rec);
  fake_step(t);
  rec.write(path);
  rec.write(path);  // an existing file is replaced, not appended to
  EXPECT_EQ(ddplab::trace::load(path)["otherData"]["steps_total"], 1);
  for (const auto& f : std::filesystem::directory_iterator(dir / "sub"))
    EXPECT_EQ(f.path().filename(), "rank0.json") << "temporary file left behind";
  // A folder in the way: the error names the path, and no half-written file is left.
  std::filesystem::create_directories(dir / "taken");
  EXPECT_THROW(rec.write((dir / "taken").string()), ddplab::Error);

  const std::string other = (dir / "report.json").string();
  std::ofstream(other) << R"({"schema":"ddplab.run-report"})";
  try {
    ddplab::trace::load(other);
    FAIL() << "no error";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("report.json is not a ddplab trace"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ddplab::trace::load((dir / "missing.json").string()), ddplab::Error);
}

TEST(Trace, FlagsHaveEnvironmentFallbacksAndRankInTheName) {
  ::setenv("DDPLAB_TRACE", "runs/t/rank{rank}.json", 1);
  ::setenv("DDPLAB_TRACE_STEPS", "7", 1);
  CLI::App app;
  ddplab::LabOptions o;
  ddplab::add_lab_options(app, o);
  const char* argv[] = {"prog"};
  app.parse(1, const_cast<char**>(argv));
  ::unsetenv("DDPLAB_TRACE");
  ::unsetenv("DDPLAB_TRACE_STEPS");
  EXPECT_EQ(o.trace_path(2), "runs/t/rank2.json");
  EXPECT_EQ(o.trace_steps, 7);
  EXPECT_EQ(ddplab::LabOptions{}.trace_path(0), "");  // off by default
  o.trace_steps = -1;
  EXPECT_THROW(ddplab::validate(o), ddplab::ConfigError);
}

}  // namespace

// Tests of batch grading and calibration without argv or a lab run: the gradebook CSV, which
// submissions a batch folder holds, what grade_batch does per student (a stand-in grades), and the
// figures a calibration stores, keyed by check id.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "ddplab/data/shard.h"
#include "ddplab/error.h"
#include "ddplab/launch.h"
#include "ddplab/grader/batch.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace ddplab::grader;

namespace {

class Batch : public ::testing::Test {
 protected:
  std::string read(const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  /// A lab spec as the stand-in grader sees it: only its id and points matter here.
  static LabSpec lab(const std::string& id, double points) {
    LabSpec s;
    s.id = id;
    CheckSpec c;
    c.points = points;
    s.checks = {c};
    return s;
  }
  /// A lab whose checks have these ids and kinds, the first worth `points`.
  static LabSpec lab_of(const std::string& id, const std::vector<std::pair<std::string, std::string>>& checks,
                        double points = 10) {
    LabSpec s = lab(id, points);
    s.checks.clear();
    for (const auto& [check_id, kind] : checks) {
      CheckSpec c;
      c.id = check_id;
      c.kind = kind;
      c.points = s.checks.empty() ? points : 0;
      s.checks.push_back(c);
    }
    return s;
  }
  static LabResult result(const std::string& lab, double score, double max) {
    LabResult r;
    r.lab = lab;
    r.title = lab;
    r.score = score;
    r.max_score = max;
    return r;
  }
  /// The meta.json of a 10 + 5 sample data set (no shards: only the metadata is read here).
  static ddplab::data::Metadata small_meta() {
    ddplab::data::Metadata meta;
    meta.train_count = 10;
    meta.test_count = 5;
    meta.shard_size = 10;
    meta.train_shards = {"train-0.bin"};
    meta.test_shards = {"test-0.bin"};
    return meta;
  }
  void write_meta(const std::string& folder, const ddplab::data::Metadata& meta) {
    fs::create_directories(dir_ / folder);
    ddplab::data::write_metadata((dir_ / folder).string(), meta);
  }
  ddplab::testing::ScratchDir scratch_;
  const fs::path dir_ = scratch_.dir();
};

TEST_F(Batch, TheGradebookHasOneQuotedRowPerStudentAndLab) {
  Gradebook book;
  book.rows.push_back({"alice", "lab03_sampler", 100, 100, {}, false, ""});
  book.rows.push_back({"bob, jr.", "lab03_sampler", 42.5, 100, {"03.2", "03.4"}, true, ""});
  book.rows.push_back({"carol", "lab03_sampler", 0, 100, {}, false, "bad.zip: unzip failed: \"crc error\""});
  EXPECT_EQ(book.csv(),
            "student,lab,score,max_score,not_attempted,build_error\n"
            "alice,lab03_sampler,100,100,,\n"
            "\"bob, jr.\",lab03_sampler,42.5,100,03.2 03.4,yes\n"
            "carol,lab03_sampler,0,100,,\"bad.zip: unzip failed: \"\"crc error\"\"\"\n");
}

TEST_F(Batch, ARejectedSubmissionSaysWhyInTheGradebook) {
  fs::create_directories(dir_ / "in" / "dave");
  const GradeFn fake = [&](const std::vector<LabSpec>& specs, const GradeOptions&) {
    std::vector<LabResult> rs = {result(specs[0].id, 0, 10)};
    rs[0].rule_errors = {"lab03_student.cpp:4: edited outside the STUDENT CODE regions: line added: `#include <map>`"};
    return rs;
  };
  GradeOptions o;
  o.out_dir = (dir_ / "out").string();
  const auto book = grade_batch(
      {lab("lab03_sampler", 10)}, o, (dir_ / "in").string(), [](const std::string&) {}, fake);
  EXPECT_EQ(book.csv(),
            "student,lab,score,max_score,not_attempted,build_error\n"
            "dave,lab03_sampler,0,10,,rejected: lab03_student.cpp:4: edited outside the STUDENT CODE regions: line "
            "added: `#include <map>`\n");
}

TEST_F(Batch, ASubmissionIsAFolderOrAZip) {
  fs::create_directories(dir_ / "in" / "bob");
  fs::create_directories(dir_ / "in" / "alice");
  std::ofstream(dir_ / "in" / "carol.zip") << "PK";
  std::ofstream(dir_ / "in" / "notes.txt") << "not a submission";
  const auto subs = batch_submissions((dir_ / "in").string());
  ASSERT_EQ(subs.size(), 3u);
  EXPECT_EQ(student_of(subs[0]), "alice");
  EXPECT_EQ(student_of(subs[1]), "bob");
  EXPECT_EQ(student_of(subs[2]), "carol");
  fs::create_directories(dir_ / "empty");
  EXPECT_THROW(batch_submissions((dir_ / "empty").string()), ddplab::ConfigError);
  EXPECT_THROW(batch_submissions((dir_ / "nowhere").string()), ddplab::ConfigError);
}

TEST_F(Batch, EachStudentIsGradedAsASubmissionAndABrokenOneDoesNotStopTheBatch) {
  fs::create_directories(dir_ / "in" / "alice");
  std::ofstream(dir_ / "in" / "bob.zip") << "corrupt";
  fs::create_directories(dir_ / "in" / "carol");
  std::vector<GradeOptions> seen;
  const GradeFn fake = [&](const std::vector<LabSpec>& specs, const GradeOptions& o) {
    seen.push_back(o);
    if (o.submission.find("bob") != std::string::npos) throw ddplab::Error("bob.zip: unzip failed (status 9)");
    std::vector<LabResult> rs;
    for (const auto& s : specs) {
      rs.push_back(result(s.id, o.submission.find("alice") != std::string::npos ? 10 : 4, 10));
    }
    rs.back().not_attempted = {"03.2"};
    return rs;
  };
  GradeOptions o;
  o.out_dir = (dir_ / "out").string();
  o.tree = "solutions";
  std::string printed;
  const auto book = grade_batch(
      {lab("lab03_sampler", 10)}, o, (dir_ / "in").string(), [&](const std::string& s) { printed += s; }, fake);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].tree, "submission");
  EXPECT_EQ(seen[0].submission, fs::absolute(dir_ / "in" / "alice").string());
  EXPECT_EQ(seen[0].out_dir, (dir_ / "out" / "alice").string());
  EXPECT_EQ(seen[1].out_dir, (dir_ / "out" / "bob").string());
  EXPECT_TRUE(fs::exists(dir_ / "out" / "alice" / "results.json"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "carol" / "junit.xml"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "bob" / "results.json"));
  const std::string csv =
      "student,lab,score,max_score,not_attempted,build_error\n"
      "alice,lab03_sampler,10,10,03.2,\n"
      "bob,lab03_sampler,0,10,,bob.zip: unzip failed (status 9)\n"
      "carol,lab03_sampler,4,10,03.2,\n";
  EXPECT_EQ(book.csv(), csv);
  EXPECT_EQ(read(dir_ / "out" / "gradebook.csv"), csv);
  EXPECT_NE(printed.find("== alice\n"), std::string::npos);
  EXPECT_NE(printed.find("bob: bob.zip: unzip failed"), std::string::npos);
  EXPECT_NE(printed.find("gradebook: " + (dir_ / "out" / "gradebook.csv").string()), std::string::npos);

  // A spec or option problem is not one student's: it stops the batch.
  const GradeFn config_error = [](const std::vector<LabSpec>&, const GradeOptions&) -> std::vector<LabResult> {
    throw ddplab::ConfigError("--check: no check of lab03_sampler matches");
  };
  EXPECT_THROW(grade_batch(
                   {lab("lab03_sampler", 10)}, o, (dir_ / "in").string(), [](const std::string&) {}, config_error),
               ddplab::ConfigError);
}

TEST_F(Batch, CalibrationStoresEachFigureByLabAndCheckId) {
  write_meta("data", small_meta());
  GradeOptions o;
  o.data_dir = (dir_ / "data").string();
  o.out_dir = (dir_ / "out").string();
  o.tree = "labs";
  o.submission = "alice.zip";
  std::vector<GradeOptions> seen;
  const GradeFn fake = [&](const std::vector<LabSpec>& specs, const GradeOptions& go) {
    seen.push_back(go);
    LabResult r = result(specs.at(0).id, 9, 10);
    CheckResult auc;
    auc.id = "test_auc";
    auc.name = "test AUC within 0.01 of the reference";
    auc.figure = 0.7512;
    CheckResult no_figure;
    no_figure.id = "runs";
    r.checks = {auc, no_figure};
    return std::vector<LabResult>{r};
  };
  const std::string path = (dir_ / "calibration.json").string();
  std::string printed;
  // Only the checks relative to the reference are graded: lab01's auc, not its run_ok; a lab
  // without one is not graded at all.
  const LabSpec lab01 = lab_of("lab01_baseline", {{"test_auc", "auc"}, {"runs", "run_ok"}});
  LabSpec exact = lab("lab02_process_group", 10);
  exact.checks[0].kind = "consistency";
  const auto cal = calibrate(
      {lab01, exact}, o, path, [&](const std::string& s) { printed += s; }, fake);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].only_checks, std::vector<std::string>{"test_auc"});
  EXPECT_NE(printed.find("lab02_process_group: no check is relative to the reference"), std::string::npos) << printed;
  EXPECT_EQ(seen[0].tree, "solutions");  // always the reference solutions
  EXPECT_TRUE(seen[0].submission.empty());
  EXPECT_EQ(seen[0].out_dir, (dir_ / "out" / "calibration").string());
  EXPECT_EQ(cal.values.size(), 1u);
  EXPECT_DOUBLE_EQ(*cal.get("lab01_baseline", "test_auc"), 0.7512);
  EXPECT_DOUBLE_EQ(*load_calibration(path, calibration_key(o.data_dir)).get("lab01_baseline", "test_auc"), 0.7512);
  EXPECT_NE(printed.find("lab01_baseline/test_auc (test AUC within 0.01 of the reference): 0.7512"), std::string::npos);
  EXPECT_NE(printed.find("warning: the reference solution of lab01_baseline scores 9 / 10 on its calibrated checks"),
            std::string::npos);
  EXPECT_NE(printed.find("calibration written to " + path), std::string::npos);
}

TEST_F(Batch, CalibrationStoresTheMedianOfThreeMeasurementsOfATimingFigure) {
  write_meta("data", small_meta());
  GradeOptions o;
  o.data_dir = (dir_ / "data").string();
  o.out_dir = (dir_ / "out").string();
  // A lab with one statistical check (auc, measured once) and one timing check (scaling): the
  // scaling figure of each grading differs, as on a shared machine, the first one lucky.
  const LabSpec lab09 = lab_of("lab09_capstone", {{"learns", "auc"}, {"scales", "scaling"}});
  const std::vector<double> efficiency = {0.627, 0.479, 0.500};
  std::vector<GradeOptions> seen;
  const GradeFn fake = [&](const std::vector<LabSpec>& specs, const GradeOptions& go) {
    LabResult r = result(specs.at(0).id, 10, 10);
    for (const auto& id : go.only_checks) {
      CheckResult c;
      c.id = id;
      c.kind = id == "scales" ? "scaling" : "auc";
      c.figure = id == "scales" ? efficiency.at(seen.size()) : 0.7512;
      r.checks.push_back(c);
    }
    seen.push_back(go);
    return std::vector<LabResult>{r};
  };
  const std::string path = (dir_ / "calibration.json").string();
  std::string printed;
  const QuietFn quiet = [](int, double, const PrintFn&) { return QuietWait{2.0, 0, true}; };  // no probing here
  const auto cal = calibrate(
      {lab09}, o, path, [&](const std::string& s) { printed += s; }, fake, quiet);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].only_checks, (std::vector<std::string>{"learns", "scales"}));
  for (size_t k = 1; k < seen.size(); ++k) {
    EXPECT_EQ(seen[k].only_checks, std::vector<std::string>{"scales"}) << "measurement " << k + 1;
  }
  for (const auto& go : seen) EXPECT_EQ(go.timing_attempts, 1) << "calibration must not re-measure on failure";
  EXPECT_DOUBLE_EQ(*cal.get("lab09_capstone", "scales"), 0.500);  // the median, not the lucky first
  EXPECT_DOUBLE_EQ(*cal.get("lab09_capstone", "learns"), 0.7512);
  const auto saved = load_calibration(path, calibration_key(o.data_dir));
  EXPECT_DOUBLE_EQ(*saved.get("lab09_capstone", "scales"), 0.500);
  EXPECT_EQ(saved.measurements.at("lab09_capstone/scales"), nlohmann::json(efficiency));
  EXPECT_FALSE(saved.measurements.contains("lab09_capstone/learns"));
  EXPECT_NE(printed.find("lab09_capstone/scales (): 0.5000, the median of 3 measurements: 0.6270, 0.4790, 0.5000"),
            std::string::npos)
      << printed;
}

TEST_F(Batch, CalibrationWaitsForAQuietMachineBeforeEachTimingMeasurement) {
  write_meta("data", small_meta());
  GradeOptions o;
  o.data_dir = (dir_ / "data").string();
  o.out_dir = (dir_ / "out").string();
  o.quiet_wait_s = 100;
  LabSpec lab09 = lab_of("lab09_capstone", {{"learns", "auc"}, {"scales", "scaling"}});
  RunSpec two;
  two.name = "two";
  two.ranks = 2;
  lab09.runs.push_back(two);
  lab09.checks[1].runs = {"two"};
  int graded = 0;
  const GradeFn fake = [&](const std::vector<LabSpec>& specs, const GradeOptions& go) {
    LabResult r = result(specs.at(0).id, 10, 10);
    for (const auto& id : go.only_checks) {
      CheckResult c;
      c.id = id;
      c.kind = id == "scales" ? "scaling" : "auc";
      c.figure = 0.5;
      r.checks.push_back(c);
    }
    ++graded;
    return std::vector<LabResult>{r};
  };
  // The machine: quiet at once, then quiet after 30 s, then still busy after the 70 s left.
  std::vector<std::pair<int, double>> asked;  // threads, wait allowed
  std::vector<int> graded_before;
  const QuietFn quiet = [&](int threads, double max_wait_s, const PrintFn&) {
    asked.emplace_back(threads, max_wait_s);
    graded_before.push_back(graded);
    const size_t k = asked.size();
    return k == 1 ? QuietWait{2.0, 0, true} : k == 2 ? QuietWait{1.9, 30, true} : QuietWait{1.0, 70, false};
  };
  std::string printed;
  calibrate(
      {lab09}, o, (dir_ / "calibration.json").string(), [&](const std::string& s) { printed += s; }, fake, quiet);
  ASSERT_EQ(asked.size(), 3u) << "one wait before each of the three measurements";
  EXPECT_EQ(graded_before, (std::vector<int>{0, 1, 2})) << "each wait comes before its measurement";
  EXPECT_EQ(asked[0], std::make_pair(2, 100.0));
  EXPECT_EQ(asked[1], std::make_pair(2, 100.0));
  EXPECT_EQ(asked[2], std::make_pair(2, 70.0)) << "the budget is for the whole lab";
  EXPECT_NE(printed.find("waited 30 s for a quiet machine before measurement 2"), std::string::npos) << printed;
  EXPECT_NE(printed.find("measurement 3 on a busy machine: 1.0 of 2 cores after waiting 70 s"), std::string::npos)
      << printed;
}

TEST_F(Batch, CalibrationIsKeyedByProcessorCoresAndDataContentNotHostOrPath) {
  // A Gradescope container gets a new host name each time, and the data set may lie elsewhere:
  // neither may void a calibration. Another data set must.
  ddplab::data::Metadata meta = small_meta();
  for (const char* d : {"a", "b"}) write_meta(d, meta);
  const std::string key = calibration_key((dir_ / "a").string());
  EXPECT_EQ(key, calibration_key((dir_ / "b").string())) << "the same data in another folder";
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(key.find(host), std::string::npos) << key;
  EXPECT_EQ(key.find(dir_.string()), std::string::npos) << key;
  EXPECT_NE(key.find(" cores | data 10 train, 5 test"), std::string::npos) << key;
  meta.seed = 7;
  write_meta("b", meta);
  EXPECT_NE(key, calibration_key((dir_ / "b").string())) << "another data set";
}

TEST_F(Batch, CalibrationIsKeyedByTheTransportOfTheMultiRankRuns) {
  // A scaling reference measured over Gloo must not judge runs over Open MPI's shared memory.
  write_meta("a", small_meta());
  const std::string a = (dir_ / "a").string();
  EXPECT_NE(calibration_key(a, "c10d"), calibration_key(a, "mpi"));
  EXPECT_NE(calibration_key(a, "mpi").find("| multi-rank runs over mpi"), std::string::npos)
      << calibration_key(a, "mpi");
  // "" and "auto" are what auto resolves to here.
  EXPECT_EQ(calibration_key(a, ""), calibration_key(a, multi_rank_backend("auto")));
  ddplab::LaunchSpec two;
  two.nproc = 2;
  EXPECT_EQ(multi_rank_backend("auto"), ddplab::mpi_launch_problem(two).empty() ? "mpi" : "c10d");
  EXPECT_EQ(multi_rank_backend("c10d"), "c10d");
}

TEST_F(Batch, ACalibrationIsStaleWhenAbsentAnotherMachinesOrMissingAFigure) {
  // ./kit main calibrates again on any of these (a build folder copied from another machine used
  // to grade silently against the spec's reference values).
  write_meta("data", small_meta());
  const std::string key = calibration_key((dir_ / "data").string());
  const std::string path = (dir_ / "calibration.json").string();
  LabSpec lab01 = lab("lab01_baseline", 10);
  lab01.checks[0].id = "test_auc";
  lab01.checks[0].kind = "auc";
  LabSpec exact = lab("lab02_process_group", 10);
  exact.checks[0].kind = "consistency";  // nothing to calibrate
  auto gaps = calibration_gaps({lab01, exact}, path, key);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0], path + " does not exist");

  Calibration other;
  other.machine = "AMD EPYC 7B13 x 64 cores | data 10 train, 5 test, seed 1, meta.json 0";
  other.values["lab01_baseline/test_auc"] = 0.75;
  save_calibration(path, other);
  gaps = calibration_gaps({lab01, exact}, path, key);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_NE(gaps[0].find("was measured on another machine or data set (AMD EPYC 7B13 x 64 cores"), std::string::npos)
      << gaps[0];

  Calibration here;
  here.machine = key;
  here.values["lab03_sampler/scaling_one_to_two"] = 0.5;
  save_calibration(path, here);
  gaps = calibration_gaps({lab01, exact}, path, key);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0], path + " holds no figure for lab01_baseline/test_auc");

  here.values["lab01_baseline/test_auc"] = 0.75;
  save_calibration(path, here);
  EXPECT_TRUE(calibration_gaps({lab01, exact}, path, key).empty());
}

}  // namespace

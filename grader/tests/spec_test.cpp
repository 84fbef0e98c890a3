// Tests of the grader's parts that need no lab run: spec parsing and validation, the selection
// of checks, submission intake (folders and zips), and the result writers' formats.
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "ddplab/error.h"
#include "ddplab/grader/checks.h"
#include "ddplab/grader/grade.h"
#include "ddplab/grader/spec.h"
#include "../src/harness_parts.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace ddplab::grader;

namespace {

class Scratch : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  std::string spec_text(const std::string& extra = "") {
    return R"([lab]
title = "Lab 09"
folder = "lab09_x"
program = "lab09_x"
manifest = ["lab09_student.cpp"]
exercises = ["09.1"]

[[run]]
name = "r"
ranks = 2
args = ["--train-samples", "1000"]

[[check]]
id = "same_params"
kind = "consistency"
name = "same parameters"
exercise = "09.1"
run = "r"
points = 40
at = "end"
)" + extra;
  }
  /// The message of the ConfigError load_spec throws for `text`.
  std::string error_of(const std::string& text) { return error_of_file(write("grade.toml", text)); }
  std::string error_of_file(const std::string& path) {
    try {
      load_spec(path);
    } catch (const ddplab::ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  }
  ddplab::testing::ScratchDir scratch_;
  const fs::path dir_ = scratch_.dir();
};

TEST_F(Scratch, ParsesASpecWithKindSpecificParameters) {
  const auto s = load_spec(write("grade.toml", spec_text("visibility = \"after_due_date\"\n")));
  EXPECT_EQ(s.id, "lab09_x");  // a spec outside labs/ declares its folder, which is its id
  ASSERT_EQ(s.runs.size(), 1u);
  EXPECT_EQ(s.runs[0].ranks, 2);
  EXPECT_EQ(s.run_timeout_s, 120);
  ASSERT_EQ(s.checks.size(), 1u);
  const auto& c = s.checks[0];
  EXPECT_EQ(c.kind, "consistency");
  EXPECT_EQ(c.runs, std::vector<std::string>{"r"});
  EXPECT_EQ(c.visibility, Visibility::kAfterDueDate);
  EXPECT_EQ(c.id, "same_params");
  EXPECT_EQ(c.params.at("at"), "end");  // not a common key: handed to the plug-in
  EXPECT_EQ(c.param_lines.at("at"), 20);
  EXPECT_FALSE(c.params.contains("points"));
  // The kind's defaults are filled in, so checks read declared parameters only.
  EXPECT_EQ(c.text("diagnosis_start"),
            "initial weights not broadcast from rank 0: every rank trains its own random model");
  EXPECT_THROW(c.number("tolerance"), UndeclaredParameter);
  EXPECT_DOUBLE_EQ(s.max_score(), 40);
}

TEST_F(Scratch, ARunRunsTheLabsOwnProgramAndNamesNoOther) {
  // A run is the lab's program with its flags; the old `program = "reference"` (the tools' trainer)
  // is gone, and the key is refused like any unknown one.
  std::string text = spec_text();
  text.insert(text.find("[[check]]"), "program = \"reference\"\n\n");
  EXPECT_NE(error_of(text).find("program"), std::string::npos) << error_of(text);
  EXPECT_EQ(error_of(spec_text()), "(no error)");
}

TEST_F(Scratch, ARunMayBeExpectedToFail) {
  EXPECT_FALSE(load_spec(write("grade.toml", spec_text())).runs[0].expect_failure);
  std::string text = spec_text();
  text.insert(text.find("[[check]]"), "expect_failure = true\n\n");
  EXPECT_TRUE(load_spec(write("grade.toml", text)).runs[0].expect_failure);
  std::string mistyped = spec_text();
  mistyped.insert(mistyped.find("[[check]]"), "expect_failure = \"yes\"\n\n");
  EXPECT_NE(error_of(mistyped).find("grade.toml:13: 'expect_failure' must be true or false"), std::string::npos)
      << error_of(mistyped);
  std::string saving = spec_text();
  saving.insert(saving.find("[[check]]"), "expect_failure = true\nsave_model = true\n\n");
  EXPECT_NE(error_of(saving).find("run 'r': a run expected to stop with an error saves no model"), std::string::npos)
      << error_of(saving);
}

// Who starts a lab's multi-rank runs: the lab's choice (auto by default), a run's own over it;
// anything but auto, c10d or mpi is refused with the file, the line and the run.
TEST_F(Scratch, ALabOrARunMayPinTheTransportOfItsRanks) {
  const LabSpec plain = load_spec(write("grade.toml", spec_text()));
  EXPECT_EQ(plain.backend, "auto");
  EXPECT_EQ(plain.runs[0].backend, "");  // the lab's
  std::string lab = spec_text();
  lab.insert(lab.find("[[run]]"), "backend = \"c10d\"\n\n");
  EXPECT_EQ(load_spec(write("grade.toml", lab)).backend, "c10d");
  std::string run = spec_text();
  run.insert(run.find("[[check]]"), "backend = \"mpi\"\n\n");
  const LabSpec pinned = load_spec(write("grade.toml", run));
  EXPECT_EQ(pinned.backend, "auto");
  EXPECT_EQ(pinned.runs[0].backend, "mpi");
  std::string bad_lab = spec_text();
  bad_lab.insert(bad_lab.find("[[run]]"), "backend = \"gloo\"\n\n");
  EXPECT_NE(error_of(bad_lab).find("[lab] backend 'gloo': expected auto, c10d or mpi"), std::string::npos)
      << error_of(bad_lab);
  std::string bad_run = spec_text();
  bad_run.insert(bad_run.find("[[check]]"), "backend = \"nccl\"\n\n");
  EXPECT_NE(error_of(bad_run).find("run 'r': backend 'nccl': expected auto, c10d or mpi"), std::string::npos)
      << error_of(bad_run);
}

TEST_F(Scratch, ErrorsNameTheFileTheLineAndTheProblem) {
  EXPECT_NE(error_of("[lab]\nid = \n").find("grade.toml:2"), std::string::npos);  // TOML syntax
  EXPECT_NE(error_of(spec_text("run = \"nowhere\"\n").replace(spec_text().find("run = \"r\""), 9, ""))
                .find("no [[run]] defines"),
            std::string::npos);
  EXPECT_NE(error_of(spec_text("visibility = \"sometimes\"\n")).find("visibility 'sometimes'"), std::string::npos);
  EXPECT_NE(error_of(spec_text() + "[limits]\nmemroy_mb = 1\n").find("unknown key 'memroy_mb'"), std::string::npos);
  EXPECT_NE(error_of(spec_text("exercise = \"07.7\"\n").replace(spec_text().find("exercise = \"09.1\"\n"), 18, ""))
                .find("exercise 07.7 is not one of the lab's exercises (09.1)"),
            std::string::npos);
  auto dup = spec_text() + "[[check]]\nid = \"other\"\nkind = \"run_ok\"\nname = \"same parameters\"\nrun = \"r\"\n";
  EXPECT_NE(error_of(dup).find("duplicate check name"), std::string::npos);
  auto dup_id = spec_text() + "[[check]]\nid = \"same_params\"\nkind = \"run_ok\"\nname = \"other\"\nrun = \"r\"\n";
  EXPECT_NE(error_of(dup_id).find("duplicate check id 'same_params'"), std::string::npos);
  auto bad_id = spec_text();
  bad_id.replace(bad_id.find("\"same_params\""), 13, "\"Same Params\"");
  EXPECT_NE(error_of(bad_id).find("check id 'Same Params' must be snake_case"), std::string::npos);
  auto no_id = spec_text();
  no_id.erase(no_id.find("id = \"same_params\"\n"), 19);
  EXPECT_NE(error_of(no_id).find("[[check]] needs 'id'"), std::string::npos);
  auto grader_flag = spec_text();
  grader_flag.replace(grader_flag.find("\"--train-samples\""), 17, "\"--report\"");
  EXPECT_NE(error_of(grader_flag).find("--report is set by the grader"), std::string::npos);
  auto escape = spec_text();
  escape.replace(escape.find("\"lab09_student.cpp\""), 19, "\"../../etc/passwd\"");
  EXPECT_NE(error_of(escape).find("must be a plain path"), std::string::npos);
}

// A check that also runs an earlier exercise's code names it (builds_on); a failure of that
// exercise sends the student there first, and only then.
TEST_F(Scratch, ACheckThatBuildsOnAnotherExerciseSendsTheStudentThereFirst) {
  std::string text = spec_text();
  text.replace(text.find("exercises = [\"09.1\"]"), 20, "exercises = [\"09.1\", \"09.2\"]");
  text +=
      "[[check]]\nid = \"later\"\nkind = \"run_ok\"\nname = \"the later run\"\nexercise = \"09.2\"\n"
      "builds_on = [\"09.1\"]\nrun = \"r\"\n";
  const LabSpec s = load_spec(write("grade.toml", text));
  ASSERT_EQ(s.checks.size(), 2u);
  EXPECT_EQ(s.checks[1].builds_on, std::vector<std::string>{"09.1"});

  auto result = [](const std::string& id, const std::string& exercise, Status st, const std::string& why) {
    CheckResult r;
    r.id = id;
    r.name = id == "same_params" ? "same parameters" : "the later run";
    r.exercise = exercise;
    r.status = st;
    r.diagnosis = why;
    return r;
  };
  std::vector<CheckResult> both = {result("same_params", "09.1", Status::kFailed, "ranks differ"),
                                   result("later", "09.2", Status::kFailed, "the run failed")};
  blame_earlier_exercises(s, both);
  EXPECT_EQ(both[1].diagnosis,
            "this check also runs your 09.1 code, and 09.1's check 'same parameters' fails too: fix exercise 09.1 "
            "first, then this one; the run failed");
  EXPECT_EQ(both[0].diagnosis, "ranks differ");
  std::vector<CheckResult> only_later = {result("same_params", "09.1", Status::kPassed, ""),
                                         result("later", "09.2", Status::kFailed, "the run failed")};
  blame_earlier_exercises(s, only_later);
  EXPECT_EQ(only_later[1].diagnosis, "the run failed") << "09.1 passes: the failure is 09.2's own";
  // Whether 09.1 was blamed already is decided by id, not by the diagnosis's words: a diagnosis
  // that happens to say "finish 09.1 first" is still told, and a check blamed once is not twice.
  std::vector<CheckResult> worded = {result("same_params", "09.1", Status::kFailed, "ranks differ"),
                                     result("later", "09.2", Status::kFailed, "finish 09.1 first, then retry")};
  blame_earlier_exercises(s, worded);
  EXPECT_EQ(worded[1].blamed, std::vector<std::string>{"09.1"});
  EXPECT_EQ(worded[1].diagnosis.rfind("this check also runs your 09.1 code", 0), 0u) << worded[1].diagnosis;
  const std::string once = worded[1].diagnosis;
  blame_earlier_exercises(s, worded);
  EXPECT_EQ(worded[1].diagnosis, once);

  // Two exercises that run each other's code, both failing: neither is sent to the other (the
  // earlier one's check may fail because of the later one), so each keeps its own diagnosis.
  auto mutual = text;
  mutual.replace(mutual.find("id = \"same_params\"\n"), 19, "id = \"same_params\"\nbuilds_on = [\"09.2\"]\n");
  const LabSpec m = load_spec(write("grade.toml", mutual));
  std::vector<CheckResult> each = {result("same_params", "09.1", Status::kFailed, "ranks differ"),
                                   result("later", "09.2", Status::kFailed, "the run failed")};
  blame_earlier_exercises(m, each);
  EXPECT_EQ(each[0].diagnosis, "ranks differ");
  EXPECT_EQ(each[1].diagnosis, "the run failed");

  auto self = text;
  self.replace(self.find("builds_on = [\"09.1\"]"), 20, "builds_on = [\"09.2\"]");
  EXPECT_NE(error_of(self).find("builds_on 09.2 is not another of the lab's exercises (09.1, 09.2)"), std::string::npos)
      << error_of(self);
  auto unknown = text;
  unknown.replace(unknown.find("builds_on = [\"09.1\"]"), 20, "builds_on = [\"07.1\"]");
  EXPECT_NE(error_of(unknown).find("builds_on 07.1 is not another"), std::string::npos);
}

TEST_F(Scratch, UnknownCheckKindsAreRejectedBeforeAnythingRuns) {
  auto text = spec_text();
  text.replace(text.find("\"consistency\""), 13, "\"vibes\"");
  const auto e = error_of(text);
  EXPECT_NE(e.find("grade.toml:13: check \"same parameters\": unknown check kind 'vibes'"), std::string::npos) << e;
  EXPECT_NE(e.find("coverage"), std::string::npos) << e;  // lists the known kinds
}

// Check parameters are validated against the kind's descriptor when the spec is loaded, each
// error at the parameter's own line: before anything is built, never blamed on the student.
TEST_F(Scratch, CheckParametersAreValidatedAtLoad) {
  const auto typo = error_of(spec_text("att = \"end\"\n"));
  EXPECT_NE(typo.find("grade.toml:21: check \"same parameters\" (consistency): unknown parameter 'att'; known: at, "
                      "diagnosis_start, diagnosis_end"),
            std::string::npos)
      << typo;
  auto wrong = spec_text();
  wrong.replace(wrong.find("at = \"end\""), 10, "at = 1");
  EXPECT_NE(error_of(wrong).find(
                "grade.toml:20: check \"same parameters\" (consistency): parameter 'at' must be a string, "
                "not 1"),
            std::string::npos)
      << error_of(wrong);
  const auto missing = error_of(spec_text("\n[[check]]\nid = \"tests\"\nkind = \"unit_tests\"\nname = \"tests\"\n"));
  EXPECT_NE(missing.find("grade.toml:22: check \"tests\" (unit_tests): missing required parameter 'filter'"),
            std::string::npos)
      << missing;
}

TEST_F(Scratch, CheckSelectionKeepsOnlyTheRunsItNeeds) {
  auto text =
      spec_text() +
      "\n[[run]]\nname = \"other\"\n\n[[check]]\nid = \"other_runs\"\nkind = \"run_ok\"\nname = \"other runs\"\n"
      "run = \"other\"\npoints = 1\n";
  const auto s = load_spec(write("grade.toml", text));
  GradeOptions o;
  o.only_checks = {"other"};
  o.run_timeout_s = 7;
  const auto e = effective_spec(s, o);
  ASSERT_EQ(e.checks.size(), 1u);
  EXPECT_EQ(e.checks[0].name, "other runs");
  ASSERT_EQ(e.runs.size(), 1u);
  EXPECT_EQ(e.runs[0].name, "other");
  EXPECT_EQ(e.run_timeout_s, 7);
  o.only_checks = {"same_params"};  // by id
  ASSERT_EQ(effective_spec(s, o).checks.size(), 1u);
  EXPECT_EQ(effective_spec(s, o).checks[0].name, "same parameters");
  o.only_checks = {"nothing like this"};
  EXPECT_THROW(effective_spec(s, o), ddplab::ConfigError);
}

// A check of an exercise none of whose regions was edited is "not attempted" before anything runs,
// and the runs only such checks use are not made; a run another kept run names ({run:NAME}) is kept.
TEST_F(Scratch, AnExerciseNotBegunIsNotAttemptedAndItsRunsAreNotMade) {
  const std::string text = R"([lab]
title = "Lab 09"
folder = "lab09_x"
program = "lab09_x"
manifest = ["lab09_student.cpp"]
exercises = ["09.1", "09.2"]

[[run]]
name = "first"
ranks = 1
args = []

[[run]]
name = "resumed"
ranks = 1
args = ["--resume", "{run:first}/ckpt"]

[[run]]
name = "second"
ranks = 2
args = []

[[check]]
id = "one"
kind = "run_ok"
name = "one"
exercise = "09.1"
run = "resumed"
points = 1

[[check]]
id = "two"
kind = "run_ok"
name = "two"
exercise = "09.2"
run = "second"
points = 1
)";
  const auto s = load_spec(write("grade.toml", text));
  parts::Progress progress;
  progress["09.1"].edited = 1;
  progress["09.2"].stubs = {"lab09_student.cpp:12", "lab09_student.cpp:40"};
  EXPECT_FALSE(parts::untouched(progress, "09.1"));
  EXPECT_TRUE(parts::untouched(progress, "09.2"));
  EXPECT_FALSE(parts::untouched(progress, ""));      // a check of no exercise is always measured
  EXPECT_FALSE(parts::untouched(progress, "09.3"));  // files that do not show it: unknown, measured
  CheckSpec no_exercise;                             // a check of the whole lab: measured once any exercise is begun
  no_exercise.id = "whole";
  EXPECT_FALSE(parts::nothing_begun(progress));
  EXPECT_FALSE(parts::not_begun_check(progress, no_exercise));
  EXPECT_TRUE(parts::not_begun_check(progress, s.checks[1]));
  EXPECT_FALSE(parts::nothing_begun({}));
  parts::Progress skeleton;
  skeleton["09.1"].stubs = {"lab09_student.cpp:3"};
  skeleton["09.2"].stubs = {"lab09_student.cpp:12"};
  EXPECT_TRUE(parts::nothing_begun(skeleton));
  EXPECT_TRUE(parts::not_begun_check(skeleton, no_exercise));
  EXPECT_NE(parts::not_begun(no_exercise).observed.find("no exercise of the lab begun"), std::string::npos);
  progress["09.2"].edited = 1;  // half done: measured (and failing on its stubs)
  EXPECT_FALSE(parts::untouched(progress, "09.2"));

  const auto runs = parts::runs_used_by(s.runs, {s.checks[0]});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].name, "first");  // named by the kept run's arguments, in the spec's order
  EXPECT_EQ(runs[1].name, "resumed");
  EXPECT_TRUE(parts::runs_used_by(s.runs, {}).empty());

  const CheckResult r = parts::not_begun(s.checks[1]);
  EXPECT_EQ(r.status, Status::kNotAttempted);
  EXPECT_EQ(r.score, 0);
  EXPECT_EQ(r.max_score, 1);
  EXPECT_NE(r.observed.find("exercise 09.2 not begun"), std::string::npos) << r.observed;
  EXPECT_NE(r.diagnosis.find("NotImplemented"), std::string::npos) << r.diagnosis;
}

TEST_F(Scratch, EveryLabOfTheKitHasAValidSpec) {
  const auto specs = load_all_specs(DDPLAB_TEST_SOURCE_ROOT);
  ASSERT_GE(specs.size(), 3u);
  for (const auto& s : specs) {
    EXPECT_EQ(s.id, fs::path(s.path).parent_path().filename().string()) << s.path;
    EXPECT_EQ(s.program, s.id) << s.path;
    EXPECT_FALSE(s.exercises.empty()) << s.path;
    double total = 0;
    for (const auto& c : s.checks) total += c.points;
    EXPECT_DOUBLE_EQ(total, 100) << s.path << ": a lab is worth 100 points";
  }
  EXPECT_EQ(find_spec(DDPLAB_TEST_SOURCE_ROOT, "2").id, "lab02_process_group");
  EXPECT_EQ(find_spec(DDPLAB_TEST_SOURCE_ROOT, "lab03").id, "lab03_sampler");  // an unambiguous prefix
  EXPECT_EQ(find_spec(DDPLAB_TEST_SOURCE_ROOT, "lab03_sampler").id, "lab03_sampler");
  EXPECT_THROW(find_spec(DDPLAB_TEST_SOURCE_ROOT, "lab0"), ddplab::ConfigError);  // a prefix ends at "_"
  EXPECT_THROW(find_spec(DDPLAB_TEST_SOURCE_ROOT, "lab99"), ddplab::ConfigError);
}

// A spec in labs/<folder>/ declares only what the folder cannot say: its id, program, manifest and
// exercises come from the folder, solutions/<folder>/ and the STUDENT CODE regions there.
TEST_F(Scratch, ALabsFolderGivesItsIdManifestAndExercises) {
  const std::string body =
      "[lab]\ntitle = \"Lab 09\"\n\n[[check]]\nid = \"t\"\nkind = \"unit_tests\"\nname = \"t\"\n"
      "exercise = \"09.10\"\nfilter = \"*\"\n";
  const auto spec = write("kit/labs/lab09_x/grade.toml", body);
  const std::string regions =
      "// BEGIN STUDENT CODE (09.2: b)\n// END STUDENT CODE\n// BEGIN STUDENT CODE (09.10: c)\n"
      "// END STUDENT CODE\n";
  write("kit/solutions/lab09_x/lab09_student.cpp", regions);
  write("kit/solutions/lab09_x/lab09_a.h", "// BEGIN STUDENT CODE (09.1: a)\n// END STUDENT CODE\n");
  write("kit/labs/lab09_x/lab09_student.cpp", regions);
  write("kit/labs/lab09_x/lab09_a.h", "");
  const auto s = load_spec(spec);
  EXPECT_EQ(s.id, "lab09_x");
  EXPECT_EQ(s.folder, "lab09_x");
  EXPECT_EQ(s.program, "lab09_x");
  EXPECT_EQ(s.manifest, (std::vector<std::string>{"lab09_a.h", "lab09_student.cpp"}));
  EXPECT_EQ(s.exercises, (std::vector<std::string>{"09.1", "09.2", "09.10"}));
  EXPECT_EQ(find_spec((dir_ / "kit").string(), "lab09").id, "lab09_x");

  // What the folder gives is not written again, and the folder must agree with itself.
  write("kit/labs/lab09_x/grade.toml",
        "[lab]\ntitle = \"Lab 09\"\nmanifest = [\"lab09_student.cpp\"]\n" + body.substr(23));
  EXPECT_NE(error_of_file(spec).find("grade.toml:3: [lab] manifest follows from the lab's folder"), std::string::npos)
      << error_of_file(spec);
  write("kit/labs/lab09_x/grade.toml", body);
  fs::remove(dir_ / "kit/labs/lab09_x/lab09_a.h");
  EXPECT_NE(error_of_file(spec).find("solutions/lab09_x/lab09_a.h has no skeleton labs/lab09_x/lab09_a.h"),
            std::string::npos);
  fs::remove_all(dir_ / "kit/solutions/lab09_x");
  EXPECT_NE(error_of_file(spec).find("has no solutions/lab09_x/"), std::string::npos);
}

TEST_F(Scratch, SubmissionsGiveOnlyTheirManifestFiles) {
  const auto s = load_spec(write("grade.toml", spec_text()));
  write("kit/labs/lab09_x/lab09_student.cpp", "skeleton\n");
  // A folder as a student would upload it: nested, with files the grader must ignore.
  write("sub/my-work/lab09_x/lab09_student.cpp", "student\n");
  write("sub/my-work/lab09_x/main.cpp", "int main() { return 0; }  // not in the manifest\n");
  const auto notes = collect_submission(s, (dir_ / "kit").string(), (dir_ / "sub").string(), (dir_ / "slot").string());
  std::ifstream in(dir_ / "slot" / "lab09_student.cpp");
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, "student\n");
  EXPECT_FALSE(fs::exists(dir_ / "slot" / "main.cpp"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("from my-work/lab09_x/lab09_student.cpp"), std::string::npos);

  // A file missing from the submission: the skeleton's, said so.
  fs::create_directories(dir_ / "empty");
  const auto n2 = collect_submission(s, (dir_ / "kit").string(), (dir_ / "empty").string(), (dir_ / "slot2").string());
  std::ifstream in2(dir_ / "slot2" / "lab09_student.cpp");
  std::string got2((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got2, "skeleton\n");
  EXPECT_NE(n2[0].find("skeleton's is used"), std::string::npos);
  EXPECT_THROW(collect_submission(s, (dir_ / "kit").string(), (dir_ / "nowhere").string(), (dir_ / "slot3").string()),
               ddplab::ConfigError);
}

TEST_F(Scratch, ZippedSubmissionsAreUnpackedInTheScratchFolder) {
  if (std::system("command -v zip >/dev/null 2>&1") != 0) {
    GTEST_FAIL() << "zip is needed (tools/setup-debian.sh installs it)";
  }
  const auto s = load_spec(write("grade.toml", spec_text()));
  write("kit/labs/lab09_x/lab09_student.cpp", "skeleton\n");
  write("z/lab09_student.cpp", "zipped\n");
  ASSERT_EQ(std::system(("cd " + (dir_ / "z").string() + " && zip -q ../s.zip lab09_student.cpp").c_str()), 0);
  collect_submission(s, (dir_ / "kit").string(), (dir_ / "s.zip").string(), (dir_ / "work" / "slot").string());
  std::ifstream in(dir_ / "work" / "slot" / "lab09_student.cpp");
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, "zipped\n");
  EXPECT_FALSE(fs::exists(dir_ / "work" / "unzipped"));  // cleaned up
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every planted bug (labs/<lab>/planted/<bug>/, graded by the grade.planted.* self-tests) names
// a file of its lab's manifest whose solution still holds the text it replaces, and the id of a
// check of its lab: a typo fails here in milliseconds rather than after minutes of grading.
TEST_F(Scratch, AnOverlayAddsPrivateRunsAndChecksKeptOutsideTheClone) {
  const std::string spec = write("kit/grade.toml", spec_text());
  write("private/heldout/meta.json", "{}");  // a data set's folder (only its meta.json is looked for)
  const std::string overlay = write("private/lab09.toml", R"([overlay]
lab = "lab09_x"

[[run]]
name = "heldout"
ranks = 2
args = ["--train-samples", "1000"]
data = "heldout"

[[check]]
id = "heldout_same_params"
kind = "consistency"
name = "same parameters on the held-out data"
exercise = "09.1"
run = "heldout"
points = 10
visibility = "hidden"
)");
  const LabSpec s = load_spec(spec, {overlay});
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_EQ(s.runs[1].data, (dir_ / "private" / "heldout").string()) << "relative to the overlay's folder";
  EXPECT_TRUE(s.runs[0].data.empty());
  ASSERT_EQ(s.checks.size(), 2u);
  EXPECT_EQ(s.checks[1].id, "heldout_same_params");
  EXPECT_EQ(s.checks[1].visibility, Visibility::kHidden);
  EXPECT_EQ(s.max_score(), 50);
  EXPECT_EQ(load_spec(spec).checks.size(), 1u) << "without the overlay, the students' spec";
}

TEST_F(Scratch, AnOverlayIsValidatedWithTheSpecAndNamesItsOwnFileAndLine) {
  const std::string spec = write("grade.toml", spec_text());
  const auto error_with = [&](const std::string& text) {
    try {
      load_spec(spec, {write("o.toml", text)});
    } catch (const ddplab::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string head = "[overlay]\nlab = \"lab09_x\"\n\n";
  EXPECT_NE(error_with("[overlay]\nlab = \"lab03_sampler\"\n")
                .find("o.toml: this overlay is for lab 'lab03_sampler', not 'lab09_x'"),
            std::string::npos);
  EXPECT_NE(error_with("[[check]]\nid = \"x\"\n").find("o.toml: an overlay needs [overlay] lab"), std::string::npos);
  EXPECT_NE(error_with(head + "[limits]\nmemory_mb = 512\n")
                .find("o.toml:4: unknown top-level key 'limits' in an overlay"),
            std::string::npos)
      << error_with(head + "[limits]\nmemory_mb = 512\n");
  const std::string dup =
      head + "[[check]]\nid = \"same_params\"\nkind = \"consistency\"\nname = \"again\"\nrun = \"r\"\n";
  EXPECT_NE(error_with(dup).find("o.toml:4: duplicate check id 'same_params'"), std::string::npos) << error_with(dup);
  const std::string no_data = head + "[[run]]\nname = \"h\"\ndata = \"/nonexistent/set\"\n";
  EXPECT_NE(error_with(no_data).find("o.toml:4: run 'h': data /nonexistent/set: no data set there"), std::string::npos)
      << error_with(no_data);
}

// A test_diagnoses pattern that matches no test of the lab is a typo the grader would never
// notice (the test would just get the check's own diagnosis): each must match a TEST in tests/.
TEST(Kit, EveryTestDiagnosisNamesATestOfItsLab) {
  size_t patterns = 0;
  for (const auto& spec : load_all_specs(DDPLAB_TEST_SOURCE_ROOT)) {
    std::vector<std::string> tests;
    const fs::path dir = fs::path(spec.path).parent_path() / "tests";
    if (fs::is_directory(dir)) {
      const std::regex test_re(R"(\bTEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\))");
      for (const auto& e : fs::directory_iterator(dir)) {
        const std::string text = read_file(e.path());
        for (auto it = std::sregex_iterator(text.begin(), text.end(), test_re); it != std::sregex_iterator(); ++it) {
          tests.push_back((*it)[1].str() + "." + (*it)[2].str());
        }
      }
    }
    for (const auto& c : spec.checks) {
      if (c.kind != "unit_tests") continue;
      for (const auto& entry : c.texts("test_diagnoses")) {
        ++patterns;
        const std::string pattern = entry.substr(0, entry.find('='));
        const bool found = std::any_of(tests.begin(), tests.end(), [&](const std::string& t) {
          return fnmatch(pattern.c_str(), t.c_str(), 0) == 0;
        });
        EXPECT_TRUE(found) << spec.path << ": check " << c.id << ": test_diagnoses pattern " << pattern
                           << " matches no TEST in " << dir.string();
      }
    }
  }
  EXPECT_GE(patterns, 8u);  // labs 01, 02 and 03 use them
}

// Unit-test checks map each failed assertion group to its own diagnosis (issue 37): every test a
// check's filter selects, when it selects more than one, matches a test_diagnoses pattern, so a
// student is told what the failing test means, not the check's one sentence whatever failed.
// Tests are read from the lab's tests/*.cpp (the kit's own *_kit_test.cpp apart); a TEST_P is
// named as gtest names it, "Prefix/Suite.Name/0", and as "Suite.Name".
TEST(Kit, EveryTestOfAUnitTestCheckHasItsOwnDiagnosis) {
  size_t checked = 0;
  auto matches = [](const std::string& pattern, const std::vector<std::string>& names) {
    return std::any_of(names.begin(), names.end(),
                       [&](const std::string& n) { return fnmatch(pattern.c_str(), n.c_str(), 0) == 0; });
  };
  for (const auto& spec : load_all_specs(DDPLAB_TEST_SOURCE_ROOT)) {
    std::vector<std::vector<std::string>> tests;  // each test's names
    const fs::path dir = fs::path(spec.path).parent_path() / "tests";
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string file = e.path().filename().string();
      if (e.path().extension() != ".cpp" || file.find("_kit_test.cpp") != std::string::npos) continue;
      const std::string text = read_file(e.path());
      std::vector<std::pair<std::string, std::string>> instances;  // (prefix, suite)
      const std::regex inst_re(R"(INSTANTIATE_TEST_SUITE_P\(\s*(\w+)\s*,\s*(\w+))");
      for (auto it = std::sregex_iterator(text.begin(), text.end(), inst_re); it != std::sregex_iterator(); ++it) {
        instances.emplace_back((*it)[1].str(), (*it)[2].str());
      }
      const std::regex test_re(R"(\bTEST(_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\))");
      for (auto it = std::sregex_iterator(text.begin(), text.end(), test_re); it != std::sregex_iterator(); ++it) {
        const std::string suite = (*it)[2].str(), name = suite + "." + (*it)[3].str();
        std::vector<std::string> names = {name};
        if ((*it)[1].str() == "_P") {
          for (const auto& [prefix, s] : instances) {
            if (s == suite) names.push_back(prefix + "/" + name + "/0");
          }
        }
        tests.push_back(names);
      }
    }
    for (const auto& c : spec.checks) {
      if (c.kind != "unit_tests") continue;
      const std::string filter = c.text("filter");
      const size_t dash = filter.find('-');
      std::vector<std::string> positive, negative, diagnosed;
      auto split = [](const std::string& s, std::vector<std::string>& out) {
        std::istringstream in(s);
        for (std::string p; std::getline(in, p, ':');) {
          if (!p.empty()) out.push_back(p);
        }
      };
      split(filter.substr(0, dash), positive);
      if (dash != std::string::npos) split(filter.substr(dash + 1), negative);
      for (const auto& entry : c.texts("test_diagnoses")) diagnosed.push_back(entry.substr(0, entry.find('=')));
      std::vector<const std::vector<std::string>*> selected;
      for (const auto& names : tests) {
        const bool in = std::any_of(positive.begin(), positive.end(), [&](const auto& p) { return matches(p, names); });
        const bool out =
            std::any_of(negative.begin(), negative.end(), [&](const auto& p) { return matches(p, names); });
        if (in && !out) selected.push_back(&names);
      }
      EXPECT_FALSE(selected.empty()) << spec.path << ": check " << c.id << ": the filter " << filter
                                     << " selects no TEST in " << dir.string();
      if (selected.size() < 2) continue;
      ++checked;
      for (const auto* names : selected) {
        EXPECT_TRUE(std::any_of(diagnosed.begin(), diagnosed.end(), [&](const auto& p) { return matches(p, *names); }))
            << spec.path << ": check " << c.id << ": test " << names->front()
            << " has no test_diagnoses entry: say what its failure means";
      }
    }
  }
  EXPECT_GE(checked, 30u);
}

TEST(Kit, EveryPlantedBugNamesAFileAndACheckOfItsLab) {
  size_t bugs = 0, audited = 0;
  for (const auto& spec : load_all_specs(DDPLAB_TEST_SOURCE_ROOT)) {
    // Issue 37's audit: labs 01-09 hold at least 8 student bugs and 2 correct variants each.
    size_t audit_bugs = 0, audit_correct = 0;
    if (const fs::path audit = fs::path(spec.path).parent_path() / "audit"; fs::is_directory(audit)) {
      for (const auto& e : fs::directory_iterator(audit)) {
        const auto expect = toml::parse_file((e.path() / "expect.toml").string())["expect"].value<std::string>();
        ++(expect && *expect == "passed" ? audit_correct : audit_bugs);
      }
    }
    if (spec.folder < "lab10") {
      EXPECT_GE(audit_bugs, 8u) << spec.folder << "/audit: student bugs";
      EXPECT_GE(audit_correct, 2u) << spec.folder << "/audit: correct variants";
    }
    for (const char* set : {"planted", "audit"}) {
      const fs::path dir = fs::path(spec.path).parent_path() / set;
      if (!fs::is_directory(dir)) continue;
      for (const auto& e : fs::directory_iterator(dir)) {
        ++(std::string(set) == "planted" ? bugs : audited);
        const std::string where = e.path().string();
        const auto t = toml::parse_file((e.path() / "expect.toml").string());
        const auto file = t["file"].value<std::string>();
        const auto check = t["check"].value<std::string>();
        const auto diagnosis = t["diagnosis"].value<std::string>();
        const auto expect = t["expect"].value<std::string>();
        // A correct variant (expect = "passed", audit only) keeps its check and has no diagnosis.
        const bool correct = expect && *expect == "passed";
        EXPECT_TRUE(!expect || *expect == "passed" || *expect == "failed")
            << where << ": expect = \"" << *expect << "\"";
        EXPECT_TRUE(!correct || std::string(set) == "audit") << where << ": a planted bug must fail its check";
        ASSERT_TRUE(file && check && (diagnosis || correct)) << where << "/expect.toml needs file, check and diagnosis";
        const auto calibrated = t["calibrated"].value<std::string>();
        const auto also = t["also"].value<std::string>();
        const auto sanitize = t["sanitize"].value<std::string>();
        const auto slot = t["slot"].value<std::string>();
        EXPECT_EQ(t.size(), 2u + (diagnosis ? 1u : 0u) + (expect ? 1u : 0u) + (calibrated ? 1u : 0u) +
                                (also ? 1u : 0u) + (sanitize ? 1u : 0u) + (slot ? 1u : 0u))
            << where << "/expect.toml: only file, check, diagnosis, expect, calibrated, also, sanitize and slot";
        EXPECT_TRUE(!slot || *slot == "yes" || *slot == "no") << where << ": slot = \"" << *slot << "\"";
        if (sanitize) {
          // --sanitize changes only how the unit tests are built: the bug's check must be one.
          EXPECT_TRUE(*sanitize == "yes" || *sanitize == "no") << where << ": sanitize = \"" << *sanitize << "\"";
          EXPECT_TRUE(std::any_of(spec.checks.begin(), spec.checks.end(),
                                  [&](const CheckSpec& c) { return c.id == *check && c.kind == "unit_tests"; }))
              << where << ": sanitize = \"yes\" on check '" << *check << "', which is not a unit_tests check";
        }
        if (also) {
          std::istringstream ids(*also);
          for (std::string id; ids >> id;) {
            EXPECT_TRUE(
                std::any_of(spec.checks.begin(), spec.checks.end(), [&](const CheckSpec& c) { return c.id == id; }))
                << where << ": also names no check '" << id << "'";
          }
        }
        if (calibrated) {
          EXPECT_TRUE(*calibrated == "yes" || *calibrated == "no")
              << where << ": calibrated = \"" << *calibrated << "\"";
        }
        EXPECT_NE(std::find(spec.manifest.begin(), spec.manifest.end(), *file), spec.manifest.end())
            << where << ": " << *file;
        const bool known =
            std::any_of(spec.checks.begin(), spec.checks.end(), [&](const CheckSpec& c) { return c.id == *check; });
        EXPECT_TRUE(known) << where << ": no check with id '" << *check << "' in " << spec.path;
        const std::string find = read_file(e.path() / "find.txt");
        EXPECT_FALSE(find.empty()) << where;
        EXPECT_NE(read_file(fs::path(DDPLAB_TEST_SOURCE_ROOT) / "solutions" / spec.folder / *file).find(find),
                  std::string::npos)
            << where << "/find.txt no longer occurs in the solution";
      }
    }
  }
  EXPECT_GE(bugs, 6u);
  EXPECT_GE(audited, 8u);
}

LabResult sample_result() {
  LabResult lab;
  lab.lab = "lab09";
  lab.title = "Lab 09 <x>";
  lab.max_score = 30;
  lab.score = 10;
  lab.not_attempted = {"09.2"};
  CheckResult ok;
  ok.id = "passes";
  ok.name = "passes";
  ok.kind = "run_ok";
  ok.max_score = ok.score = 10;
  ok.status = Status::kPassed;
  ok.observed = "fine";
  CheckResult bad = ok;
  bad.id = "fails";
  bad.name = "fails & \"quotes\"";
  bad.score = 0;
  bad.status = Status::kFailed;
  bad.observed = "rank 1 <crashed>\x01";
  bad.diagnosis = "a null tensor";
  bad.visibility = Visibility::kHidden;
  bad.exercise = "09.1";
  CheckResult na = bad;
  na.name = "later";
  na.status = Status::kNotAttempted;
  na.visibility = Visibility::kVisible;
  lab.checks = {ok, bad, na};
  return lab;
}

TEST(Outputs, GradescopeResultsHaveTheFieldsGradescopeReads) {
  const auto j = gradescope_results({sample_result()});
  EXPECT_EQ(j.at("score"), 10);
  ASSERT_EQ(j.at("tests").size(), 3u);
  const auto& t = j["tests"][1];
  EXPECT_EQ(t.at("name"), "lab09: fails & \"quotes\"");
  EXPECT_EQ(t.at("score"), 0);
  EXPECT_EQ(t.at("max_score"), 10);
  EXPECT_EQ(t.at("status"), "failed");
  EXPECT_EQ(t.at("visibility"), "hidden");
  EXPECT_EQ(t["extra_data"].at("id"), "fails");
  EXPECT_EQ(t.at("number"), "09.1");
  EXPECT_NE(t.at("output").get<std::string>().find("Likely cause: a null tensor"), std::string::npos);
  EXPECT_EQ(j["tests"][2]["extra_data"]["ddplab_status"], "not attempted");
  EXPECT_NE(j.at("output").get<std::string>().find("not attempted: exercise(s) 09.2"), std::string::npos);
}

TEST(Outputs, JunitAndHtmlEscapeWhatStudentsPrint) {
  const auto x = junit_xml({sample_result()});
  EXPECT_NE(x.find("tests=\"3\" failures=\"2\""), std::string::npos);
  EXPECT_NE(x.find("name=\"fails &amp; &quot;quotes&quot;\""), std::string::npos);
  EXPECT_NE(x.find("rank 1 &lt;crashed&gt;?"), std::string::npos);  // control character replaced
  EXPECT_NE(x.find("type=\"not_attempted\""), std::string::npos);
  EXPECT_EQ(x.find('\x01'), std::string::npos);
  const auto h = html_report({sample_result()});
  EXPECT_NE(h.find("Lab 09 &lt;x&gt; — 10 / 30"), std::string::npos);
  EXPECT_NE(h.find("Not attempted: exercise(s) 09.2"), std::string::npos);
  const auto t = terminal_summary({sample_result()}, false);
  EXPECT_NE(t.find("FAIL     0 / 10  09.1 fails"), std::string::npos);
  EXPECT_NE(t.find("likely cause: a null tensor"), std::string::npos);
  EXPECT_EQ(t.find("\033["), std::string::npos);  // no colour when asked for none
  EXPECT_NE(terminal_summary({sample_result()}, true).find("\033[32mPASS"), std::string::npos);
}

}  // namespace

namespace ddplab::grader {
namespace {

class LeaderboardSpecs : public ::Scratch {
 protected:
  /// A spec with a scaling check, an AUC check and `board` appended.
  std::string text(const std::string& board) {
    return R"([lab]
title = "Lab 09"
folder = "lab09_x"
program = "lab09_x"
manifest = ["lab09_student.cpp"]
exercises = ["09.1"]

[[run]]
name = "one"
ranks = 1
save_model = true

[[run]]
name = "two"
ranks = 2

[[check]]
id = "learns"
kind = "auc"
name = "learns"
run = "one"

[[check]]
id = "scales"
kind = "scaling"
name = "scales"
runs = ["one", "two"]
reference = 0.5
)" + board;
  }
  /// The ConfigError load_spec gives for the spec with `board` ("(no error)" if none).
  std::string board_error(const std::string& board) { return error_of(text(board)); }
};

TEST_F(LeaderboardSpecs, AnEntryNamesACheckAFigureItsKindRecordsAnOrderAndItsGates) {
  const std::string p =
      write("grade.toml",
            text("[[leaderboard]]\nname = \"samples/s\"\ncheck = \"scales\"\nfigure = \"unique_samples_per_s\"\n"
                 "requires = [\"learns\"]\n\n[[leaderboard]]\nname = \"auc\"\ncheck = \"learns\"\nfigure = \"auc\"\n"
                 "order = \"desc\"\n"));
  const LabSpec s = load_spec(p);
  ASSERT_EQ(s.leaderboard.size(), 2u);
  EXPECT_EQ(s.leaderboard[0].check, "scales");
  EXPECT_EQ(s.leaderboard[0].order, "desc");
  EXPECT_EQ(s.leaderboard[0].gates, std::vector<std::string>{"learns"});
  // Selecting a check drops the entries whose check or gates are not selected.
  GradeOptions o;
  o.only_checks = {"scales"};
  EXPECT_TRUE(effective_spec(s, o).leaderboard.empty());
  o.only_checks = {"scales", "learns"};
  EXPECT_EQ(effective_spec(s, o).leaderboard.size(), 2u);
  o.only_checks = {"learns"};
  ASSERT_EQ(effective_spec(s, o).leaderboard.size(), 1u);
  EXPECT_EQ(effective_spec(s, o).leaderboard[0].name, "auc");
}

TEST_F(LeaderboardSpecs, MistakesAreNamedWithTheLine) {
  const std::string head = "[[leaderboard]]\nname = \"x\"\n";
  EXPECT_NE(board_error(head + "check = \"nope\"\nfigure = \"auc\"\n").find("no check with id 'nope'"),
            std::string::npos);
  EXPECT_NE(board_error(head + "check = \"scales\"\nfigure = \"auc\"\n")
                .find("a scaling check records no figure 'auc' (it records: efficiency, unique_samples_per_s)"),
            std::string::npos);
  EXPECT_NE(board_error(head + "check = \"learns\"\nfigure = \"auc\"\norder = \"up\"\n").find("order must be"),
            std::string::npos);
  EXPECT_NE(board_error(head + "check = \"learns\"\nfigure = \"auc\"\nrequires = [\"ghost\"]\n")
                .find("requires 'ghost'"),
            std::string::npos);
  EXPECT_NE(board_error(head + "check = \"learns\"\nfigure = \"auc\"\nvalue = 3\n").find("unknown key 'value'"),
            std::string::npos);
  const std::string twice = head + "check = \"learns\"\nfigure = \"auc\"\n";
  EXPECT_NE(board_error(twice + "\n" + twice).find("used twice"), std::string::npos);
  EXPECT_NE(board_error(head + "check = \"learns\"\nfigure = \"auc\"\n").find("(no error)"), std::string::npos);
  EXPECT_NE(board_error(head + "figure = \"auc\"\n").find("grade.toml:"), std::string::npos);
}

TEST(Outputs, ALeaderboardIsTheMedianOfItsMeasurementsWithTheirSpread) {
  LabResult lab;
  lab.lab = "lab09";
  lab.title = "Lab 09";
  LeaderboardResult a;
  a.name = "samples/s";
  a.order = "desc";
  a.values = {9000, 8000, 10000};
  summarize(a);
  a.counted = true;
  EXPECT_EQ(a.median, 9000);
  EXPECT_EQ(a.spread, 2000);
  LeaderboardResult b;
  b.name = "efficiency";
  b.why = "not counted: check 'learns' did not pass";
  lab.leaderboard = {a, b};
  const auto j = gradescope_results({lab});
  ASSERT_TRUE(j.contains("leaderboard"));
  ASSERT_EQ(j["leaderboard"].size(), 2u);  // the median and the spread of the counted entry
  EXPECT_EQ(j["leaderboard"][0]["name"], "lab09: samples/s");
  EXPECT_EQ(j["leaderboard"][0]["value"], 9000);
  EXPECT_EQ(j["leaderboard"][0]["order"], "desc");
  EXPECT_EQ(j["leaderboard"][1]["name"], "lab09: samples/s (spread of 3)");
  EXPECT_EQ(j["leaderboard"][1]["value"], 2000);
  EXPECT_EQ(j["leaderboard"][1]["order"], "asc");
  const std::string out = j["output"];
  EXPECT_NE(out.find("samples/s: 9000 (median of 3 measurement(s): 9000, 8000, 1e+04; spread 2e+03"), std::string::npos)
      << out;
  EXPECT_NE(out.find("efficiency: not counted: check 'learns' did not pass"), std::string::npos) << out;
  EXPECT_NE(terminal_summary({lab}, false).find("leaderboard: samples/s: 9000"), std::string::npos);
  EXPECT_FALSE(gradescope_results({LabResult{}}).contains("leaderboard"));
  LeaderboardResult even;
  even.values = {1, 4, 2, 3};
  summarize(even);
  EXPECT_EQ(even.median, 2.5);
}

}  // namespace
}  // namespace ddplab::grader

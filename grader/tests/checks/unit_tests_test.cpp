// Check kind unit_tests, against a stand-in test binary (a shell script writing gtest's JSON):
// passing, failing with the spec's diagnosis, all failing at a stub, and unreadable results.
#include <filesystem>

#include <fmt/format.h>

#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class UnitTestsCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    bin_.tests = write("fake_tests", R"(#!/bin/sh
for a in "$@"; do
  case "$a" in --gtest_output=json:*) out="${a#--gtest_output=json:}";; --gtest_filter=*) f="${a#--gtest_filter=}";; esac
done
case "$f" in
  Pass*) echo '{"testsuites":[{"name":"S","testsuite":[{"name":"a"},{"name":"b"}]}]}' > "$out";;
  Fail*) echo '{"testsuites":[{"name":"S","testsuite":[{"name":"a","failures":[{"failure":"4 != 2"}]},{"name":"b"}]}]}' > "$out";;
  Stub*) echo '{"testsuites":[{"name":"S","testsuite":[{"name":"a","failures":[{"failure":"exercise 09.1 is not implemented yet"}]}]}]}' > "$out";;
  Other*) echo '{"testsuites":[{"name":"S","testsuite":[{"name":"a","failures":[{"failure":"exercise 09.2 is not implemented yet: shard"}]}]}]}' > "$out";;
  Both*) echo '{"testsuites":[{"name":"S","testsuite":[{"name":"a","failures":[{"failure":"exercise 09.2 is not implemented yet"}]},{"name":"b","failures":[{"failure":"exercise 09.1 is not implemented yet"}]}]}]}' > "$out";;
  Half*) echo '{"testsuites":[{"name":"S","testsuite":[{"name":"a","failures":[{"failure":"exercise 09.1 is not implemented yet"}]},{"name":"b","failures":[{"failure":"4 != 2"}]}]}]}' > "$out";;
  Mapped*) echo '{"testsuites":[{"name":"S","testsuite":[{"name":"a","failures":[{"failure":"x"}]},{"name":"b","failures":[{"failure":"y"}]},{"name":"c","failures":[{"failure":"z"}]}]},{"name":"P/T","testsuite":[{"name":"d/0","failures":[{"failure":"w"}]}]}]}' > "$out";;
  Garbage*) echo 'not json {' > "$out";;
  Crash*) kill -SEGV $$;;
  Died*) printf '[ RUN      ] S.a\n[       OK ] S.a (0 ms)\n[ RUN      ] S.b\n'; kill -SEGV $$;;
  Hung*) printf '[ RUN      ] S.a\n[  FAILED  ] S.a (3 ms)\n[ RUN      ] S.b\n'; exec sleep 60;;
  Stuck*) printf '[ RUN      ] S.a\n[       OK ] S.a (0 ms)\n[ RUN      ] S.b\n'; exec sleep 60;;
esac
)");
    std::filesystem::permissions(bin_.tests, std::filesystem::perms::owner_all);
    load(R"(
[[check]]
id = "pass"
kind = "unit_tests"
name = "passing"
filter = "Pass.*"
points = 5

[[check]]
id = "fail"
kind = "unit_tests"
name = "failing"
exercise = "09.1"
filter = "Fail.*"
diagnosis = "summed, not averaged"
points = 5

[[check]]
id = "stub"
kind = "unit_tests"
name = "a stub"
exercise = "09.1"
filter = "Stub.*"
points = 5

[[check]]
id = "other"
kind = "unit_tests"
name = "another exercise's stub"
exercise = "09.1"
filter = "Other.*"
points = 5

[[check]]
id = "builds"
kind = "unit_tests"
name = "a check that builds on 09.2"
exercise = "09.1"
builds_on = ["09.2"]
filter = "Other.*"
points = 5

[[check]]
id = "both"
kind = "unit_tests"
name = "this and an earlier exercise's stubs"
exercise = "09.1"
filter = "Both.*"
points = 5

[[check]]
id = "half"
kind = "unit_tests"
name = "half an exercise"
exercise = "09.1"
filter = "Half.*"
diagnosis = "the check's own diagnosis"
points = 5

[[check]]
id = "mapped"
kind = "unit_tests"
name = "a diagnosis per test"
exercise = "09.1"
filter = "Mapped.*"
diagnosis = "the check's own diagnosis"
test_diagnoses = ["S.a=a's contract", "S.?=another S test", "T.d=the parameterised one"]
points = 5

[[check]]
id = "garbage"
kind = "unit_tests"
name = "garbage results"
filter = "Garbage.*"
points = 5

[[check]]
id = "crash"
kind = "unit_tests"
name = "crash"
filter = "Crash.*"
timeout_s = 20
points = 5

[[check]]
id = "died"
kind = "unit_tests"
name = "a crash in one test"
filter = "Died.*"
test_diagnoses = ["S.a=a's contract", "S.b=b's contract: skip an edge without a function"]
points = 5

[[check]]
id = "hung"
kind = "unit_tests"
name = "a hang after a failure"
filter = "Hung.*"
timeout_s = 1
test_diagnoses = ["S.a=a's contract: notify after every batch", "S.b=b's contract: wake the waiting workers"]
points = 5

[[check]]
id = "stuck"
kind = "unit_tests"
name = "a hang alone"
filter = "Stuck.*"
timeout_s = 1
test_diagnoses = ["S.b=b's contract: wake the waiting workers"]
points = 5
)");
  }
};

TEST_F(UnitTestsCheck, PassesFailsAndSaysWhy) {
  const auto ok = grade("pass");
  EXPECT_TRUE(has(ok, Status::kPassed));
  EXPECT_EQ(ok.observed, "2 test(s) passed");
  const auto bad = grade("fail");
  EXPECT_TRUE(has(bad, Status::kFailed, "summed, not averaged"));
  EXPECT_EQ(bad.observed, "1 of 2 test(s) failed");
  EXPECT_NE(bad.details.find("FAILED S.a:\n4 != 2"), std::string::npos) << bad.details;
  EXPECT_TRUE(has(grade("stub"), Status::kNotAttempted, "exercise 09.1 not attempted"));
}

TEST_F(UnitTestsCheck, NotAttemptedIsDecidedByTheStubsExerciseId) {
  // A 09.1 check whose test stops at 09.2's stub: 09.1 was attempted; what is missing is 09.2.
  const auto other = grade("other");
  EXPECT_TRUE(has(other, Status::kFailed, "these tests need exercise 09.2, which is not implemented yet"));
  // The same test, in a check that declares it builds on 09.2: 09.2 is missing, so nothing here can
  // be judged yet (the grader makes it "failed: finish 09.2 first" when 09.1's regions were edited).
  EXPECT_TRUE(has(grade("builds"), Status::kNotAttempted,
                  "exercise 09.1 not attempted (its tests also run exercise 09.2, not implemented yet)"));
  // 09.1 still a stub, and its other test stops at 09.2's: nothing of 09.1 attempted.
  EXPECT_TRUE(has(grade("both"), Status::kNotAttempted, "exercise 09.1 not attempted"));
  // One test at 09.1's stub, another failing on its own: half an exercise, attempted and failing.
  const auto half = grade("half");
  EXPECT_TRUE(has(half, Status::kFailed, "the check's own diagnosis"));
  EXPECT_NE(half.diagnosis.find("1 test(s) still reach the NotImplemented stub of exercise 09.1"), std::string::npos)
      << half.diagnosis;
}

TEST_F(UnitTestsCheck, EachFailedTestGetsTheDiagnosisItsNameMapsTo) {
  const auto r = grade("mapped");
  ASSERT_TRUE(has(r, Status::kFailed));
  // S.a and S.b/S.c map (first match wins; one mention each); P/T.d/0 maps as T.d.
  EXPECT_EQ(r.diagnosis, "a's contract; another S test; the parameterised one");
  EXPECT_NE(load_error("[[check]]\nid = \"t\"\nkind = \"unit_tests\"\nname = \"n\"\nfilter = \"x\"\n"
                       "test_diagnoses = [\"no equals sign\"]\n")
                .find("test_diagnoses entry \"no equals sign\" must be \"Pattern=diagnosis\""),
            std::string::npos);
}

TEST_F(UnitTestsCheck, UnreadableResultsAndCrashesAreFailedChecks) {
  EXPECT_TRUE(has(grade("garbage"), Status::kFailed, "the test program was interrupted"));
  EXPECT_TRUE(has(grade("crash"), Status::kFailed, "crashed the test program"));
  // The test that was running when the binary died is named, with its own diagnosis.
  const auto died = grade("died");
  EXPECT_TRUE(has(died, Status::kFailed,
                  "the code under test crashed the test program in S.b: b's contract: skip an edge without a function"))
      << died.diagnosis;
  EXPECT_EQ(died.observed.rfind("the test binary ended without results during S.b: ", 0), 0u) << died.observed;
}

// A bug that fails one test often hangs a later one (a lost wake-up): the timeout names the test
// that hung and puts the first failure's own diagnosis first, not a generic "hangs".
TEST_F(UnitTestsCheck, ATimeoutNamesTheHungTestAndTheFailureBeforeIt) {
  const auto hung = grade("hung");
  EXPECT_TRUE(has(hung, Status::kFailed,
                  "S.a failed first: a's contract: notify after every batch; then S.b hangs (never returns): b's "
                  "contract: wake the waiting workers"))
      << hung.diagnosis;
  EXPECT_EQ(hung.observed, "the tests (Hung.*) timed out after 1 s in S.b, after 1 failed");
  const auto stuck = grade("stuck");
  EXPECT_EQ(stuck.diagnosis, "S.b hangs (never returns): b's contract: wake the waiting workers");
  EXPECT_EQ(stuck.observed, "the tests (Stuck.*) timed out after 1 s in S.b");
}

TEST_F(UnitTestsCheck, TheFilterIsRequiredAndTheKindReadsNoRun) {
  EXPECT_NE(load_error("[[check]]\nid = \"t\"\nkind = \"unit_tests\"\nname = \"n\"\n")
                .find("grade.toml:8: check \"n\" (unit_tests): missing required parameter 'filter'"),
            std::string::npos);
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"unit_tests\"\nname = \"n\"\nfilter = "
                       "\"x\"\nrun = \"r\"\n")
                .find("reads no run"),
            std::string::npos);
}

// --sanitize: the tests built under a sanitizer stop at its first report, without results. The
// check fails with the report's kind, the first stack frame in a student file (not the library's
// frames above it) and the exercise whose region holds that line. The reports are abridged from
// real ones (GCC 12's libtsan and libasan, this kit's lab 08 and lab 01).
class SanitizedUnitTestsCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    student_ = write("lab09_student.cpp",
                     "// a student file\n"
                     "// BEGIN STUDENT CODE (09.1: a loader)\n"
                     "void work() {\n"
                     "  made.emplace(k, m);\n"
                     "}\n"
                     "// END STUDENT CODE\n");
    bin_.tests = write("fake_sanitized_tests", fmt::format(R"(#!/bin/sh
for a in "$@"; do
  case "$a" in --gtest_output=json:*) out="${{a#--gtest_output=json:}}";; --gtest_filter=*) f="${{a#--gtest_filter=}}";; esac
done
case "$f" in
  Race*) cat >&2 <<'EOF'
==================
WARNING: ThreadSanitizer: data race (pid=2)
  Read of size 8 at 0x7b18001d0180 by thread T6:
    #0 std::less<long>::operator()(long const&, long const&) const /usr/include/c++/12/bits/stl_function.h:408:16 (tests+0x175128) (BuildId: 7d63620822524e45)
    #1 std::map<long, Made>::emplace<long&, Made>(long&, Made&&) /usr/include/c++/12/bits/stl_map.h:596:22 (tests+0x175128)
    #2 lab08::PrefetchLoader::State::work() {student}:4:12 (tests+0x175128)
    #3 lab08::PrefetchLoader::State::State(lab08::BatchSource const&, int, int)::'lambda'()::operator()() const {student}:35:69 (tests+0x174e43) (BuildId: 7d63620822524e45)

  Previous write of size 8 at 0x7b18001d0180 by main thread (mutexes: write M0):
    #0 std::map<long, Made>::erase(std::_Rb_tree_iterator<std::pair<long const, Made> >) /usr/include/c++/12/bits/stl_map.h:1070:24 (tests+0x17d4)
EOF
    exit 66;;
  Heap*) cat >&2 <<'EOF'
=================================================================
==77==ERROR: AddressSanitizer: heap-use-after-free on address 0x60b0000c4e40 at pc 0x7f3e6 bp 0x7ffd sp 0x7ffd
READ of size 1024 at 0x60b0000c4e40 thread T0
    #0 0x7f3e6b4 in __interceptor_memmove ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:810
    #1 0x55d0a1 in std::vector<float, std::allocator<float> >::_M_range_insert<float const*>(float*, float const*, float const*) /usr/include/c++/12/bits/vector.tcc:778
    #2 0x55d0b2 in lab01::evaluate(ddplab::DeepFM&, ddplab::data::Dataset const&, unsigned long, long, c10::Device) {student}:4
    #3 0x55d0c3 in main /work/main/labs/lab01_baseline/tests/lab01_test.cpp:120
EOF
    exit 1;;
  Ub*) echo "{student}:4:9: runtime error: signed integer overflow: 2147483647 + 1 cannot be represented in type 'int'" >&2; exit 1;;
  Clean*) [ "$TSAN_OPTIONS" = "halt_on_error=1:second_deadlock_stack=1" ] && \
     echo '{{"testsuites":[{{"name":"S","testsuite":[{{"name":"a"}}]}}]}}' > "$out";;
esac
)",
                                                           fmt::arg("student", student_)));
    std::filesystem::permissions(bin_.tests, std::filesystem::perms::owner_all);
    bin_.sanitizer = "thread";
    load(R"(
[[check]]
id = "race"
kind = "unit_tests"
name = "a data race"
exercise = "09.1"
filter = "Race.*"
points = 5

[[check]]
id = "heap"
kind = "unit_tests"
name = "a use after free"
exercise = "09.1"
filter = "Heap.*"
points = 5

[[check]]
id = "ub"
kind = "unit_tests"
name = "undefined behaviour"
exercise = "09.1"
filter = "Ub.*"
points = 5

[[check]]
id = "clean"
kind = "unit_tests"
name = "nothing found"
filter = "Clean.*"
points = 5
)");
    spec_.manifest = {"lab09_student.cpp"};
  }
  std::string student_;
};

TEST_F(SanitizedUnitTestsCheck, AFindingFailsTheCheckAtTheStudentsFrameAndExercise) {
  const auto race = grade("race");
  EXPECT_TRUE(has(race, Status::kFailed,
                  "ThreadSanitizer: data race at lab09_student.cpp:4 (in lab08::PrefetchLoader::State::work()), in "
                  "exercise 09.1's code: two threads use the same memory"))
      << race.diagnosis;
  EXPECT_EQ(race.observed, "ThreadSanitizer: data race (-fsanitize=thread)");
  EXPECT_NE(race.details.find("Previous write of size 8"), std::string::npos) << race.details;
  const auto heap = grade("heap");
  EXPECT_TRUE(has(heap, Status::kFailed,
                  "AddressSanitizer: heap-use-after-free at lab09_student.cpp:4 (in lab01::evaluate(ddplab::DeepFM&, "
                  "ddplab::data::Dataset const&, unsigned long, long, c10::Device)), in exercise 09.1's code: memory "
                  "is used after it was freed"))
      << heap.diagnosis;
  const auto ub = grade("ub");
  EXPECT_TRUE(has(ub, Status::kFailed,
                  "runtime error: signed integer overflow: 2147483647 + 1 cannot be represented in type 'int' at "
                  "lab09_student.cpp:4, in exercise 09.1's code: undefined behaviour"))
      << ub.diagnosis;
}

// The sanitizer's options reach the tests (the stand-in writes results only when they do), and a
// run it finds nothing in is graded as usual.
TEST_F(SanitizedUnitTestsCheck, TheTestsRunWithTheSanitizersOptionsAndPassWhenNothingIsFound) {
  const auto clean = grade("clean");
  EXPECT_TRUE(has(clean, Status::kPassed)) << clean.diagnosis << clean.details;
}

}  // namespace
}  // namespace ddplab::grader::testing

// Check kind unit_tests, against a stand-in test binary (a shell script writing gtest's JSON):
// passing, failing with the spec's diagnosis, all failing at a stub, and unreadable results.
#include <filesystem>

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

}  // namespace
}  // namespace ddplab::grader::testing

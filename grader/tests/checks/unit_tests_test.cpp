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
  Stub*) echo '{"testsuites":[{"name":"S","testsuite":[{"name":"a","failures":[{"failure":"09.1 is not implemented yet"}]}]}]}' > "$out";;
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

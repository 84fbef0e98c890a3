// Student-region parsing, and the kit's own consistency: for every lab, skeleton and solution
// differ only inside regions, stubs throw NotImplemented with their id, handout ids == code ids.
#include "ddplab/grader/regions.h"

#include <gtest/gtest.h>

#include "ddplab/error.h"

namespace {

using ddplab::grader::parse_marked;

const char* kGood =
    "int f() {\n"
    "  // BEGIN STUDENT CODE (03.2: reshuffle per epoch)\n"
    "  return 1;\n"
    "  // END STUDENT CODE\n"
    "}\n";

TEST(Regions, ParsesIdTitleLinesAndBody) {
  const auto f = parse_marked("a.cpp", kGood);
  ASSERT_EQ(f.regions.size(), 1u);
  EXPECT_EQ(f.regions[0].id, "03.2");
  EXPECT_EQ(f.regions[0].title, "reshuffle per epoch");
  EXPECT_EQ(f.regions[0].begin_line, 2);
  EXPECT_EQ(f.regions[0].end_line, 4);
  EXPECT_EQ(f.regions[0].body, "  return 1;\n");
  EXPECT_EQ(f.outside.size(), 4u);  // body removed, markers kept
}

TEST(Regions, AnExerciseMaySpanSeveralRegionsWithTheirOwnTitles) {
  // Lab 04's 04.2 is a constructor, a hook and a wait: one region in each function.
  const auto f = parse_marked("b.cpp",
                              "// BEGIN STUDENT CODE (04.2: the hook)\n// END STUDENT CODE\n"
                              "// BEGIN STUDENT CODE (04.2: the wait)\nx\n// END STUDENT CODE\n");
  ASSERT_EQ(f.regions.size(), 2u);
  EXPECT_EQ(f.regions[0].id, "04.2");
  EXPECT_EQ(f.regions[1].title, "the wait");
}

ddplab::grader::Region region(const std::string& id, const std::string& body) {
  ddplab::grader::Region r;
  r.id = id;
  r.body = body;
  return r;
}

TEST(Regions, AStubStillThrowsItsOwnNotImplemented) {
  using ddplab::grader::is_stub;
  EXPECT_TRUE(is_stub(region("04.2", "  throw ddplab::NotImplemented(\"04.2\", \"wait; average\");\n")));
  EXPECT_TRUE(
      is_stub(region("04.2", "  // TODO\n\n  throw ddplab::NotImplemented(\"04.2\",\n      \"two lines\");  // x\n")));
  EXPECT_FALSE(is_stub(region("04.2", "  return 1;\n")));
  // Lab 08's 08.1 is a struct body whose constructor throws: still a stub.
  EXPECT_TRUE(is_stub(region("08.1", "  State() {\n    throw ddplab::NotImplemented(\"08.1\", \"x\");\n  }\n")));
  EXPECT_FALSE(is_stub(region("04.2", "  // throw ddplab::NotImplemented(\"04.2\", \"x\");\n  return 2;\n")));
  EXPECT_FALSE(is_stub(region("04.2", "  throw ddplab::NotImplemented(\"04.1\", \"another exercise's\");\n")));
  EXPECT_FALSE(is_stub(region("04.2", "")));  // emptied: edited
  EXPECT_FALSE(is_stub(region("04.2", "  auto s = \"ddplab::NotImplemented(04.2)\";\n")));
}

TEST(Regions, ProgressCountsEditedRegionsAndNamesTheStubsLeft) {
  const auto f = parse_marked("/x/lab04_student.cpp",
                              "// BEGIN STUDENT CODE (04.2: a)\n  hook();\n// END STUDENT CODE\n"
                              "// BEGIN STUDENT CODE (04.2: b)\n  throw ddplab::NotImplemented(\"04.2\", \"b\");\n"
                              "// END STUDENT CODE\n"
                              "// BEGIN STUDENT CODE (04.3: c)\n  throw ddplab::NotImplemented(\"04.3\", \"c\");\n"
                              "// END STUDENT CODE\n");
  const auto p = ddplab::grader::exercise_progress({f});
  EXPECT_EQ(p.at("04.2").edited, 1);
  EXPECT_EQ(p.at("04.2").stubs, std::vector<std::string>{"lab04_student.cpp:4"});
  EXPECT_EQ(p.at("04.3").edited, 0);
  EXPECT_EQ(p.at("04.3").stubs.size(), 1u);
}

void expect_error(const std::string& text, const std::string& what) {
  try {
    parse_marked("x.cpp", text);
    FAIL() << "no error for:\n" << text;
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Regions, RejectsMalformedNestedUnclosedAndDuplicateRegions) {
  expect_error("// BEGIN STUDENT CODE 03.2\n// END STUDENT CODE\n", "x.cpp:1: malformed marker");
  expect_error("// BEGIN STUDENT CODE (03.1: a)\n// BEGIN STUDENT CODE (03.2: b)\n",
               "x.cpp:2: BEGIN STUDENT CODE inside region 03.1");
  expect_error("x\n// END STUDENT CODE\n", "x.cpp:2: END STUDENT CODE without a BEGIN");
  expect_error("// BEGIN STUDENT CODE (03.1: a)\nx\n", "x.cpp:1: region 03.1 is never closed");
  expect_error(
      "// BEGIN STUDENT CODE (03.1: a)\n// END STUDENT CODE\n// BEGIN STUDENT CODE (03.1: a)\n// END STUDENT CODE\n",
      "x.cpp:3: region 03.1 appears twice");
}

TEST(Regions, HandoutIdsAreThisLabsOnly) {
  const auto ids = ddplab::grader::handout_exercise_ids(
      "Do 02.1 and 02.3, then (02.2). Tolerance 0.05, 1e-5, lab 03.1 is later, 02.10 too, 102.4 no.", "02");
  EXPECT_EQ(ids, (std::set<std::string>{"02.1", "02.2", "02.3", "02.10"}));
}

// The kit itself: every lab in the source tree passes the consistency checks.
TEST(Kit, EveryLabIsConsistent) {
  const auto labs = ddplab::grader::list_labs(DDPLAB_TEST_SOURCE_ROOT);
  ASSERT_FALSE(labs.empty()) << "no labs found under " << DDPLAB_TEST_SOURCE_ROOT;
  for (const auto& lab : labs) {
    const auto problems = ddplab::grader::check_lab(DDPLAB_TEST_SOURCE_ROOT, lab);
    for (const auto& p : problems.items) ADD_FAILURE() << p;
    EXPECT_FALSE(ddplab::grader::student_files(DDPLAB_TEST_SOURCE_ROOT, lab).empty()) << lab;
  }
}

}  // namespace

// Errors carry rank and place; NotImplemented names its exercise.
#include "ddplab/error.h"

#include <gtest/gtest.h>

namespace {

TEST(Error, NamesFileAndLine) {
  ddplab::set_process_rank(-1);
  try {
    DDPLAB_THROW(ddplab::ConfigError, "bad --batch 0");
    FAIL() << "no throw";
  } catch (const ddplab::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("error_test.cpp:", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad --batch 0"), std::string::npos);
    EXPECT_EQ(e.message(), "bad --batch 0");
  }
}

TEST(Error, NamesRankWhenSet) {
  ddplab::set_process_rank(3);
  const ddplab::Error e("stalled", "/x/y/grad_sync.cpp", 88);
  EXPECT_STREQ(e.what(), "[rank 3] grad_sync.cpp:88: stalled");
  ddplab::set_process_rank(-1);
}

TEST(Error, CheckThrowsOnlyWhenFalse) {
  EXPECT_NO_THROW(DDPLAB_CHECK(1 + 1 == 2, "math"));
  EXPECT_THROW(DDPLAB_CHECK(1 + 1 == 3, "math"), ddplab::Error);
}

TEST(NotImplemented, NamesExercise) {
  const ddplab::NotImplemented e("03.2", "shuffle per epoch");
  EXPECT_EQ(e.exercise(), "03.2");
  EXPECT_NE(std::string(e.what()).find("exercise 03.2 is not implemented yet: shuffle per epoch"), std::string::npos);
  // A stub is an Error, so code that handles errors generically still reports it.
  EXPECT_NE(dynamic_cast<const ddplab::Error*>(&e), nullptr);
}

}  // namespace

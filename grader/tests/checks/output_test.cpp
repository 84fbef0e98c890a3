// Check kind output: the run's printed lines match each required regular expression.
#include <fstream>

#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class OutputCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(R"([[run]]
name = "r"

[[check]]
id = "shows"
kind = "output"
name = "shows the waste"
run = "r"
regex = ["processed [0-9]+ samples, [0-9]+ of them unique"]
)");
  }
  void printed(const std::string& text) {
    add_run("r", {good_report()});
    std::ofstream(runs_["r"].dir + "/output.txt") << text;
  }
};

TEST_F(OutputCheck, PassesWhenTheLineIsPrinted) {
  printed("[rank 0] processed 2000 samples, 1000 of them unique\n");
  EXPECT_TRUE(has(grade("shows"), Status::kPassed));
}

TEST_F(OutputCheck, FailsWhenItIsNot) {
  printed("[rank 0] done\n");
  EXPECT_TRUE(has(grade("shows"), Status::kFailed, "the program does not print the figure"));
}

TEST_F(OutputCheck, NoOutputAtAllIsMalformed) {
  add_run("r", {good_report()});
  EXPECT_TRUE(has(grade("shows"), Status::kFailed, "outputs are missing or malformed"));
}

TEST_F(OutputCheck, ABadRegexIsASpecErrorAtLoad) {
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"output\"\nname = \"n\"\nrun = \"r\"\n"
                       "regex = [\"([0-9]+\"]\n")
                .find("bad regex '([0-9]+'"),
            std::string::npos);
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"output\"\nname = \"n\"\nrun = \"r\"\n")
                .find("missing required parameter 'regex'"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing

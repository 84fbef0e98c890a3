// Check kind `output`: the run's printed output (every rank's lines) has a line matching each
// regular expression — the figure or lesson the lab asks the program to show.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "check_util.h"

namespace fs = std::filesystem;

namespace ddplab::grader::checks {
namespace {

void check_output(const CheckSpec& c, GradeContext& ctx, CheckResult& r) {
  if (!runs_usable(c, ctx, r)) return;
  const auto& run = the_run(c, ctx);
  if (run.expect_failure) {
    // A run meant to stop with an error that crashed instead (an exception escaping a worker
    // thread ends in std::terminate, whose message repeats the exception's and so can match the
    // pattern): the error never reached the program, whatever the output says.
    const bool reported = std::any_of(run.rank.begin(), run.rank.end(), [](const RankOutcome& k) {
      return k.report && k.report->is_object() && k.report->value("status", "") == "error";
    });
    const bool crashed =
        std::any_of(run.rank.begin(), run.rank.end(), [](const RankOutcome& k) { return k.signal != 0; });
    if (crashed && !reported) {
      fail(r,
           fmt::format("run '{}' crashed instead of stopping with an error ({}); no rank reported the error, so its "
                       "output is not the program's message",
                       c.runs[0], run.summary),
           c.diagnosis, run.log_tail);
      return;
    }
  }
  const fs::path path = fs::path(run.dir) / "output.txt";
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("run '{}' left no output ({} is missing)", c.runs[0], path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string out = ss.str();
  const auto patterns = c.texts("regex");
  for (const auto& p : patterns) {
    if (!std::regex_search(out, std::regex(p))) {
      // A run meant to fail that failed otherwise: how it stopped is the clue.
      fail(r, fmt::format("the output of run '{}' has no line matching /{}/", c.runs[0], p), c.diagnosis,
           run.expect_failure ? fmt::format("the run stopped with: {}\n{}", failure_cause(run), run.log_tail) : "");
      return;
    }
  }
  pass(r, fmt::format("the output shows all {} required line(s)", patterns.size()));
}

}  // namespace

const CheckKind kOutput = {"output",
                           "the run's output has a line matching each regular expression",
                           RunArity::kOne,
                           {{"regex", ParamType::kStringList, nullptr,
                             "ECMAScript regular expressions, each to match somewhere in the output",
                             Presence::kRequired}},
                           "the program does not print the figure the lab asks for",
                           check_output,
                           [](const CheckSpec& c, const LabSpec&) -> std::string {
                             if (c.texts("regex").empty()) return "regex must list at least one pattern";
                             for (const auto& p : c.texts("regex")) {
                               try {
                                 std::regex re(p);
                               } catch (const std::regex_error& e) {
                                 return fmt::format("bad regex '{}': {}", p, e.what());
                               }
                             }
                             return "";
                           }};

}  // namespace ddplab::grader::checks

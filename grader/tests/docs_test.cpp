// The instructor guide's tables of check kinds and parameters are compared with the registry in
// both directions, the way handouts are compared with the STUDENT CODE regions: a kind or
// parameter added, renamed or re-defaulted in code without the guide (or the reverse) fails here,
// and the failure prints the tables as the registry has them, ready to paste.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "ddplab/grader/batch.h"
#include "ddplab/grader/checks.h"
#include "ddplab/grader/spec.h"

using namespace ddplab::grader;

namespace {

std::string arity(const CheckKind& k) {
  switch (k.runs) {
    case RunArity::kNone: return "none";
    case RunArity::kOne: return "one";
    case RunArity::kOneOrMore: return "one or more";
    case RunArity::kTwo:
      return "two: `runs = [" + (k.run_roles.empty() ? std::string("one, many") : k.run_roles) + "]`";
  }
  return "?";
}

std::string default_of(const ParamSpec& p) {
  if (p.presence == Presence::kRequired) return "required";
  if (p.presence == Presence::kOptional) return "—";
  return "`" + p.default_value.dump() + "`";
}

std::string meaning_of(const ParamSpec& p) {
  if (p.choices.empty()) return p.meaning;
  std::string s = p.meaning + ":";
  for (size_t i = 0; i < p.choices.size(); ++i) s += (i ? ", `" : " `") + p.choices[i] + "`";
  return s;
}

std::string row(const std::vector<std::string>& cells) {
  std::string s = "|";
  for (const auto& c : cells) s += " " + c + " |";
  return s;
}

/// The kinds table as the registry has it, header included.
std::vector<std::string> kinds_table() {
  std::vector<std::string> t = {"| kind | runs | passes when | default diagnosis |", "|---|---|---|---|"};
  for (const CheckKind* k : check_registry()) {
    t.push_back(row({"`" + k->name + "`", arity(*k), k->passes_when,
                     k->diagnosis.empty() ? "per failure: its `diagnosis_*` parameters" : k->diagnosis}));
  }
  return t;
}

/// The parameters table as the registry has it, header included.
std::vector<std::string> params_table() {
  std::vector<std::string> t = {"| kind | parameter | type | default | meaning |", "|---|---|---|---|---|"};
  for (const CheckKind* k : check_registry()) {
    for (const auto& p : k->params) {
      t.push_back(
          row({"`" + k->name + "`", "`" + p.name + "`", param_type_name(p.type), default_of(p), meaning_of(p)}));
    }
  }
  return t;
}

/// The first table after the heading `heading` in the guide.
std::vector<std::string> table_after(const std::string& text, const std::string& heading) {
  std::istringstream in(text);
  std::vector<std::string> t;
  bool found = false;
  for (std::string line; std::getline(in, line);) {
    if (!found) {
      found = line == heading;
    } else if (line.rfind("|", 0) == 0) {
      t.push_back(line);
    } else if (!t.empty()) {
      break;
    }
  }
  return t;
}

void expect_same(const std::vector<std::string>& guide, const std::vector<std::string>& code, const std::string& what) {
  std::string want;
  for (const auto& l : code) want += l + "\n";
  // Both directions, row by row: every registry row is in the guide and every guide row in the
  // registry, in the registry's order.
  for (size_t i = 0; i < std::max(guide.size(), code.size()); ++i) {
    const std::string g = i < guide.size() ? guide[i] : "(missing)";
    const std::string c = i < code.size() ? code[i] : "(not in the registry)";
    if (g != c) {
      ADD_FAILURE() << "docs/instructor-guide.md, " << what << ", row " << i + 1 << ":\n  guide:    " << g
                    << "\n  registry: " << c << "\nThe table as the registry has it:\n"
                    << want;
      return;
    }
  }
}

TEST(Docs, TheGuideListsEveryCheckKindAndParameterAsTheRegistryDeclaresThem) {
  std::ifstream in(std::string(DDPLAB_TEST_SOURCE_ROOT) + "/docs/instructor-guide.md");
  ASSERT_TRUE(in) << "no docs/instructor-guide.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const auto kinds = table_after(ss.str(), "### Check kinds");
  const auto params = table_after(ss.str(), "### Check parameters");
  ASSERT_FALSE(kinds.empty()) << "no table after '### Check kinds'";
  ASSERT_FALSE(params.empty()) << "no table after '### Check parameters'";
  expect_same(kinds, kinds_table(), "'Check kinds'");
  expect_same(params, params_table(), "'Check parameters'");
}

// The verdicts table of docs/concepts/metrics.md against every grade.toml: a verdict a check
// grades is documented for its lab (or for every lab) with the exercise the check names, and a row
// names a lab that exists. A verdict renamed in a driver and a spec without the table fails here.
TEST(Docs, TheMetricsPageListsEveryGradedVerdict) {
  std::ifstream in(std::string(DDPLAB_TEST_SOURCE_ROOT) + "/docs/concepts/metrics.md");
  ASSERT_TRUE(in) << "no docs/concepts/metrics.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const auto table = table_after(ss.str(), "### Verdicts");
  ASSERT_GE(table.size(), 3u) << "no table after '### Verdicts' in docs/concepts/metrics.md";
  const auto specs = load_all_specs(DDPLAB_TEST_SOURCE_ROOT);
  std::set<std::string> labs;
  for (const auto& spec : specs) labs.insert(spec.folder);
  // (lab, verdict) -> exercise; lab "*" for the row of every lab.
  std::map<std::pair<std::string, std::string>, std::string> documented;
  auto cell = [](const std::string& c) {
    std::string t = c;
    t.erase(0, t.find_first_not_of(' '));
    t.erase(t.find_last_not_of(' ') + 1);
    if (t.size() >= 2 && t.front() == '`' && t.back() == '`') t = t.substr(1, t.size() - 2);
    return t;
  };
  for (size_t i = 2; i < table.size(); ++i) {
    std::vector<std::string> cells;
    std::stringstream line(table[i].substr(1));
    for (std::string c; std::getline(line, c, '|');) cells.push_back(cell(c));
    ASSERT_GE(cells.size(), 4u) << "verdicts table row " << i - 1 << ": " << table[i];
    const std::string lab = cells[0].rfind("every lab", 0) == 0 ? "*" : cells[0];
    EXPECT_TRUE(lab == "*" || labs.count(lab)) << "verdicts table row " << i - 1 << " names no lab: " << cells[0];
    documented[{lab, cells[1]}] = cells[2] == "—" ? "" : cells[2];
  }
  int graded = 0;
  for (const auto& spec : specs) {
    for (const auto& c : spec.checks) {
      if (c.kind != "verdict") continue;
      ++graded;
      const std::string id = c.params.value("verdict", std::string());
      auto it = documented.find({spec.folder, id});
      if (it == documented.end()) it = documented.find({"*", id});
      if (it == documented.end()) {
        ADD_FAILURE() << spec.folder << "/grade.toml check '" << c.id << "' grades verdict '" << id
                      << "', which docs/concepts/metrics.md's verdicts table does not list for " << spec.folder;
        continue;
      }
      if (it->first.first != "*") {
        // A verdict one program establishes in two modes lists both exercises ("10.2, 10.3").
        std::vector<std::string> ids;
        for (size_t at = 0; at <= it->second.size();) {
          const size_t comma = std::min(it->second.find(", ", at), it->second.size());
          ids.push_back(it->second.substr(at, comma - at));
          at = comma + 2;
        }
        EXPECT_NE(std::find(ids.begin(), ids.end(), c.exercise), ids.end())
            << "verdict '" << id << "' of " << spec.folder << ": the table's exercise (" << it->second
            << ") is not the one check '" << c.id << "' grades (" << c.exercise << ")";
      }
    }
  }
  EXPECT_GT(graded, 0) << "no grade.toml grades a verdict: the table has nothing to be compared with";
}

// The descriptors themselves: every kind names itself, says when it passes and how it fails,
// and declares each parameter once with a meaning, a default of its type and valid choices.
TEST(Docs, EveryDescriptorIsComplete) {
  for (const CheckKind* k : check_registry()) {
    EXPECT_FALSE(k->name.empty());
    EXPECT_FALSE(k->passes_when.empty()) << k->name;
    EXPECT_TRUE(k->run) << k->name;
    bool has_diagnosis_params = false;
    std::set<std::string> names;
    for (const auto& p : k->params) {
      EXPECT_TRUE(names.insert(p.name).second) << k->name << ": " << p.name << " twice";
      EXPECT_FALSE(p.meaning.empty()) << k->name << "." << p.name;
      EXPECT_EQ(p.default_value.is_null(), p.presence != Presence::kDefault) << k->name << "." << p.name;
      has_diagnosis_params = has_diagnosis_params || p.name.rfind("diagnosis_", 0) == 0;
      if (p.presence != Presence::kDefault) continue;
      const auto& d = p.default_value;
      switch (p.type) {
        case ParamType::kNumber: EXPECT_TRUE(d.is_number()) << k->name << "." << p.name; break;
        case ParamType::kInteger: EXPECT_TRUE(d.is_number_integer()) << k->name << "." << p.name; break;
        case ParamType::kBool: EXPECT_TRUE(d.is_boolean()) << k->name << "." << p.name; break;
        case ParamType::kString: EXPECT_TRUE(d.is_string()) << k->name << "." << p.name; break;
        case ParamType::kStringList: EXPECT_TRUE(d.is_array()) << k->name << "." << p.name; break;
      }
      if (!p.choices.empty()) {
        EXPECT_NE(std::find(p.choices.begin(), p.choices.end(), d.get<std::string>()), p.choices.end()) << k->name;
      }
    }
    EXPECT_TRUE(!k->diagnosis.empty() || has_diagnosis_params) << k->name << " has no wording for its failures";
  }
}

}  // namespace

namespace {

/// The rows of the first table after `## What is checked` in a handout, split into cells.
std::vector<std::vector<std::string>> checks_table(const std::string& readme) {
  std::ifstream in(readme);
  std::string line;
  bool section = false, table = false;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      if (section) break;
      section = line == "## What is checked";
      continue;
    }
    if (!section) continue;
    if (line.rfind("|", 0) != 0) {
      if (table) break;
      continue;
    }
    table = true;
    if (line.rfind("|---", 0) == 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) {
      const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    }
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST(Handouts, TheChecksTableIsTheSpecsChecksAsTheGraderPrintsThem) {
  // A student reads the handout's table and then the grader's output: the same checks, in the
  // same order, under the same names and points. The expected table is printed on failure.
  for (const auto& spec : load_all_specs(DDPLAB_TEST_SOURCE_ROOT)) {
    const std::string readme = std::string(DDPLAB_TEST_SOURCE_ROOT) + "/labs/" + spec.folder + "/README.md";
    const auto rows = checks_table(readme);
    std::string want = "| exercise | check (as `ddplab grade` prints it) | points | passes when |\n|---|---|---|---|\n";
    for (const auto& c : spec.checks) {
      want += fmt::format("| {} | {} | {:g} | ... |\n", c.exercise.empty() ? "—" : c.exercise, c.name, c.points);
    }
    ASSERT_FALSE(rows.empty()) << readme << ": no table under `## What is checked`; expected:\n" << want;
    EXPECT_EQ(rows[0],
              (std::vector<std::string>{"exercise", "check (as `ddplab grade` prints it)", "points", "passes when"}))
        << readme;
    ASSERT_EQ(rows.size() - 1, spec.checks.size()) << readme << ": one row per check; expected:\n" << want;
    for (size_t i = 0; i < spec.checks.size(); ++i) {
      const auto& c = spec.checks[i];
      const auto& r = rows[i + 1];
      ASSERT_EQ(r.size(), 4u) << readme << " row " << i + 1;
      EXPECT_EQ(r[0], c.exercise.empty() ? "—" : c.exercise) << readme << " row " << i + 1 << " (check " << c.id << ")";
      EXPECT_EQ(r[1], c.name) << readme << " row " << i + 1 << " (check " << c.id << ")";
      EXPECT_EQ(r[2], fmt::format("{:g}", c.points)) << readme << " row " << i + 1 << " (check " << c.id << ")";
      EXPECT_FALSE(r[3].empty()) << readme << " row " << i + 1 << ": say when it passes";
    }
  }
}

namespace {

// The grader's self-test grades the labs with a measured check alone and the others beside other
// tests (grader/CMakeLists.txt, DDPLAB_MEASURED_KINDS): a timing kind missing from that list would
// put its lab's timing among busy neighbours, where it fails for no fault of the solution.
TEST(Registry, TheMeasuredKindsOfTheTestSplitHoldEveryTimingKind) {
  std::set<std::string> measured;
  std::istringstream in(DDPLAB_TEST_MEASURED_KINDS);
  for (std::string kind; std::getline(in, kind, '|');) measured.insert(kind);
  int timing = 0;
  for (const CheckKind* k : check_registry()) {
    if (!k->timing) continue;
    ++timing;
    EXPECT_EQ(measured.count(k->name), 1u) << k->name << " is a timing kind missing from DDPLAB_MEASURED_KINDS";
  }
  EXPECT_GT(timing, 0);
  for (const auto& kind : measured) EXPECT_NE(find_kind(kind), nullptr) << kind << " is no check kind";
}

// The untimed full-marks grading waits for the calibration only when one of its labs has a check of
// a kind in DDPLAB_CALIBRATED_KINDS (grader/CMakeLists.txt): it must hold exactly the kinds whose
// checks the calibration measures (calibrated_checks, what `grade --calibrate` runs).
TEST(Registry, TheCalibratedKindsOfTheTestSplitHoldEveryCalibratedKind) {
  std::set<std::string> listed;
  std::istringstream in(DDPLAB_TEST_CALIBRATED_KINDS);
  for (std::string kind; std::getline(in, kind, '|');) listed.insert(kind);
  LabSpec every_kind;  // one check of each kind, its id the kind's name
  for (const CheckKind* k : check_registry()) {
    CheckSpec c;
    c.id = c.kind = k->name;
    every_kind.checks.push_back(c);
  }
  const std::vector<std::string> ids = calibrated_checks(every_kind);
  const std::set<std::string> calibrated(ids.begin(), ids.end());
  EXPECT_FALSE(calibrated.empty());
  EXPECT_EQ(listed, calibrated);
}

}  // namespace

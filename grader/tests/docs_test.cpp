// The instructor guide's tables of check kinds and parameters are compared with the registry in
// both directions, the way handouts are compared with the STUDENT CODE regions: a kind or
// parameter added, renamed or re-defaulted in code without the guide (or the reverse) fails here,
// and the failure prints the tables as the registry has them, ready to paste.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ddplab/grader/checks.h"

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

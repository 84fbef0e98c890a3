// Marker parsing and the skeleton/solution/handout consistency checks.
#include "ddplab/grader/regions.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/error.h"
#include "harness_parts.h"

namespace fs = std::filesystem;

namespace ddplab::grader {
namespace {

using parts::read_text;

const std::regex kBegin(R"(^\s*// BEGIN STUDENT CODE \((\d\d\.\d+): ([^)]+)\)\s*$)");
const std::regex kEnd(R"(^\s*// END STUDENT CODE\s*$)");
// A line that tries to be a marker (so a typo is an error, not silently student-editable text).
const std::regex kBeginAttempt(R"(^\s*//\s*BEGIN\s+STUDENT\s+CODE.*)");
const std::regex kEndAttempt(R"(^\s*//\s*END\s+STUDENT\s+CODE.*)");

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

MarkedFile parse_marked(const std::string& path, const std::string& text) {
  MarkedFile f;
  f.path = path;
  const auto lines = split_lines(text);
  Region* open = nullptr;
  Region current;
  std::set<std::string> ids;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const int n = static_cast<int>(i) + 1;
    std::smatch m;
    if (std::regex_match(line, kBeginAttempt)) {
      if (!std::regex_match(line, m, kBegin)) {
        throw Error(fmt::format("{}:{}: malformed marker, expected `// BEGIN STUDENT CODE (NN.M: title)`", path, n));
      }
      if (open != nullptr) {
        throw Error(fmt::format("{}:{}: BEGIN STUDENT CODE inside region {} opened at line {}", path, n, open->id,
                                open->begin_line));
      }
      current = Region{m[1], m[2], n, 0, ""};
      // An exercise may span several functions (one region each), but each region has its own title.
      if (!ids.insert(current.id + ": " + current.title).second) {
        throw Error(fmt::format("{}:{}: region {} appears twice ({})", path, n, current.id, current.title));
      }
      open = &current;
      f.outside.push_back(line);
      f.outside_lines.push_back(n);
    } else if (std::regex_match(line, kEndAttempt)) {
      if (!std::regex_match(line, kEnd)) {
        throw Error(fmt::format("{}:{}: malformed marker, expected `// END STUDENT CODE`", path, n));
      }
      if (open == nullptr) throw Error(fmt::format("{}:{}: END STUDENT CODE without a BEGIN", path, n));
      current.end_line = n;
      f.regions.push_back(current);
      open = nullptr;
      f.outside.push_back(line);
      f.outside_lines.push_back(n);
    } else if (open != nullptr) {
      current.body += line + "\n";
    } else {
      f.outside.push_back(line);
      f.outside_lines.push_back(n);
    }
  }
  if (open != nullptr) {
    throw Error(
        fmt::format("{}:{}: region {} is never closed with // END STUDENT CODE", path, open->begin_line, open->id));
  }
  return f;
}

MarkedFile parse_marked_file(const std::string& path) { return parse_marked(path, read_text(path)); }

bool is_stub(const Region& region) {
  // The body without comments and whitespace (string literals kept as they are): a stub still
  // throws its own exercise's NotImplemented; a throw commented out or deleted is an edit.
  std::string code;
  bool in_string = false;
  const std::string& b = region.body;
  for (size_t i = 0; i < b.size(); ++i) {
    const char c = b[i];
    if (in_string) {
      code += c;
      if (c == '\\' && i + 1 < b.size()) {
        code += b[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '/' && i + 1 < b.size() && b[i + 1] == '/') {
      while (i < b.size() && b[i] != '\n') ++i;
      continue;
    }
    if (c == '"') in_string = true;
    if (!std::isspace(static_cast<unsigned char>(c))) code += c;
  }
  return code.find("ddplab::NotImplemented(\"" + region.id + "\"") != std::string::npos;
}

std::map<std::string, ExerciseProgress> exercise_progress(const std::vector<MarkedFile>& files) {
  std::map<std::string, ExerciseProgress> out;
  for (const auto& f : files) {
    for (const auto& r : f.regions) {
      auto& p = out[r.id];
      if (is_stub(r)) {
        p.stubs.push_back(fmt::format("{}:{}", fs::path(f.path).filename().string(), r.begin_line));
      } else {
        ++p.edited;
      }
    }
  }
  return out;
}

std::vector<std::string> list_labs(const std::string& root) {
  std::vector<std::string> labs;
  if (!fs::is_directory(fs::path(root) / "labs")) return labs;
  for (const auto& e : fs::directory_iterator(fs::path(root) / "labs")) {
    if (e.is_directory() && fs::is_directory(fs::path(root) / "solutions" / e.path().filename())) {
      labs.push_back(e.path().filename().string());
    }
  }
  std::sort(labs.begin(), labs.end());
  return labs;
}

std::vector<std::string> student_files(const std::string& root, const std::string& lab) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(fs::path(root) / "solutions" / lab)) {
    if (e.is_regular_file()) files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::set<std::string> handout_exercise_ids(const std::string& text, const std::string& lab_number) {
  std::set<std::string> ids;
  const std::regex id("(^|[^0-9.])(" + lab_number + R"(\.\d+)(?![0-9]))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), id); it != std::sregex_iterator(); ++it) {
    ids.insert((*it)[2]);
  }
  return ids;
}

KitProblems check_lab(const std::string& root, const std::string& lab) {
  KitProblems p;
  const fs::path skel_dir = fs::path(root) / "labs" / lab;
  const fs::path sol_dir = fs::path(root) / "solutions" / lab;
  const std::string number = lab.size() >= 5 ? lab.substr(3, 2) : "";
  std::set<std::string> code_ids;
  for (const auto& name : student_files(root, lab)) {
    const std::string skel_path = (skel_dir / name).string();
    if (!fs::exists(skel_path)) {
      p.items.push_back(
          fmt::format("{}: the solution has it, the skeleton tree has no {}", (sol_dir / name).string(), skel_path));
      continue;
    }
    MarkedFile skel, sol;
    try {
      skel = parse_marked_file(skel_path);
      sol = parse_marked_file((sol_dir / name).string());
    } catch (const Error& e) {
      p.items.push_back(e.what());
      continue;
    }
    std::vector<std::string> skel_ids, sol_ids;
    for (const auto& r : skel.regions) skel_ids.push_back(r.id + ": " + r.title);
    for (const auto& r : sol.regions) sol_ids.push_back(r.id + ": " + r.title);
    if (skel_ids != sol_ids) {
      p.items.push_back(fmt::format("{}: regions [{}] differ from the solution's [{}]", skel_path,
                                    fmt::join(skel_ids, ", "), fmt::join(sol_ids, ", ")));
    }
    const size_t n = std::min(skel.outside.size(), sol.outside.size());
    for (size_t i = 0; i < n; ++i) {
      if (skel.outside[i] != sol.outside[i]) {
        p.items.push_back(fmt::format("{} and {} differ outside the student regions: `{}` vs `{}`", skel_path, sol.path,
                                      skel.outside[i], sol.outside[i]));
        break;
      }
    }
    if (skel.outside.size() != sol.outside.size()) {
      p.items.push_back(fmt::format("{} and {} differ outside the student regions ({} vs {} lines)", skel_path,
                                    sol.path, skel.outside.size(), sol.outside.size()));
    }
    for (const auto& r : sol.regions) {
      if (is_stub(r)) {
        p.items.push_back(
            fmt::format("{}:{}: solution region {} ({}) is still the stub", sol.path, r.begin_line, r.id, r.title));
      }
    }
    for (const auto& r : skel.regions) {
      code_ids.insert(r.id);
      if (!is_stub(r)) {
        p.items.push_back(fmt::format("{}:{}: skeleton region {} does not throw ddplab::NotImplemented(\"{}\")",
                                      skel_path, r.begin_line, r.id, r.id));
      }
      if (number.empty() || r.id.rfind(number + ".", 0) != 0) {
        p.items.push_back(
            fmt::format("{}:{}: region {} does not belong to lab {}", skel_path, r.begin_line, r.id, number));
      }
    }
  }
  const fs::path readme = skel_dir / "README.md";
  if (!fs::exists(readme)) {
    p.items.push_back(fmt::format("{}: missing handout", readme.string()));
    return p;
  }
  const auto handout_ids = handout_exercise_ids(read_text(readme.string()), number);
  for (const auto& id : handout_ids) {
    if (code_ids.count(id) == 0) {
      p.items.push_back(fmt::format("{}: names exercise {}, which no student region has", readme.string(), id));
    }
  }
  for (const auto& id : code_ids) {
    if (handout_ids.count(id) == 0) {
      p.items.push_back(fmt::format("{}: does not mention exercise {} of the code", readme.string(), id));
    }
  }
  return p;
}

}  // namespace ddplab::grader

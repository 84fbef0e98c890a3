// The enforced rules: edits only inside the STUDENT CODE regions (the submission against its
// skeleton, before anything is built), and no call of a kit function the spec forbids (the
// compiled student library's undefined symbols, through nm).
#include "ddplab/grader/rules.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "ddplab/error.h"
#include "ddplab/grader/regions.h"
#include "ddplab/launch.h"
#include "harness_parts.h"

namespace fs = std::filesystem;

namespace ddplab::grader {
namespace {

using parts::read_text;

std::string rstrip(const std::string& s) {
  size_t n = s.size();
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) --n;
  return s.substr(0, n);
}

/// The outside lines that count (blank ones dropped, line ends stripped), with their line numbers.
struct Lines {
  std::vector<std::string> text;
  std::vector<int> line;
};

Lines significant(const MarkedFile& f) {
  Lines l;
  for (size_t i = 0; i < f.outside.size(); ++i) {
    std::string t = rstrip(f.outside[i]);
    if (t.empty()) continue;
    l.text.push_back(std::move(t));
    l.line.push_back(f.outside_lines[i]);
  }
  return l;
}

std::string shown(const std::string& line) {
  constexpr size_t kMax = 120;
  std::string s = line.size() > kMax ? line.substr(0, kMax) + "..." : line;
  const auto first = s.find_first_not_of(" \t");
  return "`" + (first == std::string::npos ? s : s.substr(first)) + "`";
}

}  // namespace

/// The text with CRLF line ends made LF (a file saved on Windows).
static std::string lf(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    out += text[i];
  }
  return out;
}

std::string outside_edit(const std::string& name, const std::string& skeleton_text, const std::string& submission_text,
                         bool reference_is_skeleton) {
  const MarkedFile skel_file =
      parse_marked(name + (reference_is_skeleton ? " (skeleton)" : " (the kit's)"), lf(skeleton_text));
  MarkedFile sub_file;
  try {
    sub_file = parse_marked(name, lf(submission_text));
  } catch (const Error& e) {
    // "name:line: malformed marker ..." and the like: a marker the student broke.
    return fmt::format("{} (the BEGIN/END STUDENT CODE markers must stay as the skeleton has them)", e.what());
  }
  const Lines skel = significant(skel_file), sub = significant(sub_file);
  // The skeleton's line numbers help a student find the line; the solution's (a student's own
  // tree is checked against it) would only mislead: the text alone then.
  auto missing = [&](size_t i) {
    return reference_is_skeleton
               ? fmt::format("the skeleton's line {} {} is missing", skel.line[i], shown(skel.text[i]))
               : fmt::format("the kit's line {} is missing", shown(skel.text[i]));
  };
  auto where = [&](size_t i) {
    return reference_is_skeleton ? fmt::format("where the skeleton's line {} is {}", skel.line[i], shown(skel.text[i]))
                                 : fmt::format("where the kit has {}", shown(skel.text[i]));
  };
  const std::string what = "edited outside the STUDENT CODE regions";
  const size_t n = std::min(skel.text.size(), sub.text.size());
  for (size_t i = 0; i < n; ++i) {
    if (skel.text[i] == sub.text[i]) continue;
    if (i + 1 < sub.text.size() && sub.text[i + 1] == skel.text[i]) {
      return fmt::format("{}:{}: {}: line added: {}", name, sub.line[i], what, shown(sub.text[i]));
    }
    if (i + 1 < skel.text.size() && sub.text[i] == skel.text[i + 1]) {
      // Where it should be: after the last line that agrees.
      return fmt::format("{}:{}: {}: {}", name, i == 0 ? 1 : sub.line[i - 1] + 1, what, missing(i));
    }
    return fmt::format("{}:{}: {}: {} {}", name, sub.line[i], what, shown(sub.text[i]), where(i));
  }
  if (sub.text.size() > n) {
    return fmt::format("{}:{}: {}: line added: {}", name, sub.line[n], what, shown(sub.text[n]));
  }
  if (skel.text.size() > n) {
    const int at = sub_file.outside_lines.empty() ? 1 : sub_file.outside_lines.back() + 1;
    return fmt::format("{}:{}: {}: {}", name, at, what, missing(n));
  }
  return "";
}

std::vector<std::string> submission_region_edits(const LabSpec& spec, const std::string& skeleton_dir,
                                                 const std::string& submission_dir, bool reference_is_skeleton) {
  std::vector<std::string> edits;
  for (const auto& f : spec.manifest) {
    const fs::path sub = fs::path(submission_dir) / f, ref = fs::path(skeleton_dir) / f;
    if (!fs::exists(sub) || (!reference_is_skeleton && !fs::exists(ref))) continue;
    std::string e = outside_edit(f, read_text(ref), read_text(sub), reference_is_skeleton);
    if (!e.empty()) edits.push_back(std::move(e));
  }
  return edits;
}

std::vector<UndefinedSymbol> parse_nm_undefined(const std::string& nm_output) {
  std::vector<UndefinedSymbol> out;
  std::istringstream in(nm_output);
  std::string file;
  for (std::string line; std::getline(in, line);) {
    line = rstrip(line);
    if (line.empty()) continue;
    if (line.back() == ':' && line.find(' ') == std::string::npos) {
      // An archive member: "lab01_student.cpp.o:".
      file = line.substr(0, line.size() - 1);
      if (file.size() > 2 && file.compare(file.size() - 2, 2, ".o") == 0) file.resize(file.size() - 2);
      continue;
    }
    const auto u = line.find_first_not_of(' ');
    if (u == std::string::npos || line.compare(u, 2, "U ") != 0) continue;
    out.push_back({file, line.substr(u + 2)});
  }
  return out;
}

std::vector<UndefinedSymbol> undefined_symbols(const std::string& path) {
  if (!fs::exists(path)) throw Error(fmt::format("grader: {} does not exist (was the student library built?)", path));
  LaunchSpec spec;
  spec.nproc = 1;
  spec.command = {"nm", "-C", "--undefined-only", path};
  spec.timeout_s = 60;
  spec.prefix_output = false;
  std::string out, err;
  spec.on_line = [&](int, bool is_stderr, const std::string& l) { (is_stderr ? err : out) += l + "\n"; };
  spec.on_message = [&](const std::string& m) { err += m + "\n"; };
  LaunchResult r;
  try {
    r = launch(spec);
  } catch (const Error& e) {
    throw Error(fmt::format("grader: cannot run nm (binutils) to read {}: {}", path, e.what()));
  }
  if (r.exit_code != 0)
    throw Error(fmt::format("grader: nm -C --undefined-only {} failed: {}{}", path, r.summary, err));
  return parse_nm_undefined(out);
}

std::string function_of_symbol(const std::string& demangled) {
  for (const char* data : {"vtable for ", "typeinfo for ", "typeinfo name for ", "VTT for ", "construction vtable for ",
                           "guard variable for ", "reference temporary ", "TLS init function for ",
                           "TLS wrapper function for ", "non-virtual thunk to ", "virtual thunk to "}) {
    if (demangled.rfind(data, 0) == 0) {
      // Thunks call the named function: judge that one; the others are data.
      const std::string what(data);
      if (what.find("thunk") != std::string::npos) return function_of_symbol(demangled.substr(what.size()));
      return "";
    }
  }
  std::string s = demangled;
  for (const std::string anon = "(anonymous namespace)"; s.find(anon) != std::string::npos;) {
    s.replace(s.find(anon), anon.size(), "{anonymous}");
  }
  // The parameter list starts at the first '(' outside template arguments ("operator()" aside).
  int depth = 0;
  size_t open = std::string::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<') {
      ++depth;
    } else if (c == '>') {
      if (depth > 0) --depth;
    } else if (c == '(' && depth == 0) {
      if (s.compare(i, 3, "()(") == 0 && i >= 8 && s.compare(i - 8, 8, "operator") == 0) {
        open = i + 2;
      } else {
        open = i;
      }
      break;
    }
  }
  if (open == std::string::npos) return "";  // a variable
  std::string name = s.substr(0, open);
  // A function template's symbol starts with its return type: keep what follows the last space
  // outside template arguments (operators, with their own spaces, are left as they are).
  depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < name.size() && name.find("operator") == std::string::npos; ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>' && depth > 0) --depth;
    if (name[i] == ' ' && depth == 0) start = i + 1;
  }
  name = name.substr(start);
  // Template arguments of the function itself: "f<int>" -> "f".
  if (!name.empty() && name.back() == '>') {
    int d = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == '>') ++d;
      if (name[i] == '<' && --d == 0) {
        name.resize(i);
        break;
      }
    }
  }
  return name;
}

std::vector<ForbiddenCall> forbidden_calls(const LabSpec& spec, const std::vector<UndefinedSymbol>& undefined) {
  std::vector<ForbiddenCall> out;
  for (const auto& entry : spec.forbidden) {
    const std::string& exercise = entry.first;  // captured below: not a structured binding (C++17)
    for (const auto& f : entry.second) {
      for (const auto& u : undefined) {
        const std::string fn = function_of_symbol(u.symbol);
        if (fn.empty()) continue;
        if (fn == f || fn.rfind(f + "::", 0) == 0) {
          const bool seen = std::any_of(out.begin(), out.end(), [&](const ForbiddenCall& c) {
            return c.exercise == exercise && c.function == f && c.symbol == u.symbol;
          });
          if (!seen) out.push_back({exercise, f, u.file, u.symbol});
        }
      }
    }
  }
  return out;
}

}  // namespace ddplab::grader

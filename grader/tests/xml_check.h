// A small XML well-formedness check for the tests of generated SVG and XHTML fragments: elements
// nest and close, attributes are quoted and unique, entities are the predefined or numeric ones,
// no '<' or stray '&' in text. Not a validating parser; enough to catch broken markup without a
// dependency. Also collects element names, so a test can count what was drawn.
#pragma once

#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ddplab::grader::testing {

struct XmlCheck {
  std::string error;                    ///< "" when well-formed
  std::map<std::string, int> elements;  ///< element name -> count
  std::string root;                     ///< the first element's name
};

inline XmlCheck check_xml(const std::string& s) {
  XmlCheck r;
  std::vector<std::string> open;
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    r.error = why + " at offset " + std::to_string(i);
    return r;
  };
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.';
  };
  auto entity_ok = [&](size_t at) {  // s[at] == '&'
    const size_t end = s.find(';', at);
    if (end == std::string::npos || end - at > 10) return false;
    const std::string e = s.substr(at + 1, end - at - 1);
    if (e == "amp" || e == "lt" || e == "gt" || e == "quot" || e == "apos") return true;
    if (e.size() >= 2 && e[0] == '#') {
      for (size_t k = 1; k < e.size(); ++k) {
        if (!std::isxdigit(static_cast<unsigned char>(e[k])) && !(k == 1 && e[k] == 'x')) return false;
      }
      return true;
    }
    return false;
  };
  while (i < s.size()) {
    if (s[i] == '&') {
      if (!entity_ok(i)) return fail("bad entity");
      ++i;
      continue;
    }
    if (s[i] != '<') {
      ++i;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      const size_t end = s.find("-->", i);
      if (end == std::string::npos) return fail("unclosed comment");
      i = end + 3;
      continue;
    }
    if (s.compare(i, 2, "<?") == 0 || s.compare(i, 2, "<!") == 0) {
      const size_t end = s.find('>', i);
      if (end == std::string::npos) return fail("unclosed declaration");
      i = end + 1;
      continue;
    }
    const bool closing = i + 1 < s.size() && s[i + 1] == '/';
    size_t j = i + (closing ? 2 : 1);
    const size_t name_at = j;
    while (j < s.size() && name_char(s[j])) ++j;
    const std::string name = s.substr(name_at, j - name_at);
    if (name.empty()) return fail("'<' without an element name");
    if (closing) {
      while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      if (j >= s.size() || s[j] != '>') return fail("bad closing tag </" + name);
      if (open.empty() || open.back() != name) {
        return fail("</" + name + "> closes " + (open.empty() ? std::string("nothing") : "<" + open.back() + ">"));
      }
      open.pop_back();
      i = j + 1;
      continue;
    }
    std::set<std::string> attrs;
    bool self_closing = false;
    for (;;) {
      while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      if (j >= s.size()) return fail("unclosed tag <" + name);
      if (s[j] == '>') break;
      if (s.compare(j, 2, "/>") == 0) {
        self_closing = true;
        ++j;
        break;
      }
      const size_t a = j;
      while (j < s.size() && name_char(s[j])) ++j;
      const std::string attr = s.substr(a, j - a);
      if (attr.empty()) return fail("bad attribute in <" + name);
      if (!attrs.insert(attr).second) return fail("attribute " + attr + " twice in <" + name);
      if (j + 1 >= s.size() || s[j] != '=' || (s[j + 1] != '"' && s[j + 1] != '\'')) {
        return fail("attribute " + attr + " of <" + name + " is not quoted");
      }
      const char q = s[j + 1];
      const size_t end = s.find(q, j + 2);
      if (end == std::string::npos) return fail("unterminated attribute " + attr);
      for (size_t k = j + 2; k < end; ++k) {
        if (s[k] == '<') return fail("'<' in attribute " + attr);
        if (s[k] == '&' && !entity_ok(k)) return fail("bad entity in attribute " + attr);
      }
      j = end + 1;
    }
    if (r.root.empty()) r.root = name;
    ++r.elements[name];
    if (!self_closing) open.push_back(name);
    i = j + 1;
  }
  if (!open.empty()) {
    i = s.size();
    return fail("<" + open.back() + "> is never closed");
  }
  return r;
}

/// Every <svg>...</svg> in `html`, in order.
inline std::vector<std::string> svg_elements(const std::string& html) {
  std::vector<std::string> out;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    const size_t end = html.find("</svg>", at);
    if (end == std::string::npos) break;
    out.push_back(html.substr(at, end + 6 - at));
  }
  return out;
}

}  // namespace ddplab::grader::testing

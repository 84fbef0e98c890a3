// Parsing and validation of grade.toml (toml++): the [lab] facts derived from the lab's folder,
// the runs, and the checks validated against their kinds' descriptors. Every error names the
// file and line.
#include "ddplab/grader/spec.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "ddplab/error.h"
#include "ddplab/grader/checks.h"
#include "ddplab/grader/regions.h"

namespace fs = std::filesystem;

namespace ddplab::grader {

Visibility parse_visibility(const std::string& s, const std::string& where) {
  if (s == "visible") return Visibility::kVisible;
  if (s == "hidden") return Visibility::kHidden;
  if (s == "after_due_date") return Visibility::kAfterDueDate;
  if (s == "after_published") return Visibility::kAfterPublished;
  throw ConfigError(
      fmt::format("{}: visibility '{}': expected visible, hidden, after_due_date or after_published", where, s));
}

const char* visibility_name(Visibility v) {
  switch (v) {
    case Visibility::kVisible: return "visible";
    case Visibility::kHidden: return "hidden";
    case Visibility::kAfterDueDate: return "after_due_date";
    case Visibility::kAfterPublished: return "after_published";
  }
  return "visible";
}

const RunSpec& LabSpec::run(const std::string& name) const {
  for (const auto& r : runs) {
    if (r.name == name) return r;
  }
  throw ConfigError(fmt::format("{}: no run named '{}'", path, name));
}

double LabSpec::max_score() const {
  double s = 0;
  for (const auto& c : checks) s += c.points;
  return s;
}

namespace {

const nlohmann::json& param(const CheckSpec& c, const std::string& key) {
  const auto it = c.params.find(key);
  if (it == c.params.end()) {
    throw UndeclaredParameter(
        fmt::format("grader bug: check kind '{}' reads parameter '{}', which is not set (declare it "
                    "in the kind's descriptor)",
                    c.kind, key));
  }
  return *it;
}

}  // namespace

double CheckSpec::number(const std::string& key) const { return param(*this, key).get<double>(); }
int64_t CheckSpec::integer(const std::string& key) const { return param(*this, key).get<int64_t>(); }
bool CheckSpec::flag(const std::string& key) const { return param(*this, key).get<bool>(); }
std::string CheckSpec::text(const std::string& key) const { return param(*this, key).get<std::string>(); }
std::vector<std::string> CheckSpec::texts(const std::string& key) const {
  return param(*this, key).get<std::vector<std::string>>();
}

namespace {

std::string where(const std::string& path, const toml::node& n) {
  return fmt::format("{}:{}", path, n.source().begin.line);
}

/// A `backend` key's value (of [lab] or a [[run]]): one of `ddplab launch --backend`'s, or "" where
/// `empty_ok` (a run's "" is the lab's); `what` says where ("path:line: [lab] backend").
void check_backend(const std::string& value, const std::string& what, bool empty_ok) {
  if ((empty_ok && value.empty()) || value == "auto" || value == "c10d" || value == "mpi") return;
  throw ConfigError(fmt::format("{} '{}': expected auto, c10d or mpi", what, value));
}

nlohmann::json to_json(const toml::node& n) {
  if (auto t = n.as_table()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : *t) j[std::string(k.str())] = to_json(v);
    return j;
  }
  if (auto a = n.as_array()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& v : *a) j.push_back(to_json(v));
    return j;
  }
  if (auto v = n.value<bool>(); n.is_boolean()) return *v;
  if (n.is_integer()) return *n.value<int64_t>();
  if (n.is_floating_point()) return *n.value<double>();
  if (n.is_string()) return *n.value<std::string>();
  return nlohmann::json();  // dates and times: not used by any check
}

/// Reads the keys of one table, complaining about keys no one reads.
class Reader {
 public:
  Reader(const std::string& path, const toml::table& t, std::string what)
      : path_(path), t_(t), what_(std::move(what)) {}

  std::string str(const char* key, bool required, const std::string& def = "") {
    used_.insert(key);
    const auto* n = t_.get(key);
    if (!n) {
      if (required) throw ConfigError(fmt::format("{}: {} needs '{}'", where(path_, t_), what_, key));
      return def;
    }
    if (!n->is_string()) throw ConfigError(fmt::format("{}: '{}' must be a string", where(path_, *n), key));
    return *n->value<std::string>();
  }
  double num(const char* key, double def) {
    used_.insert(key);
    const auto* n = t_.get(key);
    if (!n) return def;
    if (!n->is_number()) throw ConfigError(fmt::format("{}: '{}' must be a number", where(path_, *n), key));
    return *n->value<double>();
  }
  bool flag(const char* key, bool def) {
    used_.insert(key);
    const auto* n = t_.get(key);
    if (!n) return def;
    if (!n->is_boolean()) throw ConfigError(fmt::format("{}: '{}' must be true or false", where(path_, *n), key));
    return *n->value<bool>();
  }
  std::vector<std::string> strs(const char* key, bool required) {
    used_.insert(key);
    const auto* n = t_.get(key);
    std::vector<std::string> out;
    if (!n) {
      if (required) throw ConfigError(fmt::format("{}: {} needs '{}'", where(path_, t_), what_, key));
      return out;
    }
    const auto* a = n->as_array();
    if (!a) throw ConfigError(fmt::format("{}: '{}' must be an array of strings", where(path_, *n), key));
    for (const auto& v : *a) {
      if (!v.is_string()) throw ConfigError(fmt::format("{}: '{}' must be an array of strings", where(path_, v), key));
      out.push_back(*v.value<std::string>());
    }
    return out;
  }
  /// Every key not read so far, as JSON (the check's kind-specific parameters).
  nlohmann::json rest() {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : t_) {
      const std::string key(k.str());
      if (!used_.count(key)) j[key] = to_json(v);
    }
    return j;
  }
  /// The line of each key not read so far.
  std::map<std::string, int> rest_lines() {
    std::map<std::string, int> lines;
    for (const auto& [k, v] : t_) {
      const std::string key(k.str());
      if (!used_.count(key)) lines[key] = static_cast<int>(v.source().begin.line);
    }
    return lines;
  }
  void no_other_keys() {
    for (const auto& [k, v] : t_) {
      const std::string key(k.str());
      if (!used_.count(key)) throw ConfigError(fmt::format("{}: unknown key '{}' in {}", where(path_, v), key, what_));
    }
  }
  const toml::table& table() const { return t_; }

 private:
  const std::string& path_;
  const toml::table& t_;
  std::string what_;
  std::set<std::string> used_;
};

/// Exercise ids in course order: "03.2" before "03.10".
bool exercise_less(const std::string& a, const std::string& b) {
  const auto split = [](const std::string& id) {
    const auto dot = id.find('.');
    return std::make_pair(std::stoi(id.substr(0, dot)), std::stoi(id.substr(dot + 1)));
  };
  return split(a) < split(b);
}

/// The [lab] facts that follow from a spec at <root>/labs/<folder>/grade.toml: the id, folder and
/// program are the folder's name, the manifest the files of solutions/<folder>/, the exercises
/// the ids of their STUDENT CODE regions. The skeleton must hold the same files.
void derive_lab(LabSpec& s, const fs::path& root, const std::string& folder) {
  s.id = s.folder = s.program = folder;
  const fs::path solutions = root / "solutions" / folder;
  if (!fs::is_directory(solutions)) {
    throw ConfigError(fmt::format("{}: lab {} has no solutions/{}/ (its files give the manifest and exercises)", s.path,
                                  folder, folder));
  }
  s.manifest = student_files(root.string(), folder);
  if (s.manifest.empty()) {
    throw ConfigError(fmt::format("{}: solutions/{}/ holds no file for the manifest", s.path, folder));
  }
  for (const auto& f : s.manifest) {
    if (!fs::is_regular_file(root / "labs" / folder / f)) {
      throw ConfigError(fmt::format("{}: solutions/{}/{} has no skeleton labs/{}/{}", s.path, folder, f, folder, f));
    }
    try {
      for (const auto& r : parse_marked_file((solutions / f).string()).regions) s.exercises.push_back(r.id);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      throw ConfigError(fmt::format("{}: {}", s.path, e.what()));
    }
  }
  std::sort(s.exercises.begin(), s.exercises.end(), exercise_less);
  s.exercises.erase(std::unique(s.exercises.begin(), s.exercises.end()), s.exercises.end());  // one per id
}

/// The lab folder of a spec at <root>/labs/<folder>/grade.toml, with the kit's root; none for a
/// spec elsewhere.
std::optional<std::pair<fs::path, std::string>> lab_folder_of(const std::string& path) {
  const fs::path p = fs::absolute(path).lexically_normal();
  const fs::path dir = p.parent_path();
  if (p.filename() != "grade.toml" || dir.parent_path().filename() != "labs") return std::nullopt;
  return std::make_pair(dir.parent_path().parent_path(), dir.filename().string());
}

const toml::table& table_at(const std::string& path, const toml::table& root, const char* key) {
  const auto* n = root.get(key);
  if (!n || !n->is_table()) throw ConfigError(fmt::format("{}: missing [{}] table", path, key));
  return *n->as_table();
}

toml::table parse_toml(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw ConfigError(
        fmt::format("{}:{}:{}: {}", path, e.source().begin.line, e.source().begin.column, e.description()));
  }
}

/// The lab the parsed overlay `o` (read from `overlay`) is for: its [overlay] lab.
std::string lab_of_overlay(const toml::table& o, const std::string& overlay) {
  const auto lab = o["overlay"]["lab"].value<std::string>();
  if (!lab || lab->empty()) {
    throw ConfigError(
        fmt::format("{}: an overlay needs [overlay] lab = \"<lab id>\" (the lab it adds checks to)", overlay));
  }
  return *lab;
}

/// The top-level keys of an overlay, and that it is for `lab`.
void check_overlay(const toml::table& o, const std::string& overlay, const std::string& lab) {
  for (const auto& [k, v] : o) {
    const std::string key(k.str());
    if (key != "overlay" && key != "run" && key != "check") {
      throw ConfigError(
          fmt::format("{}: unknown top-level key '{}' in an overlay (expected [overlay], [[run]], [[check]])",
                      where(overlay, v), key));
    }
  }
  const std::string for_lab = lab_of_overlay(o, overlay);
  if (for_lab != lab)
    throw ConfigError(fmt::format("{}: this overlay is for lab '{}', not '{}'", overlay, for_lab, lab));
}

/// The [[run]] tables of `root` (the spec at `path`, or an overlay) into s.runs; `names` holds the
/// run names so far. A relative `data` path is taken from `path`'s folder.
void parse_runs(const std::string& path, const toml::table& root, LabSpec& s, std::set<std::string>& names) {
  if (const auto* n = root.get("run")) {
    const auto* arr = n->as_array();
    if (!arr) throw ConfigError(fmt::format("{}: 'run' must be an array of tables ([[run]])", where(path, *n)));
    for (const auto& e : *arr) {
      if (!e.is_table()) throw ConfigError(fmt::format("{}: each [[run]] must be a table", where(path, e)));
      Reader r(path, *e.as_table(), "[[run]]");
      RunSpec run;
      run.name = r.str("name", true);
      run.ranks = static_cast<int>(r.num("ranks", 1));
      run.args = r.strs("args", false);
      run.timeout_s = r.num("timeout_s", 0);
      run.save_model = r.flag("save_model", false);
      run.expect_failure = r.flag("expect_failure", false);
      run.data = r.str("data", false);
      run.backend = r.str("backend", false);
      check_backend(run.backend, fmt::format("{}: run '{}': backend", where(path, e), run.name), true);
      if (!run.data.empty() && fs::path(run.data).is_relative()) {
        run.data = (fs::absolute(path).parent_path() / run.data).lexically_normal().string();
      }
      r.no_other_keys();
      if (!run.data.empty() && !fs::exists(fs::path(run.data) / "meta.json")) {
        throw ConfigError(
            fmt::format("{}: run '{}': data {}: no data set there (no meta.json)", where(path, e), run.name, run.data));
      }
      if (!names.insert(run.name).second) {
        throw ConfigError(fmt::format("{}: duplicate run name '{}'", where(path, e), run.name));
      }
      if (run.ranks < 1 || run.ranks > 16) {
        throw ConfigError(fmt::format("{}: run '{}': ranks must be in 1..16", where(path, e), run.name));
      }
      if (run.expect_failure && run.save_model) {
        throw ConfigError(
            fmt::format("{}: run '{}': a run expected to stop with an error saves no model "
                        "(expect_failure and save_model exclude each other)",
                        where(path, e), run.name));
      }
      for (const auto& a : run.args) {
        for (size_t at = a.find("{run:"); at != std::string::npos; at = a.find("{run:", at + 1)) {
          const size_t end = a.find('}', at);
          const std::string other = end == std::string::npos ? "" : a.substr(at + 5, end - at - 5);
          if (other.empty() || !names.count(other) || other == run.name) {
            throw ConfigError(fmt::format("{}: run '{}': argument '{}': {{run:NAME}} must name an earlier run",
                                          where(path, e), run.name, a));
          }
        }
        if (a == "--data" || a == "--report" || a == "--save-model") {
          throw ConfigError(fmt::format("{}: run '{}': {} is set by the grader", where(path, e), run.name, a));
        }
      }
      s.runs.push_back(std::move(run));
    }
  }
}

/// The [[check]] tables of `root` into s.checks; `check_names` and `check_ids` hold those so far.
void parse_checks(const std::string& path, const toml::table& root, LabSpec& s, const std::set<std::string>& names,
                  std::set<std::string>& check_names, std::set<std::string>& check_ids) {
  static const std::regex kId("[a-z][a-z0-9_]*");
  if (const auto* n = root.get("check")) {
    const auto* arr = n->as_array();
    if (!arr) throw ConfigError(fmt::format("{}: 'check' must be an array of tables ([[check]])", where(path, *n)));
    for (const auto& e : *arr) {
      if (!e.is_table()) throw ConfigError(fmt::format("{}: each [[check]] must be a table", where(path, e)));
      Reader r(path, *e.as_table(), "[[check]]");
      CheckSpec c;
      c.line = static_cast<int>(e.source().begin.line);
      c.id = r.str("id", true);
      c.kind = r.str("kind", true);
      c.name = r.str("name", true);
      c.exercise = r.str("exercise", false);
      c.builds_on = r.strs("builds_on", false);
      c.points = r.num("points", 0);
      c.visibility = parse_visibility(r.str("visibility", false, "visible"), where(path, e));
      c.diagnosis_given = e.as_table()->contains("diagnosis");
      c.diagnosis = r.str("diagnosis", false);
      if (e.as_table()->get("run")) c.runs.push_back(r.str("run", true));
      for (auto& x : r.strs("runs", false)) c.runs.push_back(std::move(x));
      c.params = r.rest();
      c.param_lines = r.rest_lines();
      if (!std::regex_match(c.id, kId)) {
        throw ConfigError(
            fmt::format("{}: check id '{}' must be snake_case (a-z, 0-9, _; a letter first)", where(path, e), c.id));
      }
      if (!check_ids.insert(c.id).second) {
        throw ConfigError(fmt::format("{}: duplicate check id '{}'", where(path, e), c.id));
      }
      if (c.points < 0) throw ConfigError(fmt::format("{}: check '{}': points must be >= 0", where(path, e), c.name));
      if (!check_names.insert(c.name).second) {
        throw ConfigError(fmt::format("{}: duplicate check name '{}'", where(path, e), c.name));
      }
      if (!c.exercise.empty() && std::find(s.exercises.begin(), s.exercises.end(), c.exercise) == s.exercises.end()) {
        throw ConfigError(fmt::format("{}: check '{}': exercise {} is not one of the lab's exercises ({})",
                                      where(path, e), c.name, c.exercise, fmt::join(s.exercises, ", ")));
      }
      for (const auto& ex : c.builds_on) {
        if (std::find(s.exercises.begin(), s.exercises.end(), ex) == s.exercises.end() || ex == c.exercise) {
          throw ConfigError(fmt::format("{}: check '{}': builds_on {} is not another of the lab's exercises ({})",
                                        where(path, e), c.name, ex, fmt::join(s.exercises, ", ")));
        }
      }
      for (const auto& rn : c.runs) {
        if (!names.count(rn)) {
          throw ConfigError(
              fmt::format("{}: check '{}' reads run '{}', which no [[run]] defines", where(path, e), c.name, rn));
        }
      }
      validate_check(s, c);
      s.checks.push_back(std::move(c));
    }
  }
}

/// [[leaderboard]] entries: each names a check of the spec and one of the figures its kind records
/// (leaderboard_figures, checks.h). an order, and the checks that must pass for it to count.
void parse_leaderboard(const std::string& path, const toml::table& root, LabSpec& s) {
  const auto* n = root.get("leaderboard");
  if (!n) return;
  const auto* arr = n->as_array();
  if (!arr)
    throw ConfigError(fmt::format("{}: 'leaderboard' must be an array of tables ([[leaderboard]])", where(path, *n)));
  std::set<std::string> names;
  auto find_check = [&](const std::string& id) -> const CheckSpec* {
    for (const auto& c : s.checks) {
      if (c.id == id) return &c;
    }
    return nullptr;
  };
  for (const auto& e : *arr) {
    if (!e.is_table()) throw ConfigError(fmt::format("{}: each [[leaderboard]] must be a table", where(path, e)));
    Reader r(path, *e.as_table(), "[[leaderboard]]");
    LeaderboardSpec l;
    l.line = static_cast<int>(e.source().begin.line);
    l.name = r.str("name", true);
    l.check = r.str("check", true);
    l.figure = r.str("figure", true);
    l.order = r.str("order", false, "desc");
    l.gates = r.strs("requires", false);
    r.no_other_keys();
    if (l.name.empty() || !names.insert(l.name).second) {
      throw ConfigError(fmt::format("{}: [[leaderboard]] name '{}' is empty or used twice", where(path, e), l.name));
    }
    const CheckSpec* c = find_check(l.check);
    if (c == nullptr) {
      throw ConfigError(
          fmt::format("{}: [[leaderboard]] '{}': no check with id '{}'", where(path, e), l.name, l.check));
    }
    const auto figures = leaderboard_figures(c->kind);
    if (std::find(figures.begin(), figures.end(), l.figure) == figures.end()) {
      throw ConfigError(fmt::format("{}: [[leaderboard]] '{}': a {} check records no figure '{}'{}", where(path, e),
                                    l.name, c->kind, l.figure,
                                    figures.empty() ? std::string(" (it records none)")
                                                    : fmt::format(" (it records: {})", fmt::join(figures, ", "))));
    }
    if (l.order != "asc" && l.order != "desc") {
      throw ConfigError(fmt::format("{}: [[leaderboard]] '{}': order must be \"asc\" or \"desc\", not '{}'",
                                    where(path, e), l.name, l.order));
    }
    for (const auto& g : l.gates) {
      if (find_check(g) == nullptr) {
        throw ConfigError(
            fmt::format("{}: [[leaderboard]] '{}': requires '{}', which is no check's id", where(path, e), l.name, g));
      }
    }
    s.leaderboard.push_back(std::move(l));
  }
}

}  // namespace

std::string overlay_lab(const std::string& overlay_path) {
  return lab_of_overlay(parse_toml(overlay_path), overlay_path);
}

LabSpec load_spec(const std::string& path) { return load_spec(path, {}); }

LabSpec load_spec(const std::string& path, const std::vector<std::string>& overlays) {
  const toml::table root = parse_toml(path);
  LabSpec s;
  s.path = path;
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    if (key != "lab" && key != "limits" && key != "run" && key != "check" && key != "forbidden" &&
        key != "leaderboard") {
      throw ConfigError(fmt::format(
          "{}: unknown top-level key '{}' (expected [lab], [limits], [[run]], [[check]], [forbidden], [[leaderboard]])",
          where(path, v), key));
    }
  }
  {
    const toml::table& lab = table_at(path, root, "lab");
    Reader r(path, lab, "[lab]");
    s.title = r.str("title", true);
    if (const auto* b = lab.get("backend")) {
      s.backend = r.str("backend", false);
      check_backend(s.backend, fmt::format("{}: [lab] backend", where(path, *b)), false);
    }
    if (const auto folder = lab_folder_of(path)) {
      for (const char* key : {"id", "folder", "program", "manifest", "exercises"}) {
        if (const auto* n = lab.get(key)) {
          throw ConfigError(
              fmt::format("{}: [lab] {} follows from the lab's folder (labs/{}/ and solutions/{}/): remove it",
                          where(path, *n), key, folder->second, folder->second));
        }
      }
      r.no_other_keys();
      derive_lab(s, folder->first, folder->second);
    } else {
      // A spec outside labs/ (the grader's self-tests) has no lab folder to derive from.
      s.folder = r.str("folder", true);
      s.id = s.folder;
      s.program = r.str("program", true);
      s.manifest = r.strs("manifest", true);
      s.exercises = r.strs("exercises", true);
      r.no_other_keys();
      if (s.manifest.empty()) throw ConfigError(fmt::format("{}: [lab] manifest is empty", path));
    }
    for (const auto& f : s.manifest) {
      if (f.empty() || f.find("..") != std::string::npos || f.front() == '/') {
        throw ConfigError(fmt::format("{}: manifest entry '{}' must be a plain path inside the lab folder", path, f));
      }
    }
  }
  if (const auto* n = root.get("limits")) {
    if (!n->is_table()) throw ConfigError(fmt::format("{}: [limits] must be a table", where(path, *n)));
    Reader r(path, *n->as_table(), "[limits]");
    s.memory_limit_mb = r.num("memory_mb", s.memory_limit_mb);
    s.run_timeout_s = r.num("run_timeout_s", s.run_timeout_s);
    s.test_timeout_s = r.num("test_timeout_s", s.test_timeout_s);
    r.no_other_keys();
    if (s.memory_limit_mb < 256 || s.run_timeout_s <= 0 || s.test_timeout_s <= 0) {
      throw ConfigError(fmt::format("{}: [limits] memory_mb must be >= 256 and the timeouts > 0", where(path, *n)));
    }
  }
  if (const auto* n = root.get("forbidden")) {
    // [forbidden] "01.2" = ["ddplab::evaluate_model"]: kit functions an exercise may not call.
    if (!n->is_table()) throw ConfigError(fmt::format("{}: [forbidden] must be a table", where(path, *n)));
    static const std::regex kQualified(R"([A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*)");
    for (const auto& [k, v] : *n->as_table()) {
      const std::string ex(k.str());
      if (std::find(s.exercises.begin(), s.exercises.end(), ex) == s.exercises.end()) {
        throw ConfigError(fmt::format("{}: [forbidden] '{}' is not one of the lab's exercises ({})", where(path, v), ex,
                                      fmt::join(s.exercises, ", ")));
      }
      const auto* a = v.as_array();
      if (!a || a->empty()) {
        throw ConfigError(
            fmt::format("{}: [forbidden] '{}' must be a non-empty array of function names", where(path, v), ex));
      }
      for (const auto& f : *a) {
        if (!f.is_string() || !std::regex_match(*f.value<std::string>(), kQualified)) {
          throw ConfigError(fmt::format(
              "{}: [forbidden] '{}': each entry must be a qualified name such as \"ddplab::evaluate_model\" (no "
              "parameters)",
              where(path, f), ex));
        }
        s.forbidden[ex].push_back(*f.value<std::string>());
      }
    }
  }
  // The spec's runs and checks, then each overlay's, validated as one spec.
  std::vector<std::pair<std::string, toml::table>> extra;
  for (const auto& o : overlays) {
    extra.emplace_back(o, parse_toml(o));
    check_overlay(extra.back().second, o, s.id);
  }
  std::set<std::string> names, check_names, check_ids;
  parse_runs(path, root, s, names);
  for (const auto& [o, t] : extra) parse_runs(o, t, s, names);
  parse_checks(path, root, s, names, check_names, check_ids);
  for (const auto& [o, t] : extra) parse_checks(o, t, s, names, check_names, check_ids);
  if (s.checks.empty()) throw ConfigError(fmt::format("{}: no [[check]] defined", path));
  parse_leaderboard(path, root, s);
  return s;
}

std::vector<std::string> spec_paths(const std::string& source_root) {
  const fs::path labs = fs::path(source_root) / "labs";
  if (!fs::is_directory(labs)) {
    throw ConfigError(fmt::format("{}: not a ddplab source tree (no labs/ folder)", source_root));
  }
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(labs)) {
    const auto spec = e.path() / "grade.toml";
    if (e.is_directory() && fs::exists(spec)) out.push_back(spec.string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<LabSpec> load_all_specs(const std::string& source_root) {
  std::vector<LabSpec> out;
  for (const auto& p : spec_paths(source_root)) out.push_back(load_spec(p));
  std::sort(out.begin(), out.end(), [](const LabSpec& a, const LabSpec& b) { return a.id < b.id; });
  return out;
}

LabSpec find_spec(const std::string& source_root, const std::string& lab, const std::vector<std::string>& overlays) {
  if (lab.size() > 5 && lab.substr(lab.size() - 5) == ".toml") return load_spec(lab, overlays);  // a spec file itself
  // "3" and "03" are short for "lab03"; "lab03" for the one lab whose folder starts with it.
  std::string want = lab;
  if (!want.empty() && want.size() <= 2 && std::all_of(want.begin(), want.end(), ::isdigit)) {
    want = fmt::format("lab{:02d}", std::stoi(want));
  }
  std::vector<std::string> ids, matches;
  std::string exact;
  for (const auto& p : spec_paths(source_root)) {
    const std::string id = fs::path(p).parent_path().filename().string();
    ids.push_back(id);
    if (id == want) exact = p;
    // A prefix must end at a word boundary: "lab03" matches "lab03_sampler", "lab0" nothing.
    if (id.size() > want.size() && id.compare(0, want.size(), want) == 0 && id[want.size()] == '_') {
      matches.push_back(id);
    }
  }
  if (!exact.empty()) return load_spec(exact, overlays);
  if (matches.size() == 1) {
    return load_spec((fs::path(source_root) / "labs" / matches[0] / "grade.toml").string(), overlays);
  }
  if (matches.size() > 1) throw ConfigError(fmt::format("lab '{}' is ambiguous: {}", lab, fmt::join(matches, ", ")));
  throw ConfigError(fmt::format("no lab '{}' (labs with a grade.toml: {})", lab, fmt::join(ids, ", ")));
}

}  // namespace ddplab::grader

// Sandbox policy: what a lab's graded programs may read (the mechanism, bubblewrap or another
// uid, is sandbox.cpp's), and a failed check whose program reached for a hidden file says so.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "harness_parts.h"

namespace fs = std::filesystem;

namespace ddplab::grader::parts {

Sandbox lab_sandbox(const LabSpec& spec, const GradeOptions& o, const nlohmann::json& targets,
                    const std::string& calibration_path) {
  std::vector<std::string> read_only = {o.data_dir};  // and any run's own data set
  for (const auto& run : spec.runs) {
    if (!run.data.empty()) read_only.push_back(run.data);
  }
  UserSandboxPaths user_paths;  // for the unprivileged-user sandbox, where bubblewrap cannot run
  user_paths.secrets = {(fs::path(o.source_dir) / "solutions").string(), calibration_path};
  user_paths.secrets.insert(user_paths.secrets.end(), o.private_paths.begin(), o.private_paths.end());
  if (o.tree != "solutions" && targets.contains(spec.program + "/solutions")) {
    // The reference solution's own binaries: a program could run them in its place.
    const auto& ref = targets.at(spec.program + "/solutions");
    for (const char* k : {"program", "tests", "student"}) {
      if (ref.contains(k)) user_paths.secrets.push_back(ref.at(k).get<std::string>());
    }
  }
  for (const auto& d : kit_library_dirs()) read_only.push_back(d);  // the libraries programs load (a pip torch)
  user_paths.readable = read_only;
  user_paths.readable.push_back(o.build_dir);  // the programs, and the headers a submission compiles with
  user_paths.readable.push_back((fs::path(o.source_dir) / "labs" / spec.folder).string());
  user_paths.out_dir = o.out_dir;
  return make_sandbox(parse_sandbox_mode(o.sandbox), read_only, user_paths);
}

namespace {

/// The first path in `text` that names what a sandboxed program reached for and cannot see: in
/// the kit's solutions/ or its build folder, or the calibration file — but not in the results
/// (run folders), the data set or the submission slot (whose paths the program's own messages
/// carry). "" if none.
std::string hidden_path_in(const std::string& text, const GradeOptions& o, const LabBinaries& bin, bool as_user) {
  const auto dir = [](const std::string& d) { return fs::absolute(d).lexically_normal().string() + "/"; };
  std::vector<std::string> hidden = {dir(o.source_dir) + "solutions/"};
  if (!as_user) hidden.push_back(dir(o.build_dir));  // as another uid, the build folder stays readable
  if (!o.calibration.empty()) hidden.push_back(fs::absolute(o.calibration).lexically_normal().string());
  std::vector<std::string> visible = {dir(o.out_dir), dir(o.data_dir), dir(o.build_dir) + "submission/"};
  for (const auto& b : {bin.program, bin.tests}) {
    if (!b.empty()) visible.push_back(fs::absolute(b).lexically_normal().string());  // bound read-only
  }
  for (const auto& h : hidden) {
    for (size_t at = text.find(h); at != std::string::npos; at = text.find(h, at + 1)) {
      const size_t end = text.find_first_of(" \t\n\"'`),;", at);
      const std::string path = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
      // A visible folder is named with or without its trailing '/' (the data set's folder in an error
      // about it is "<data>", not "<data>/").
      const auto inside = [&](const std::string& v) {
        return path.rfind(v, 0) == 0 || (v.back() == '/' && path == v.substr(0, v.size() - 1));
      };
      if (std::none_of(visible.begin(), visible.end(), inside)) {
        return path;
      }
    }
  }
  return "";
}

}  // namespace

void name_sandbox_cause(const Sandbox& sandbox, const GradeOptions& o, const LabBinaries& bin, CheckResult& r) {
  if (!sandbox.enabled || r.status == Status::kPassed) return;
  const std::string path = hidden_path_in(r.observed + "\n" + r.details, o, bin, sandbox.as_user);
  if (path.empty()) return;
  if (sandbox.as_user) {
    r.diagnosis = fmt::format(
        "the program reached for {}, which the grader's sandbox hides (graded programs run as uid {}, which cannot "
        "read the kit's solutions or the calibration); {}",
        path, kRunUid, r.diagnosis);
    return;
  }
  r.diagnosis = fmt::format(
      "the program reached for {}, which the grader's sandbox hides (graded programs see only the system, the data "
      "set and their run folder: not the kit's source, solutions or build folder); {}",
      path, r.diagnosis);
}

}  // namespace ddplab::grader::parts

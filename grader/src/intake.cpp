// Intake: a submission (or a student's tree) in, its region rule checked before anything is
// built, then built (sandboxed for a submission) into the binaries the runs grade.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "ddplab/error.h"
#include "ddplab/launch.h"
#include "harness_parts.h"

namespace fs = std::filesystem;

namespace ddplab::grader {

namespace parts {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read {}", p.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs a helper command (cmake, unzip) to completion, its output collected; returns exit code.
int run_command(const std::vector<std::string>& cmd, double timeout_s, std::string& output) {
  LaunchSpec spec;
  spec.nproc = 1;
  spec.command = cmd;
  spec.timeout_s = timeout_s;
  spec.prefix_output = false;
  spec.forward_signals = true;
  std::string out;
  spec.on_line = [&](int, bool, const std::string& line) { out += line + "\n"; };
  spec.on_message = [&](const std::string& m) { out += m + "\n"; };
  const auto r = launch(spec);
  output = std::move(out);
  return r.exit_code;
}

std::string tail_lines(const std::string& text, size_t n) {
  std::deque<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

nlohmann::json load_targets(const std::string& build_dir) {
  const fs::path p = fs::path(build_dir) / "grader" / "targets.json";
  if (!fs::exists(p)) {
    throw Error(fmt::format("{} not found: '{}' is not a configured ddplab build (run ./kit build first)", p.string(),
                            build_dir));
  }
  try {
    return nlohmann::json::parse(read_text(p));
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {}", p.string(), e.what()));
  }
}

}  // namespace parts

namespace {

using namespace parts;

/// An exclusive lock on a file, held for the object's lifetime (flock: released if we die).
class FileLock {
 public:
  explicit FileLock(const fs::path& p) {
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(fmt::format("grader: cannot open the lock file {}", p.string()));
    if (::flock(fd_, LOCK_EX) != 0) throw Error(fmt::format("grader: cannot lock {}", p.string()));
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

LabBinaries binaries_for(const nlohmann::json& targets, const LabSpec& spec, const std::string& tree) {
  const auto lab = targets.find(spec.program + "/" + tree);
  if (lab == targets.end()) {
    throw Error(
        fmt::format("the build has no '{}' binaries of {} (configure it with the {} tree, or "
                    "-DDDPLAB_BUILD_BOTH_TREES=ON)",
                    tree, spec.program, tree));
  }
  LabBinaries b;
  b.program = lab->at("program").get<std::string>();
  b.tests = lab->at("tests").get<std::string>();
  b.student = lab->value("student", "");
  return b;
}

/// The tree's sanitized test binary in place of its tests (GradeOptions::sanitize), and its target.
std::string use_sanitized_tests(const nlohmann::json& targets, const LabSpec& spec, const std::string& tree,
                                LabBinaries& b) {
  const auto& lab = targets.at(spec.program + "/" + tree);
  if (!lab.contains("sanitized_target")) {
    throw Error(
        fmt::format("--sanitize: the build's grader/targets.json has no sanitized tests of {} (reconfigure "
                    "the build)",
                    spec.program));
  }
  b.tests = lab.at("sanitized").get<std::string>();
  b.sanitizer = lab.at("sanitizer").get<std::string>();
  return lab.at("sanitized_target").get<std::string>();
}

/// The binaries this build compiled from the submission folder `dir` itself (a planted bug or an
/// audit variant: labs/CMakeLists.txt registers each as "<program>/variant:<folder>"), checked
/// newer than every file of the folder they were compiled from.
LabBinaries prebuilt_binaries(const nlohmann::json& targets, const LabSpec& spec, const fs::path& dir,
                              const std::string& build_dir) {
  const std::string prefix = spec.program + "/variant:";
  for (const auto& [key, lab] : targets.items()) {
    std::error_code ec;
    if (key.rfind(prefix, 0) != 0 || !fs::equivalent(key.substr(prefix.size()), dir, ec)) continue;
    LabBinaries b;
    b.program = lab.at("program").get<std::string>();
    b.tests = lab.at("tests").get<std::string>();
    b.student = lab.value("student", "");
    for (const std::string& bin : {b.program, b.tests, b.student}) {
      if (!fs::exists(bin)) {
        throw Error(fmt::format("--no-build: {} was not built (cmake --build {})", bin, build_dir));
      }
      for (const auto& f : spec.manifest) {
        if (fs::last_write_time(dir / f) > fs::last_write_time(bin)) {
          throw Error(fmt::format("--no-build: {} changed after {} was built from it (cmake --build {})",
                                  (dir / f).string(), bin, build_dir));
        }
      }
    }
    return b;
  }
  throw ConfigError(
      fmt::format("--submission {} --no-build: this build compiled nothing from that folder (only the planted bugs "
                  "and the audit's variants are compiled in the build, with -DDDPLAB_BUILD_PLANTED=ON); grade it "
                  "without --no-build",
                  dir.string()));
}

/// Builds `targets` in the kit's build folder; "" or the compiler's first errors. With `sandbox`
/// enabled (a submission's build) the compiler runs confined: it cannot read the kit's solutions/
/// or the calibration (bwrap_build_command).
std::string build_targets(const GradeOptions& o, const std::vector<std::string>& targets,
                          const Sandbox* sandbox = nullptr) {
  std::vector<std::string> cmd = {"cmake", "--build", o.build_dir, "--target"};
  cmd.insert(cmd.end(), targets.begin(), targets.end());
  if (sandbox != nullptr && sandbox->enabled && sandbox->as_user) {
    // Ninja runs as root; the submission's compiler, through the slot's launcher
    // (grader/compile-as-student, labs/CMakeLists.txt), as kCompileUid.
    cmd.insert(cmd.begin(), {"env", fmt::format("DDPLAB_SANDBOX_COMPILE_UID={}", kCompileUid),
                             "DDPLAB_SANDBOX_RUN_AS=" + sandbox->run_as});
  } else if (sandbox != nullptr && sandbox->enabled) {
    // CMake's own regeneration (new files in the slot re-run its globs) reads the kit, solutions/
    // included, and runs no student code: done first, unconfined; then only compiling is left.
    if (fs::exists(fs::path(o.build_dir) / "build.ninja")) {
      std::string regen;
      if (run_command({"cmake", "--build", o.build_dir, "--target", "build.ninja"}, 600, regen) != 0) {
        return tail_lines(regen, 40);
      }
    }
    std::vector<std::string> hidden = {(fs::path(o.source_dir) / "solutions").string(), o.calibration};
    hidden.insert(hidden.end(), o.private_paths.begin(), o.private_paths.end());
    cmd = bwrap_build_command(sandbox->bwrap, cmd, o.build_dir, hidden);
  }
  std::string out;
  const int rc = run_command(cmd, 1800, out);
  if (rc != 0) {
    // Keep the compiler's first errors, which are the useful ones.
    std::string errors;
    std::istringstream in(out);
    std::string line;
    int kept = 0;
    while (std::getline(in, line) && kept < 60) {
      if (line.find("error") != std::string::npos || line.find("note:") != std::string::npos || kept > 0) {
        errors += line + "\n";
        ++kept;
      }
    }
    return errors.empty() ? tail_lines(out, 40) : errors;
  }
  return "";
}

}  // namespace

std::vector<std::string> collect_submission(const LabSpec& spec, const std::string& source_dir,
                                            const std::string& submission, const std::string& dest) {
  fs::path root = submission;
  fs::path unpacked;
  std::vector<std::string> notes;
  if (!fs::exists(root)) throw ConfigError(fmt::format("--submission {}: no such file or folder", submission));
  if (fs::is_regular_file(root)) {
    if (root.extension() != ".zip") {
      throw ConfigError(fmt::format("--submission {}: expected a folder or a .zip", submission));
    }
    unpacked = fs::path(dest).parent_path() / "unzipped";
    fs::remove_all(unpacked);
    fs::create_directories(unpacked);
    std::string out;
    // unzip refuses entries with "../" or absolute paths (it strips them), so nothing lands
    // outside the scratch folder.
    const int rc = run_command({"unzip", "-qq", "-o", root.string(), "-d", unpacked.string()}, 120, out);
    if (rc != 0 && rc != 1) {
      throw Error(fmt::format("--submission {}: unzip failed (status {}): {}", submission, rc, out));
    }
    root = unpacked;
  }
  fs::create_directories(dest);
  for (const auto& f : spec.manifest) {
    const fs::path target = fs::path(dest) / f;
    fs::create_directories(target.parent_path());
    fs::path found;
    for (const fs::path& cand : {root / f, root / spec.folder / f, root / "labs" / spec.folder / f}) {
      if (fs::is_regular_file(cand)) {
        found = cand;
        break;
      }
    }
    if (found.empty()) {
      // Anywhere in the submission by file name (Gradescope keeps the student's folders).
      for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        if (it->is_regular_file() && it->path().filename() == fs::path(f).filename()) {
          found = it->path();
          break;
        }
      }
    }
    if (found.empty()) {
      found = fs::path(source_dir) / "labs" / spec.folder / f;
      notes.push_back(fmt::format("{}: not in the submission, the skeleton's is used", f));
    } else {
      notes.push_back(fmt::format("{}: from {}", f, fs::relative(found, root).string()));
    }
    if (fs::file_size(found) > (4u << 20)) throw ConfigError(fmt::format("{}: larger than 4 MiB", found.string()));
    // A fresh copy (new mtime) so the build always sees the file as changed.
    const fs::path tmp = target.string() + ".tmp";
    fs::copy_file(found, tmp, fs::copy_options::overwrite_existing);
    fs::rename(tmp, target);
  }
  if (!unpacked.empty()) fs::remove_all(unpacked);
  return notes;
}

namespace parts {

Intake take_in(const LabSpec& spec, const GradeOptions& o, const nlohmann::json& targets, const Sandbox& sandbox,
               const fs::path& out, LabResult& result, const Say& say) {
  Intake in;
  bool need_tests = false;
  for (const auto& c : spec.checks) need_tests = need_tests || c.kind == "unit_tests";
  // The graded files' regions, read where they are graded: how far each exercise got, so that
  // "not attempted" is said only of an exercise none of whose regions was edited (half an
  // exercise is attempted, and failing).
  auto read_graded = [&](const fs::path& dir) {
    for (const auto& f : spec.manifest) {
      if (!fs::exists(dir / f)) continue;
      try {
        in.graded_files.push_back(parse_marked_file((dir / f).string()));
      } catch (const Error&) {
        // A broken marker is the region rule's to report; this file then tells nothing here.
      }
    }
  };
  // The kit functions the spec forbids, among the compiled student library's undefined symbols.
  auto find_forbidden = [&]() {
    if (spec.forbidden.empty()) return;
    if (in.bin.student.empty()) {
      throw Error(
          fmt::format("{}: the build's grader/targets.json names no student library of {} (reconfigure the build)",
                      o.build_dir, spec.program));
    }
    in.forbidden = forbidden_calls(spec, undefined_symbols(in.bin.student));
  };
  // Copies the binaries to grade into out/bin, where another uid may run them.
  auto copy_binaries = [&]() {
    fs::create_directories(out / "bin");
    for (std::string* b : {&in.bin.program, &in.bin.tests}) {
      if (b == &in.bin.tests && !need_tests) continue;
      const fs::path copy = out / "bin" / fs::path(*b).filename();
      fs::copy_file(*b, copy, fs::copy_options::overwrite_existing);
      fs::permissions(copy, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);  // run as another uid
      *b = copy.string();
    }
  };
  if (o.tree == "submission" && !o.build) {
    // Compiled in the build's one pass from this very folder (the planted bugs, the audit): graded
    // as it stands, without the slot, so that several gradings run side by side.
    if (o.sanitize) {
      throw ConfigError(
          "--submission with --no-build and --sanitize: a prebuilt variant has no sanitized tests; "
          "grade it without --no-build");
    }
    const fs::path dir = fs::absolute(o.submission);
    if (!fs::is_directory(dir)) {
      throw ConfigError(
          fmt::format("--submission {} --no-build: expected the folder the build compiled", o.submission));
    }
    in.bin = prebuilt_binaries(targets, spec, dir, o.build_dir);
    say(fmt::format("{}: compiled by the build (--no-build)", dir.string()));
    result.rule_errors =
        submission_region_edits(spec, (fs::path(o.source_dir) / "labs" / spec.folder).string(), dir.string());
    if (!result.rule_errors.empty()) {
      in.restore = ": restore the skeleton's";
      return in;
    }
    read_graded(dir);
    find_forbidden();
    copy_binaries();
    return in;
  }
  if (o.tree == "submission") {
    // One submission slot per build folder: lay the files over it, build, copy the binaries out.
    const fs::path slot = fs::path(o.build_dir) / "submission";
    fs::create_directories(slot);
    FileLock lock(slot / ".lock");
    const auto notes = collect_submission(spec, o.source_dir, o.submission, (slot / spec.folder).string());
    for (const auto& n : notes) say(n);
    for (const auto& f : spec.manifest) {  // whatever mode they came with: the compiler may be another uid
      std::error_code ec;
      fs::permissions(slot / spec.folder / f,
                      fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read,
                      ec);
    }
    // Only the code inside the STUDENT CODE regions is the student's: checked before building.
    result.rule_errors = submission_region_edits(spec, (fs::path(o.source_dir) / "labs" / spec.folder).string(),
                                                 (slot / spec.folder).string());
    if (!result.rule_errors.empty()) {
      in.restore = ": restore the skeleton's";
      return in;
    }
    read_graded(slot / spec.folder);
    in.bin = binaries_for(targets, spec, "submission");
    say(o.sanitize && need_tests ? "building the submission (tests under the sanitizer)" : "building the submission");
    std::vector<std::string> wanted = {spec.program + "_submission"};
    if (need_tests) {
      wanted.push_back(o.sanitize ? use_sanitized_tests(targets, spec, "submission", in.bin)
                                  : spec.program + "_tests_submission");
    }
    result.build_error = build_targets(o, wanted, &sandbox);
    if (!result.build_error.empty()) return in;
    find_forbidden();
    copy_binaries();
    return in;
  }
  if (o.tree != "solutions") {
    // A student's own tree: the same rule as a submission's. Their labs/ file is the edited one,
    // so the reference is the solution, whose text outside the regions is the skeleton's.
    const fs::path reference = fs::path(o.source_dir) / "solutions" / spec.folder;
    if (fs::is_directory(reference)) {
      result.rule_errors = submission_region_edits(spec, reference.string(),
                                                   (fs::path(o.source_dir) / o.tree / spec.folder).string(), false);
    } else {
      say(
          fmt::format("no {} in this clone: edits outside the STUDENT CODE regions are not checked here (the "
                      "instructor's grader checks them)",
                      reference.string()));
    }
    if (!result.rule_errors.empty()) {
      in.restore = ", as in a submission: restore the kit's";
      return in;
    }
  }
  read_graded(fs::path(o.source_dir) / o.tree / spec.folder);
  in.bin = binaries_for(targets, spec, o.tree);
  if (o.build) {
    const std::string suffix = targets.value("tree", "solutions") == o.tree ? "" : "_" + o.tree;
    say("building " + o.tree);
    result.build_error = build_targets(o, {spec.program + suffix, spec.program + "_tests" + suffix});
  }
  if (result.build_error.empty() && o.sanitize && need_tests) {
    // Built only when asked for (--no-build too: there is no other way to get it).
    const std::string target = use_sanitized_tests(targets, spec, o.tree, in.bin);
    say(fmt::format("building {}'s tests under -fsanitize={}", o.tree, in.bin.sanitizer));
    result.build_error = build_targets(o, {target});
  }
  if (result.build_error.empty()) find_forbidden();
  return in;
}

}  // namespace parts

}  // namespace ddplab::grader

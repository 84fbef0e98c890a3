// `ddplab pack LAB...`: the zip a student hands in — exactly the lab's manifest files (the files of
// solutions/<lab>/, i.e. those with STUDENT CODE regions) from the kit's labs/ tree, each under
// <lab folder>/, as `ddplab grade --submission` and Gradescope's autograder read it. Written to a
// temporary name and renamed, so a failed pack never leaves a half-written zip.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "ddplab/config.h"
#include "ddplab/error.h"
#include "ddplab/grader/grade.h"
#include "ddplab/grader/spec.h"

namespace fs = std::filesystem;

namespace ddplab::tools {
namespace {

struct PackCli {
  std::vector<std::string> labs;
  std::string kit, out;
};

/// A shell word: the text in single quotes, each ' written as '\''.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run_pack(const PackCli& o) {
  const fs::path kit = o.kit.empty() ? fs::path(DDPLAB_SOURCE_DIR) : fs::path(o.kit);
  std::vector<grader::LabSpec> specs;
  for (const auto& l : o.labs) specs.push_back(grader::find_spec(kit.string(), l));
  const fs::path out = fs::absolute(
      o.out.empty() ? (specs.size() == 1 ? specs[0].folder + ".zip" : std::string("submission.zip")) : o.out);
  if (out.extension() != ".zip")
    throw ConfigError(fmt::format("--out {}: the submission must be a .zip", out.string()));
  std::vector<std::string> files;  // relative to kit/labs
  for (const auto& s : specs) {
    for (const auto& f : s.manifest) {
      const fs::path p = kit / "labs" / s.folder / f;
      if (!fs::is_regular_file(p))
        throw ConfigError(fmt::format("{}: missing: nothing to pack for {}", p.string(), s.id));
      files.push_back(s.folder + "/" + f);
    }
  }
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path());
  const fs::path tmp = out.string() + fmt::format(".tmp{}", ::getpid());
  fs::remove(tmp);
  std::string cmd = fmt::format("cd {} && zip -q -X {}", quoted((kit / "labs").string()), quoted(tmp.string()));
  for (const auto& f : files) cmd += " " + quoted(f);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    fs::remove(tmp);
    throw Error(fmt::format("zip failed (status {}) writing {}: is `zip` installed (tools/setup-debian.sh)?", rc,
                            out.string()));
  }
  fs::rename(tmp, out);
  fmt::print("packed {} file(s) into {}:\n", files.size(), out.string());
  for (const auto& f : files) fmt::print("  {}\n", f);
  fmt::print("check it as the grader will: ddplab grade {} --submission {}\n", specs.size() == 1 ? specs[0].id : "...",
             out.string());
  return 0;
}

}  // namespace

void setup_pack(CLI::App& app) {
  auto o = std::make_shared<PackCli>();
  auto* sub = app.add_subcommand("pack", "Zip a lab's student files (exactly its manifest) for handing in");
  sub->add_option("labs", o->labs, "Labs to pack: lab03_sampler, lab03, 3")->required();
  sub->add_option("--out", o->out, "The zip to write (default: <lab folder>.zip, or submission.zip for several labs)");
  sub->add_option("--kit", o->kit, "The kit's source tree whose labs/ holds your work (default: this build's)");
  sub->callback([o] { exit_status() = run_pack(*o); });
}

}  // namespace ddplab::tools

// The parts of the check tests' harness that need LibTorch: a saved DeepFM, synthetic saved
// archives, and a small data set for the kinds that evaluate or compare saved models (auc,
// parity, same_model).
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <torch/torch.h>

#include "check_fixture.h"
#include "ddplab/data/shard.h"
#include "ddplab/deepfm.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;

namespace ddplab::grader::testing {

std::string tiny_data_set() {
  static const ddplab::testing::ScratchDir scratch("check-data");  // removed when the tests exit
  static const std::string dir = [] {
    const fs::path d = scratch.dir() / "set";
    data::GenerateOptions g;
    g.out_dir = d.string();
    g.train = 2000;
    g.test = 1000;
    g.shard_size = 1000;
    g.threads = 1;
    data::generate(g, [](const std::vector<float>&, const std::vector<float>&) { return std::make_pair(0.5, 0.7); });
    return d.string();
  }();
  return dir;
}

void save_model(const std::string& path, uint64_t seed, const std::string& nudge, double by) {
  torch::manual_seed(seed);
  DeepFM model;
  if (!nudge.empty()) {
    torch::NoGradGuard no_grad;
    model->named_parameters()[nudge].view(-1)[0] += by;
  }
  torch::serialize::OutputArchive archive;
  model->save(archive);
  archive.save_to(path);
}

namespace {

void write_tensors(torch::serialize::OutputArchive& archive, const std::vector<SavedTensor>& tensors,
                   const std::string& prefix) {
  std::vector<std::string> children;  // nested archives, in order of first appearance
  for (const auto& t : tensors) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = t.name.substr(prefix.size());
    const auto dot = rest.find('.');
    if (dot == std::string::npos) {
      archive.write(rest, torch::tensor(t.values).reshape(t.shape));
    } else if (std::find(children.begin(), children.end(), rest.substr(0, dot)) == children.end()) {
      children.push_back(rest.substr(0, dot));
    }
  }
  for (const auto& child : children) {
    torch::serialize::OutputArchive nested(archive.compilation_unit());
    write_tensors(nested, tensors, prefix + child + ".");
    archive.write(child, nested);
  }
}

}  // namespace

void save_tensors(const std::string& path, const std::vector<SavedTensor>& tensors) {
  torch::serialize::OutputArchive archive;
  write_tensors(archive, tensors, "");
  archive.save_to(path);
}

}  // namespace ddplab::grader::testing

// The parts of the check tests' harness that need LibTorch: a saved DeepFM and a small data set
// for the kinds that evaluate saved models (auc, parity).
#include <unistd.h>

#include <filesystem>

#include <torch/torch.h>

#include "check_fixture.h"
#include "ddplab/data/shard.h"
#include "ddplab/deepfm.h"

namespace fs = std::filesystem;

namespace ddplab::grader::testing {

std::string tiny_data_set() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("ddplab_check_test_data_" + std::to_string(::getpid()));
    fs::remove_all(d);
    data::GenerateOptions g;
    g.out_dir = d.string();
    g.train = 2000;
    g.test = 1000;
    g.shard_size = 1000;
    g.threads = 1;
    data::generate(g, [](const std::vector<float>&, const std::vector<float>&) { return std::make_pair(0.5, 0.7); });
    std::atexit(
        [] { fs::remove_all(fs::temp_directory_path() / ("ddplab_check_test_data_" + std::to_string(::getpid()))); });
    return d.string();
  }();
  return dir;
}

void save_model(const std::string& path, uint64_t seed) {
  torch::manual_seed(seed);
  DeepFM model;
  torch::serialize::OutputArchive archive;
  model->save(archive);
  archive.save_to(path);
}

}  // namespace ddplab::grader::testing

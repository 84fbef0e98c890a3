// Pieces the `ddplab bench` subcommands share (bench_common.h).
#include "bench_common.h"

#include "ddplab/data/generator.h"

namespace ddplab::tools {

std::vector<data::Batch> synthetic_batches(int64_t batch, int count, torch::Device device, uint64_t first_sample) {
  const data::Generator gen(1);
  std::vector<data::Sample> samples(static_cast<size_t>(batch));
  std::vector<data::Batch> out;
  for (int b = 0; b < count; ++b) {
    const uint64_t first = first_sample + static_cast<uint64_t>(b) * static_cast<uint64_t>(batch);
    gen.fill(first, static_cast<uint64_t>(batch), samples.data());
    data::Batch x = data::make_batch(samples.data(), samples.size(), first);
    x.dense = x.dense.to(device);
    x.rows = x.rows.to(device);
    x.labels = x.labels.to(device);
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace ddplab::tools

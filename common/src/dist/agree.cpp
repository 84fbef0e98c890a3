// Cross-rank agreement helpers: one all-gather of 64-bit values, compared with rank 0's.
#include "ddplab/dist/agree.h"

#include <cstring>

#include <fmt/format.h>

#include "ddplab/error.h"
#include "ddplab/report.h"

namespace ddplab::dist {

std::vector<std::vector<uint64_t>> allgather_u64(Communicator& comm, const std::vector<uint64_t>& mine) {
  const auto n = static_cast<int64_t>(mine.size());
  // Gloo all-gathers int64 tensors; the bits of each uint64 travel unchanged.
  torch::Tensor in = torch::empty({n}, torch::kInt64);
  auto* p = in.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(mine[static_cast<size_t>(i)]);
  std::vector<torch::Tensor> out(static_cast<size_t>(comm.size()));
  for (auto& o : out) o = torch::empty({n}, torch::kInt64);
  comm.allgather(out, in);
  std::vector<std::vector<uint64_t>> all;
  all.reserve(out.size());
  for (const auto& o : out) {
    const auto* q = o.data_ptr<int64_t>();
    all.emplace_back(q, q + n);
  }
  return all;
}

std::vector<std::vector<double>> allgather_f64(Communicator& comm, const std::vector<double>& mine) {
  std::vector<uint64_t> bits(mine.size());
  std::memcpy(bits.data(), mine.data(), mine.size() * sizeof(double));
  std::vector<std::vector<double>> all;
  for (const auto& v : allgather_u64(comm, bits)) {
    std::vector<double> d(v.size());
    std::memcpy(d.data(), v.data(), v.size() * sizeof(double));
    all.push_back(std::move(d));
  }
  return all;
}

std::vector<double> allgather_f64(Communicator& comm, double x) {
  std::vector<double> out;
  for (const auto& v : allgather_f64(comm, std::vector<double>{x})) out.push_back(v.at(0));
  return out;
}

std::string per_rank(const std::vector<double>& values, const std::string& format) {
  std::string out;
  for (size_t r = 0; r < values.size(); ++r) {
    out += fmt::format("{}rank {} ", r ? ", " : "", r);
    out += fmt::format(fmt::runtime(format), values[r]);
  }
  return out;
}

std::string Agreement::describe() const {
  if (same()) return fmt::format("identical on all {} rank(s)", values.size());
  std::string ranks;
  for (int r : differ) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", r);
  return fmt::format("DIFFERENT: rank(s) {} differ from rank 0", ranks);
}

Agreement compare_across_ranks(Communicator& comm, uint64_t value) {
  Agreement a;
  for (const auto& v : allgather_u64(comm, {value})) a.values.push_back(v[0]);
  for (size_t r = 1; r < a.values.size(); ++r) {
    if (a.values[r] != a.values[0]) a.differ.push_back(static_cast<int>(r));
  }
  return a;
}

void require_same_across_ranks(Communicator& comm, uint64_t value, const std::string& what,
                               const std::string& consequence) {
  const Agreement a = compare_across_ranks(comm, value);
  if (a.same()) return;
  const int r = a.differ.front();
  throw Error(fmt::format("{} differ across ranks ({} on rank 0, {} on rank {}): {}", what, a.values[0],
                          a.values[static_cast<size_t>(r)], r, consequence));
}

Agreement compare_parameters(Communicator& comm, const torch::nn::Module& model, std::string* digest) {
  const std::string mine = parameter_digest(model);
  if (digest != nullptr) *digest = mine;
  return compare_across_ranks(comm, std::stoull(mine, nullptr, 16));
}

}  // namespace ddplab::dist

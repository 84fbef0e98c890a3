// The one-pass Adam: the optimizer's bookkeeping (state, fall-back); the element loop is in
// fused_adam_kernel.cpp.
#include "ddplab/fused_adam.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ddplab/error.h"
#include "fused_adam_kernel.h"

namespace ddplab::optim {
namespace {

detail::AdamCoefficients coefficients(const torch::optim::AdamOptions& o, int64_t step) {
  const double beta1 = std::get<0>(o.betas());
  const double beta2 = std::get<1>(o.betas());
  const double bias1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias2 = 1 - std::pow(beta2, static_cast<double>(step));
  return {static_cast<float>(beta1),
          static_cast<float>(1 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1 - beta2),
          static_cast<float>(std::sqrt(bias2)),
          static_cast<float>(o.eps()),
          static_cast<float>(-(o.lr() / bias1)),
          static_cast<float>(o.weight_decay())};
}

bool float_cpu_contiguous(const torch::Tensor& t) {
  return t.layout() == torch::kStrided && t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous();
}

bool row_sparse(const torch::Tensor& p, const torch::Tensor& g) {
  return g.is_sparse() && p.dim() == 2 && g.sparse_dim() == 1 && g.dense_dim() == 1 && g.device().is_cpu() &&
         g.scalar_type() == torch::kFloat && g.size(0) == p.size(0) && g.size(1) == p.size(1);
}

bool fusable(const torch::Tensor& p, const torch::Tensor& g, const torch::optim::AdamOptions& o) {
  return !o.amsgrad() && float_cpu_contiguous(p) && (float_cpu_contiguous(g) || row_sparse(p, g));
}

// Dense Adam over a table whose gradient is the accumulated rows. Rows of 16 (DeepFM's embedding):
// one pass, each row's gradient its sum or a zero row. Other widths (the first-order table, one
// float a row): the sums scattered into a kept zero buffer, the dense pass, the rows zeroed again.
void update_table(float* p, float* m, float* v, int64_t table_rows, const RowAccumulator& acc,
                  std::vector<float>& zeroed, const detail::AdamCoefficients& c, bool decay) {
  const int64_t w = acc.width();
  if (w == 16 || acc.rows().empty()) {
    if (w == 16) {
      detail::adam_update_rows16(p, m, v, table_rows, acc.slots(), acc.sums().data(), c, decay);
    } else {
      detail::adam_update(p, nullptr, m, v, table_rows * w, c, decay);
    }
    return;
  }
  zeroed.resize(static_cast<size_t>(table_rows * w), 0.0f);
  const float* sums = acc.sums().data();
  for (size_t i = 0; i < acc.rows().size(); ++i) {
    std::copy(sums + static_cast<int64_t>(i) * w, sums + static_cast<int64_t>(i + 1) * w,
              zeroed.data() + acc.rows()[i] * w);
  }
  detail::adam_update(p, zeroed.data(), m, v, table_rows * w, c, decay);
  for (int64_t r : acc.rows()) std::fill(zeroed.data() + r * w, zeroed.data() + (r + 1) * w, 0.0f);
}

}  // namespace

namespace {

// The ids are known before their slots are read, and the slots of a 167,394-row table (654 KiB)
// miss the cache at random: each is fetched this many ids ahead, so the misses overlap instead of
// being paid one after another.
constexpr int64_t kSlotPrefetch = 16;

template <typename Id>
void add_rows(std::vector<int32_t>& slot, std::vector<int64_t>& rows, std::vector<float>& sums, const Id* ids,
              const float* vals, int64_t k, int64_t width, int64_t table_rows, const std::string& what) {
  int32_t* slots = slot.data();
  for (int64_t i = 0; i < k; ++i) {
    if (i + kSlotPrefetch < k) {
      const auto ahead = static_cast<int64_t>(ids[i + kSlotPrefetch]);
      if (ahead >= 0 && ahead < table_rows) __builtin_prefetch(slots + ahead, 1);
    }
    const auto r = static_cast<int64_t>(ids[i]);
    if (r < 0 || r >= table_rows) {
      throw Error(fmt::format("{}: row id {} at position {} is outside the table's {} rows", what, r, i, table_rows));
    }
    int32_t& s = slots[r];
    const float* src = vals + i * width;
    if (s < 0) {
      s = static_cast<int32_t>(rows.size());
      rows.push_back(r);
      sums.insert(sums.end(), src, src + width);
    } else {
      float* dst = sums.data() + static_cast<int64_t>(s) * width;
      for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace

void RowAccumulator::prepare(int64_t width, int64_t table_rows, const std::string& what) {
  if (rows_.empty()) width_ = width;
  DDPLAB_CHECK(width == width_, fmt::format("{}: rows of width {} added to rows of width {}", what, width, width_));
  if (static_cast<int64_t>(slot_.size()) < table_rows) slot_.resize(static_cast<size_t>(table_rows), -1);
}

void RowAccumulator::add(const int64_t* ids, const float* vals, int64_t k, int64_t width, int64_t table_rows,
                         const std::string& what) {
  prepare(width, table_rows, what);
  add_rows(slot_, rows_, sums_, ids, vals, k, width, table_rows, what);
}

void RowAccumulator::add(const int32_t* ids, const float* vals, int64_t k, int64_t width, int64_t table_rows,
                         const std::string& what) {
  prepare(width, table_rows, what);
  add_rows(slot_, rows_, sums_, ids, vals, k, width, table_rows, what);
}

void RowAccumulator::clear() {
  for (int64_t r : rows_) slot_[static_cast<size_t>(r)] = -1;
  rows_.clear();
  sums_.clear();
}

std::unique_ptr<torch::optim::Optimizer> make_adam(const std::string& which, std::vector<torch::Tensor> params,
                                                   const torch::optim::AdamOptions& options) {
  if (which == "fused") return std::make_unique<FusedAdam>(std::move(params), options);
  if (which == "torch") return std::make_unique<torch::optim::Adam>(std::move(params), options);
  throw ConfigError(fmt::format("Adam '{}': must be fused or torch", which));
}

void fused_adam_update(float* p, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, int64_t step,
                       const torch::optim::AdamOptions& options) {
  detail::adam_update(p, grad, exp_avg, exp_avg_sq, n, coefficients(options, step), options.weight_decay() != 0);
}

torch::Tensor FusedAdam::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  torch::NoGradGuard no_grad;
  bool all_fusable = true;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    for (auto& p : group.params()) {
      if (p.grad().defined() && !fusable(p, p.grad(), o)) all_fusable = false;
    }
  }
  if (!all_fusable) return torch::optim::Adam::step(closure ? [&] { return loss; } : LossClosure{});

  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const compat::OptimStateKey key = compat::optim_state_key(p);
      auto it = state_.find(key);
      if (it == state_.end()) {  // as Adam initialises it
        auto s = std::make_unique<torch::optim::AdamParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(s)).first;
      }
      auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
      if (!float_cpu_contiguous(s.exp_avg())) s.exp_avg(s.exp_avg().to(torch::kFloat).contiguous());
      if (!float_cpu_contiguous(s.exp_avg_sq())) s.exp_avg_sq(s.exp_avg_sq().to(torch::kFloat).contiguous());
      s.step(s.step() + 1);
      torch::Tensor& g = p.mutable_grad();
      if (g.is_sparse()) {
        const torch::Tensor ids = g._indices().select(0, 0).contiguous();
        const torch::Tensor vals = g._values().contiguous();
        RowAccumulator& acc = rows_[key];
        acc.clear();
        acc.add(ids.data_ptr<int64_t>(), vals.data_ptr<float>(), ids.numel(), p.size(1), p.size(0),
                "FusedAdam: a sparse gradient");
        update_table(p.data_ptr<float>(), s.exp_avg().data_ptr<float>(), s.exp_avg_sq().data_ptr<float>(), p.size(0),
                     acc, zeroed_[key], coefficients(o, s.step()), o.weight_decay() != 0);
      } else {
        fused_adam_update(p.data_ptr<float>(), g.data_ptr<float>(), s.exp_avg().data_ptr<float>(),
                          s.exp_avg_sq().data_ptr<float>(), p.numel(), s.step(), o);
      }
      g = torch::Tensor();  // set_to_none: the next backward writes the gradient afresh
    }
  }
  return loss;
}

}  // namespace ddplab::optim

// DeepFM: parameter count from the workload spec, FM identity against a brute-force pair sum,
// output shape, and that every part of the model receives gradient.
#include "ddplab/deepfm.h"

#include <gtest/gtest.h>

#include "ddplab/data/schema.h"

namespace {

TEST(DeepFM, ParametersByRoleSplitTheTablesFromTheDenseRest) {
  const ddplab::DeepFM m;
  const auto tables = m->embedding_parameters(), dense = m->dense_parameters();
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_TRUE(tables[0].is_same(m->embedding->weight));
  EXPECT_TRUE(tables[1].is_same(m->first_order->weight));
  EXPECT_EQ(tables.size() + dense.size(), m->parameters().size());
  for (const auto& p : dense) {
    EXPECT_FALSE(p.is_same(m->embedding->weight) || p.is_same(m->first_order->weight));
  }
  EXPECT_TRUE(dense.front().is_same(m->dense_linear->weight));  // parameters() order
}

TEST(DeepFM, ParameterCountMatchesTheWorkloadSpec) {
  ddplab::DeepFM m;
  EXPECT_EQ(ddplab::count_parameters(*m), 3338913);
  EXPECT_EQ(m->embedding->weight.size(0), 167394);
  EXPECT_EQ(m->embedding->weight.size(1), 16);
}

TEST(DeepFM, FmInteractionEqualsBruteForcePairSum) {
  torch::manual_seed(3);
  const auto e = torch::randn({4, 26, 16}, torch::kFloat64);
  const auto fast = ddplab::DeepFMImpl::fm_interaction(e);
  auto brute = torch::zeros({4}, torch::kFloat64);
  for (int i = 0; i < 26; ++i) {
    for (int j = i + 1; j < 26; ++j) brute += (e.select(1, i) * e.select(1, j)).sum(1);
  }
  EXPECT_TRUE(torch::allclose(fast, brute, 1e-10, 1e-10)) << fast << brute;
}

TEST(DeepFM, ForwardIsFirstOrderPlusFmPlusDeep) {
  torch::manual_seed(5);
  ddplab::DeepFM m;
  const int64_t B = 7;
  const auto dense = torch::rand({B, 13});
  auto rows = torch::empty({B, 26}, torch::kInt64);
  for (int f = 0; f < 26; ++f) {
    rows.select(1, f).random_(ddplab::data::kOffset[f], ddplab::data::kOffset[f] + ddplab::data::kCardinality[f]);
  }
  const auto out = m->forward(dense, rows);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{B}));
  // Recompute term by term, independently of forward().
  torch::NoGradGuard g;
  const auto e = m->embedding->weight.index_select(0, rows.flatten()).view({B, 26, 16});
  const auto first = m->first_order->weight.index_select(0, rows.flatten()).view({B, 26}).sum(1) +
                     torch::matmul(dense, m->dense_linear->weight.t()).squeeze(1) + m->dense_linear->bias;
  auto fm = torch::zeros({B});
  for (int i = 0; i < 26; ++i)
    for (int j = i + 1; j < 26; ++j) fm += (e.select(1, i) * e.select(1, j)).sum(1);
  const auto deep = m->mlp->forward(torch::cat({e.flatten(1), dense}, 1)).squeeze(1);
  EXPECT_TRUE(torch::allclose(out, first + fm + deep, 1e-5, 1e-5));
}

TEST(DeepFM, EveryParameterGetsGradient) {
  ddplab::DeepFM m;
  const auto dense = torch::rand({3, 13});
  const auto rows = torch::zeros({3, 26}, torch::kInt64) +
                    torch::tensor(std::vector<int64_t>(ddplab::data::kOffset.begin(), ddplab::data::kOffset.end()));
  m->forward(dense, rows).sum().backward();
  for (const auto& p : m->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
}

TEST(DeepFM, TrainFlopsPerSampleAboutThreeMillion) {
  const double f = ddplab::deepfm_train_flops_per_sample();
  EXPECT_NEAR(f, 3.0 * 2.0 * (429.0 * 400 + 2 * 400.0 * 400 + 400), 1.0);
  EXPECT_GT(f, 2.9e6);
  EXPECT_LT(f, 3.0e6);
}

}  // namespace

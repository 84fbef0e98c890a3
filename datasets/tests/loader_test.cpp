// Batch assembly and sample orders: every field lands in the right row, global embedding rows
// add the field offsets, batches cover the order exactly, and the shuffle is a seeded,
// portable permutation that changes with the epoch.
#include "ddplab/data/loader.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include <gtest/gtest.h>

#include "ddplab/data/error.h"
#include "ddplab/data/generator.h"
#include "scratch_dir.h"

namespace ddplab::data {
namespace {

namespace fs = std::filesystem;

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = std::make_unique<ddplab::testing::ScratchDir>("loader");
    dir_ = scratch_->dir();
    GenerateOptions g;
    g.out_dir = dir_.string();
    g.train = 1000;
    g.test = 300;
    g.shard_size = 256;  // several shards, so batches straddle shard boundaries
    g.threads = 1;
    generate(g, [](const std::vector<float>&, const std::vector<float>&) { return std::make_pair(0.5, 0.7); });
    ds_ = std::make_unique<Dataset>(dir_.string(), Split::kTrain);
  }
  static void TearDownTestSuite() {
    ds_.reset();
    scratch_.reset();
  }
  static std::unique_ptr<ddplab::testing::ScratchDir> scratch_;
  static fs::path dir_;
  static std::unique_ptr<Dataset> ds_;
};
std::unique_ptr<ddplab::testing::ScratchDir> LoaderTest::scratch_;
fs::path LoaderTest::dir_;
std::unique_ptr<Dataset> LoaderTest::ds_;

TEST_F(LoaderTest, BatchRowsMatchTheRecords) {
  const std::vector<uint64_t> order = {999, 0, 255, 256, 513};
  const Batch b = make_batch(*ds_, order.data(), order.size());
  ASSERT_EQ(b.size(), 5);
  EXPECT_EQ(b.dense.sizes(), (std::vector<int64_t>{5, kNumDense}));
  EXPECT_EQ(b.rows.dtype(), torch::kInt64);
  EXPECT_EQ(b.indices, order);
  for (int64_t i = 0; i < 5; ++i) {
    const Sample& s = (*ds_)[order[static_cast<size_t>(i)]];
    EXPECT_EQ(b.labels[i].item<float>(), static_cast<float>(s.label));
    for (int j = 0; j < kNumDense; ++j) EXPECT_EQ(b.dense[i][j].item<float>(), s.dense[j]);
    for (int f = 0; f < kNumSparse; ++f) {
      EXPECT_EQ(b.rows[i][f].item<int64_t>(), int64_t{kOffset[f]} + s.ids[f]) << "row " << i << " field " << f;
    }
  }
}

TEST_F(LoaderTest, BatchFromGeneratedSamplesEqualsBatchFromShards) {
  const Generator gen(ds_->metadata().seed);
  std::vector<Sample> s(10);
  gen.fill(300, 10, s.data());
  const Batch a = make_batch(s.data(), s.size(), 300);
  const auto order = sequential_order(310);
  const Batch b = make_batch(*ds_, order.data() + 300, 10);
  EXPECT_TRUE(torch::equal(a.dense, b.dense));
  EXPECT_TRUE(torch::equal(a.rows, b.rows));
  EXPECT_TRUE(torch::equal(a.labels, b.labels));
  EXPECT_EQ(a.indices, b.indices);
}

TEST_F(LoaderTest, LoaderCoversTheOrderWithAPartialLastBatch) {
  BatchLoader loader(*ds_, sequential_order(1000), 300);
  EXPECT_EQ(loader.num_batches(), 4);
  std::vector<uint64_t> seen;
  std::vector<int64_t> sizes;
  Batch b;
  while (loader.next(b)) {
    sizes.push_back(b.size());
    seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{300, 300, 300, 100}));
  EXPECT_EQ(seen, sequential_order(1000));
  EXPECT_FALSE(loader.next(b)) << "an exhausted loader stays exhausted";
}

TEST_F(LoaderTest, DropLastSkipsThePartialBatch) {
  BatchLoader loader(*ds_, sequential_order(1000), 300, torch::kCPU, /*drop_last=*/true);
  EXPECT_EQ(loader.num_batches(), 3);
  int n = 0;
  Batch b;
  while (loader.next(b)) ++n;
  EXPECT_EQ(n, 3);
}

TEST_F(LoaderTest, OutOfRangeIndexIsADataError) {
  const std::vector<uint64_t> order = {5, 1000};
  EXPECT_THROW(make_batch(*ds_, order.data(), order.size()), DataError);
  EXPECT_THROW(BatchLoader(*ds_, {}, 0), DataError);
}

TEST(ShuffledOrder, IsAPermutationDeterminedBySeedAndEpoch) {
  const auto a = shuffled_order(1000, 7, 0);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, sequential_order(1000));
  EXPECT_EQ(a, shuffled_order(1000, 7, 0));  // reproducible
  EXPECT_NE(a, shuffled_order(1000, 7, 1));  // a new order every epoch
  EXPECT_NE(a, shuffled_order(1000, 8, 0));  // and per seed
  EXPECT_NE(a, sequential_order(1000));
  // Portable across standard libraries: pinned values (the kit's own generator, not std::shuffle).
  EXPECT_EQ(shuffled_order(8, 1, 0), (std::vector<uint64_t>{0, 6, 2, 4, 3, 1, 7, 5}));
  EXPECT_TRUE(shuffled_order(0, 1, 0).empty());
  EXPECT_EQ(shuffled_order(1, 1, 0), std::vector<uint64_t>{0});
}

TEST(ShuffledOrder, PositionsAreRoughlyUniform) {
  // Where does index 0 land over many epochs? Each of 10 positions should get ~10%.
  std::vector<int> where(10, 0);
  for (uint64_t e = 0; e < 5000; ++e) {
    const auto o = shuffled_order(10, 3, e);
    ++where[static_cast<size_t>(std::find(o.begin(), o.end(), 0) - o.begin())];
  }
  for (int c : where) EXPECT_NEAR(c, 500, 100);
}

}  // namespace
}  // namespace ddplab::data

TEST(GlobalBatchSlice, EachRankTakesItsSliceOfEveryGlobalBatch) {
  const auto order = ddplab::data::sequential_order(14);  // 3 global batches of 2 x 2, 2 left over
  EXPECT_EQ(ddplab::data::global_batch_slice(order, 3, 2, 0, 2), (std::vector<uint64_t>{0, 1, 4, 5, 8, 9}));
  EXPECT_EQ(ddplab::data::global_batch_slice(order, 3, 2, 1, 2), (std::vector<uint64_t>{2, 3, 6, 7, 10, 11}));
  // One rank: the first steps x batch samples, in order.
  EXPECT_EQ(ddplab::data::global_batch_slice(order, 2, 3, 0, 1), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(ddplab::data::global_batch_slice(order, 0, 2, 1, 2).empty());
}

TEST(GlobalBatchSlice, RejectsAnOrderTooShortOrARankOutsideTheWorld) {
  const auto order = ddplab::data::sequential_order(14);
  EXPECT_THROW(ddplab::data::global_batch_slice(order, 4, 2, 0, 2), std::invalid_argument);  // needs 16
  EXPECT_THROW(ddplab::data::global_batch_slice(order, 1, 2, 2, 2), std::invalid_argument);
  EXPECT_THROW(ddplab::data::global_batch_slice(order, 1, 0, 0, 2), std::invalid_argument);
}

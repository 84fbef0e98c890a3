// Lab 10's kit: the flat view, Adam's state of a shard, the shard files of a checkpoint, the check
// of a partition, and DDP + Adam (the oracle). These pass on the skeleton and the solution alike.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lab10_kit.h"
#include "scratch_dir.h"
#include "ddplab/dist/loopback.h"
#include "ddplab/error.h"

namespace {

TEST(Lab10Kit, FlattenLaysTensorsEndToEndWithZerosForMissingOnesAndThePadding) {
  const std::vector<torch::Tensor> t{torch::full({2, 2}, 1.0), torch::Tensor(), torch::full({3}, 3.0)};
  const torch::Tensor flat = lab10::flatten(t, {4, 2, 3}, 11);
  EXPECT_TRUE(torch::equal(flat, torch::tensor({1., 1., 1., 1., 0., 0., 3., 3., 3., 0., 0.}, torch::kFloat32)));
  EXPECT_THROW(lab10::flatten(t, {4, 2, 3}, 8), ddplab::Error) << "9 elements do not fit in 8";
  EXPECT_THROW(lab10::flatten(t, {4, 2, 2}, 11), ddplab::Error) << "a tensor of another size than its place's";
}

TEST(Lab10Kit, ToChunksPutsShardRInChunkRThenZeros) {
  lab10::Partition p;
  p.total = 5;
  p.shards = {{0, 3, {}}, {3, 5, {}}};  // chunk 3
  const torch::Tensor out = lab10::to_chunks(p, torch::tensor({1., 2., 3., 4., 5.}, torch::kFloat32));
  EXPECT_TRUE(torch::equal(out, torch::tensor({1., 2., 3., 4., 5., 0.}, torch::kFloat32)));
}

TEST(Lab10Kit, MomentsGoInAndComeOutOfAShardsAdam) {
  lab10::ShardState s;
  s.param = torch::zeros({4}).set_requires_grad(true);
  s.adam = std::make_unique<torch::optim::Adam>(std::vector<torch::Tensor>{s.param});
  const lab10::Moments before = lab10::moments_of(s);
  EXPECT_EQ(before.step, 0);
  EXPECT_TRUE(torch::equal(before.exp_avg, torch::zeros({4})));
  lab10::set_moments(s, {torch::full({4}, 0.5), torch::full({4}, 0.25), 7});
  const lab10::Moments after = lab10::moments_of(s);
  EXPECT_EQ(after.step, 7);
  EXPECT_TRUE(torch::equal(after.exp_avg_sq, torch::full({4}, 0.25)));
  // Adam continues from them: step 8 with a gradient of 1.
  s.param.mutable_grad() = torch::ones({4});
  s.adam->step();
  EXPECT_EQ(lab10::moments_of(s).step, 8);
  EXPECT_THROW(lab10::set_moments(s, {torch::zeros({3}), torch::zeros({4}), 1}), ddplab::Error);
}

class Lab10KitFiles : public ddplab::testing::ScratchTest {
 protected:
  std::string dir() const { return scratch_.dir().string(); }
};

TEST_F(Lab10KitFiles, ShardFilesAreOneCheckpointInRankOrderOrAnErrorNamingTheFolder) {
  EXPECT_THROW(lab10::shard_files(dir()), ddplab::Error) << "no files";
  write("shard-1-of-2.pt", "x");
  try {
    lab10::shard_files(dir());
    ADD_FAILURE() << "rank 0's file is missing";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0's file of 2 is missing"), std::string::npos) << e.what();
  }
  write("shard-0-of-2.pt", "x");
  write("notes.txt", "not a shard");
  const auto files = lab10::shard_files(dir());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], lab10::shard_file(dir(), 0, 2));
  write("shard-0-of-1.pt", "x");
  EXPECT_THROW(lab10::shard_files(dir()), ddplab::Error) << "files of 1 and 2 ranks mixed";
}

TEST_F(Lab10KitFiles, ASavedShardLeavesNoTemporaryFileAndReplacesTheOldOne) {
  lab10::Partition one;
  one.total = 6;
  one.shards.push_back({0, 6, {{0, 0, 0, 6}}});
  lab10::ShardState s;
  s.param = torch::arange(6, torch::kFloat32).set_requires_grad(true);
  lab10::set_moments(s, {torch::full({6}, 0.5), torch::full({6}, 0.25), 3});
  lab10::save_shard(dir(), one, 0, s);
  lab10::set_moments(s, {torch::full({6}, 0.5), torch::full({6}, 0.25), 4});
  lab10::save_shard(dir(), one, 0, s);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir())) {
    ++files;
    EXPECT_EQ(e.path().filename().string(), "shard-0-of-1.pt");
  }
  EXPECT_EQ(files, 1);
  torch::serialize::InputArchive in;
  in.load_from(lab10::shard_file(dir(), 0, 1));
  torch::Tensor step, end;
  in.read("step", step);
  in.read("end", end);
  EXPECT_EQ(step.item<int64_t>(), 4);
  EXPECT_EQ(end.item<int64_t>(), 6);
  EXPECT_THROW(lab10::save_shard((scratch_.dir() / "missing").string(), one, 0, s), ddplab::Error);
  EXPECT_FALSE(std::filesystem::exists(scratch_.dir() / "missing"));
}

TEST(Lab10Kit, APartitionProblemIsNamed) {
  // 10 elements, 2 ranks, units of 2: [0, 6) and [6, 10) (5 units: 2 and 3 - floor(1 x 5 / 2) = 2 units).
  lab10::Partition p;
  p.total = 10;
  p.align = 2;
  p.shards = {{0, 4, {{0, 0, 0, 4}}}, {4, 10, {{0, 4, 4, 2}, {1, 0, 6, 4}}}};
  EXPECT_EQ(lab10::partition_problem(p, {6, 4}, 2, 2), "");
  lab10::Partition twice = p;
  twice.shards[0].pieces[0].numel = 5;  // one element past the boundary
  EXPECT_NE(lab10::partition_problem(twice, {6, 4}, 2, 2).find("rank 0's pieces end at element 5"), std::string::npos);
  lab10::Partition moved = p;
  moved.shards[1].pieces[1].offset = 1;
  EXPECT_NE(lab10::partition_problem(moved, {6, 4}, 2, 2).find("not where that parameter is"), std::string::npos);
  lab10::Partition other = p;
  other.shards[0].end = other.shards[1].begin = 6;
  EXPECT_NE(lab10::partition_problem(other, {6, 4}, 2, 2).find("the contract's boundaries give [0, 4)"),
            std::string::npos);
}

TEST(Lab10Kit, DdpAdamInAWorldOfOneIsAdamOnTheGradients) {
  ddplab::dist::Loopback comm;
  auto a = torch::ones({3}).set_requires_grad(true), b = torch::ones({3}).set_requires_grad(true);
  a.mutable_grad() = torch::tensor({1., -2., 3.}, torch::kFloat32);
  b.mutable_grad() = a.grad().clone();
  torch::optim::Adam adam_a({a}, torch::optim::AdamOptions(0.1)), adam_b({b}, torch::optim::AdamOptions(0.1));
  lab10::ddp_adam_step(comm, {a}, adam_a);
  adam_b.step();
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_EQ(comm.stats().ops[static_cast<size_t>(ddplab::dist::Op::kAllreduce)].calls, 1);
}

}  // namespace

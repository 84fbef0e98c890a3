// Lab 04's kit (lab04_kit.h) on synthetic input, in a world of one: the watch passes a step that
// launches the layout's buckets in order and records its figures from the timer's record, stops a
// collective out of layout order, of another kind, or beyond the layout, and notes a step that
// launched fewer; the report section lists parameters and buckets by name; the branch is skipped
// on the documented steps. No student code runs here.
#include "lab04_kit.h"

#include <gtest/gtest.h>

#include "ddplab/dist/loopback.h"
#include "ddplab/error.h"

namespace {

using ddplab::Phase;
using ddplab::dist::Op;

struct Rig {
  torch::nn::Linear a{4, 3}, b{3, 1};  // reversed: 4 + 12 bytes (bucket 0, cap 16), 12 + 48 (bucket 1)
  std::vector<torch::Tensor> params{a->weight, a->bias, b->weight, b->bias};
  ddplab::dist::Loopback comm;
  std::unique_ptr<ddplab::dist::GradSync> sync =
      ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kBucketed, comm, params,
                                   ddplab::dist::BucketOptions{16, 64});
  torch::optim::SGD opt{params, torch::optim::SGDOptions(0.1)};
  ddplab::StepTimer timer;
  torch::Tensor loss() { return b->forward(a->forward(torch::ones({2, 4}))).sum(); }
};

TEST(Lab04Kit, AStepInLayoutOrderIsRecordedWithItsFigures) {
  Rig r;
  lab04::SyncWatch watch(r.comm, *r.sync);
  ASSERT_EQ(watch.expected().size(), 2u);
  for (int64_t s = 0; s < 3; ++s) {
    r.timer.begin_step();
    ddplab::timed_step(r.timer, r.opt, r.sync.get(), watch.parts(s, [&] { return r.loss(); }));
    watch.after_step(s, r.timer.current_step(), s == 1);
    r.timer.end_step();
  }
  EXPECT_TRUE(watch.in_layout());
  EXPECT_EQ(watch.synced(), 3);
  const nlohmann::json st = watch.steps();
  EXPECT_EQ(st["collectives"]["min"], 2);
  EXPECT_EQ(st["collectives"]["max"], 2);
  EXPECT_EQ(st["bytes"]["max"], watch.expected()[0] + watch.expected()[1]);
  EXPECT_EQ(st["branch_skipped"], 1);
  EXPECT_EQ(st["launch_ms_median"].size(), 2u);
  // The bucketed sync launches in finish(), after backward: none during backward, both after its start.
  EXPECT_EQ(st["launched_in_backward_median"], 0.0);
  for (const auto& ms : st["launch_ms_median"]) EXPECT_GE(ms.get<double>(), 0.0);
  // The figures are the timer's own per-step phases (read inside the step, before it ends), in ms.
  auto median_ms = [&](Phase p) { return 1000.0 * ddplab::median(r.timer.phase_per_step(p)); };
  EXPECT_DOUBLE_EQ(st["exposed_comm_ms_median"].get<double>(), median_ms(Phase::kComm));
  EXPECT_DOUBLE_EQ(st["backward_ms_median"].get<double>(), median_ms(Phase::kBackward));
  EXPECT_GT(st["backward_ms_median"].get<double>(), 0.0);
  EXPECT_GT(st["exposed_comm_ms_median"].get<double>(), 0.0);  // the bucketed sync waits in finish()
  EXPECT_GE(st["step_ms_median"].get<double>(), st["backward_ms_median"].get<double>());
  // Collectives outside a step (after the update) are not the step's.
  torch::Tensor t = torch::zeros({1});
  r.comm.broadcast(t, 0);
  EXPECT_NE(watch.summary("student-bucketed").find("student-bucketed: 2 bucket(s), 2-2 collective(s)"),
            std::string::npos);
}

TEST(Lab04Kit, ACollectiveOutOfLayoutIsStoppedBeforeItStarts) {
  Rig r;
  lab04::SyncWatch watch(r.comm, *r.sync);
  r.timer.begin_step();
  (void)watch.parts(7, [&] { return r.loss(); }).loss();  // opens step 7
  try {
    watch.observe(Op::kAllreduce, watch.expected()[1]);  // bucket 1 first
    FAIL() << "no error";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 7: allreduce 0 of the step carries"), std::string::npos) << e.what();
  }
  (void)watch.parts(8, [&] { return r.loss(); }).loss();
  EXPECT_THROW(watch.observe(Op::kBroadcast, watch.expected()[0]), ddplab::Error);
  (void)watch.parts(9, [&] { return r.loss(); }).loss();
  watch.observe(Op::kAllreduce, watch.expected()[0]);
  watch.observe(Op::kAllreduce, watch.expected()[1]);
  EXPECT_THROW(watch.observe(Op::kAllreduce, 4), ddplab::Error);  // beyond the layout
}

TEST(Lab04Kit, AStepThatLaunchedFewerBucketsIsTheFirstBadStep) {
  Rig r;
  lab04::SyncWatch watch(r.comm, *r.sync);
  r.timer.begin_step();
  (void)watch.parts(5, [&] { return r.loss(); }).loss();
  watch.observe(Op::kAllreduce, watch.expected()[0]);
  watch.after_step(5, r.timer.current_step(), false);
  EXPECT_FALSE(watch.in_layout());
  EXPECT_EQ(watch.first_bad_step()["step"], 5);
  EXPECT_EQ(watch.first_bad_step()["launched"], (std::vector<int64_t>{watch.expected()[0]}));
  // The order digest tells the two sequences apart.
  lab04::SyncWatch other(r.comm, *r.sync);
  (void)other.parts(5, [&] { return r.loss(); }).loss();
  other.observe(Op::kAllreduce, watch.expected()[0]);
  other.observe(Op::kAllreduce, watch.expected()[1]);
  other.after_step(5, r.timer.current_step(), false);
  EXPECT_NE(watch.order_digest(), other.order_digest());
}

TEST(Lab04Kit, TheSyncSectionNamesParametersAndBucketsInLaunchOrder) {
  Rig r;
  torch::nn::Sequential model(r.a, r.b);
  lab04::SyncWatch watch(r.comm, *r.sync);
  lab04::Flags f;
  f.sync = "student-bucketed";
  f.first_bucket_mb = 2;
  const nlohmann::json j = lab04::sync_section(f, true, *model, *r.sync, watch);
  EXPECT_EQ(j["rung"], "student-bucketed");
  EXPECT_EQ(j["first_bucket_bytes"], 2 * 1048576);
  EXPECT_EQ(j["params"].size(), 4u);
  EXPECT_EQ(j["params"][0]["name"], "0.weight");
  EXPECT_EQ(j["params"][0]["bytes"], 48);
  EXPECT_EQ(j["buckets"].size(), 2u);
  EXPECT_EQ(j["buckets"][0]["params"][0], "1.bias");  // the reverse walk starts at the last parameter
  EXPECT_EQ(j["steps"]["synced"], 0);
  EXPECT_EQ(j["order_digest"].get<std::string>().size(), 16u);
}

TEST(Lab04Kit, TheBranchIsSkippedByRankROnTheStepsSWithSPlusRDivisibleByK) {
  const lab04::Model with(3), without(0);
  EXPECT_TRUE(with.skips(0, 0));
  EXPECT_FALSE(with.skips(1, 0));
  EXPECT_TRUE(with.skips(1, 2));
  EXPECT_FALSE(without.skips(0, 0));
  EXPECT_NE(std::dynamic_pointer_cast<lab04::BranchyNetImpl>(with.module()), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<ddplab::DeepFMImpl>(without.module()), nullptr);
  lab04::Flags f;
  f.first_bucket_mb = 0.5;
  EXPECT_EQ(f.caps().first_bytes, 524288);
  EXPECT_EQ(f.caps().cap_bytes, 25 * 1048576);
}

}  // namespace

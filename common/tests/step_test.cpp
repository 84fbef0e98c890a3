// The step in named parts (step.h): each part runs once, in the documented order, inside its
// phase; a micro-step accumulates without communicating until the last; the plain parts are
// exactly the kit's train_step. A world of one (dist::Loopback) stands in for the job.
#include "ddplab/step.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ddplab/dist/loopback.h"
#include "ddplab/error.h"
#include "ddplab/train.h"

namespace {

using ddplab::Phase;

/// A tiny model y = w . x with an SGD optimizer, and a log of what ran, in order.
struct Rig {
  torch::Tensor w = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD opt{std::vector<torch::Tensor>{w}, torch::optim::SGDOptions(0.5)};
  ddplab::dist::Loopback comm;
  std::vector<std::string> log;
  std::unique_ptr<ddplab::dist::GradSync> sync = ddplab::dist::make_function_sync(comm, {w}, [this] {
    log.push_back("sync");
    torch::Tensor g = w.mutable_grad();
    comm.allreduce(g);
  });
  ddplab::StepTimer timer;
  torch::Tensor loss_of(double x) { return (w * x).sum(); }
};

TEST(Step, RunsEachPartOnceInOrderInsideItsPhase) {
  Rig r;
  ddplab::StepParts parts;
  parts.loss = [&] {
    r.log.push_back("loss");
    return r.loss_of(2.0);
  };
  parts.to_backward = [&](const torch::Tensor& l) {
    r.log.push_back("to_backward");
    return l * 4.0;  // a loss scaler's scale
  };
  parts.after_backward = [&] {
    r.log.push_back("after_backward");
    r.w.mutable_grad().div_(4.0);  // and its unscale
  };
  parts.optimizer_step = [&] {
    r.log.push_back("optimizer");
    r.opt.step();
    return true;
  };
  r.w.mutable_grad() = torch::full({3}, 100.0);  // stale: zero_grad must clear it
  r.timer.begin_step();
  const double loss = ddplab::timed_step(r.timer, r.opt, r.sync.get(), parts);
  r.timer.end_step();
  EXPECT_EQ(r.log, (std::vector<std::string>{"loss", "to_backward", "after_backward", "sync", "optimizer"}));
  EXPECT_DOUBLE_EQ(loss, 6.0);  // the loss, not what backward started from
  // d(2 w)/dw = 2, scaled by 4 and unscaled: w = 1 - 0.5 x 2.
  EXPECT_TRUE(torch::allclose(r.w.detach(), torch::zeros({3})));
  const auto& s = r.timer.last_step();
  for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kComm, Phase::kOptimizer}) {
    EXPECT_TRUE(s.entered(p)) << ddplab::phase_name(p);
  }
  EXPECT_FALSE(s.entered(Phase::kDataWait));
  // The phases follow each other: forward ends before backward begins, and so on.
  EXPECT_LE(s.ended[static_cast<int>(Phase::kForward)], s.began[static_cast<int>(Phase::kBackward)]);
  EXPECT_LE(s.ended[static_cast<int>(Phase::kBackward)], s.began[static_cast<int>(Phase::kComm)]);
  EXPECT_LE(s.ended[static_cast<int>(Phase::kComm)], s.began[static_cast<int>(Phase::kOptimizer)]);
  EXPECT_EQ(r.sync->last_step().collectives, 1);
}

TEST(Step, WithoutASyncThereIsNoCommPhaseAndTheDefaultsAreThePlainStep) {
  Rig r;
  r.timer.begin_step();
  ddplab::timed_step(r.timer, r.opt, nullptr, ddplab::plain_parts([&] { return r.loss_of(1.0); }));
  r.timer.end_step();
  EXPECT_FALSE(r.timer.last_step().entered(Phase::kComm));
  EXPECT_TRUE(torch::allclose(r.w.detach(), torch::full({3}, 0.5)));
}

TEST(Step, ASkippedUpdateLeavesTheWeights) {
  Rig r;
  ddplab::StepParts parts = ddplab::plain_parts([&] { return r.loss_of(1.0); });
  parts.optimizer_step = [] { return false; };  // a scaler that found an overflow
  r.timer.begin_step();
  ddplab::timed_step(r.timer, r.opt, r.sync.get(), parts);
  r.timer.end_step();
  EXPECT_TRUE(torch::allclose(r.w.detach(), torch::ones({3})));
}

TEST(Step, MicroStepsAccumulateAndOnlyTheLastCommunicatesAndUpdates) {
  Rig r;
  r.opt.zero_grad();
  for (int i = 0; i < 3; ++i) {
    r.timer.begin_step();
    ddplab::timed_micro_step(r.timer, r.opt, r.sync.get(), ddplab::plain_parts([&, i] { return r.loss_of(i + 1.0); }),
                             i == 2);
    r.timer.end_step();
    EXPECT_EQ(r.timer.last_step().entered(Phase::kOptimizer), i == 2) << "micro-step " << i;
  }
  EXPECT_EQ(r.log, std::vector<std::string>{"sync"});  // one reduction, of the sum
  EXPECT_TRUE(r.sync->syncing());                      // the no_sync scopes ended
  // Gradients 1 + 2 + 3 accumulated, one update: w = 1 - 0.5 x 6.
  EXPECT_TRUE(torch::allclose(r.w.detach(), torch::full({3}, -2.0)));
}

TEST(Step, ALossPartIsRequired) {
  Rig r;
  EXPECT_THROW(ddplab::timed_step(r.timer, r.opt, nullptr, ddplab::StepParts{}), ddplab::Error);
}

}  // namespace

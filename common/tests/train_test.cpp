// The kit's one training step (train.h): what it computes, what it times, and where the gradient
// sync runs — the contract every lab from 02 on and the tools rely on.
#include <gtest/gtest.h>

#include "thread_ranks.h"

#include "ddplab/config.h"
#include "ddplab/data/generator.h"
#include "ddplab/data/loader.h"
#include "ddplab/train.h"

namespace {

using ddplab::Phase;

ddplab::data::Batch some_batch(int64_t n, uint64_t first = 0) {
  const ddplab::data::Generator gen(1);
  std::vector<ddplab::data::Sample> samples(static_cast<size_t>(n));
  gen.fill(first, static_cast<uint64_t>(n), samples.data());
  return ddplab::data::make_batch(samples.data(), samples.size(), first);
}

TEST(TrainStep, ReturnsTheLossBeforeTheUpdateAndUpdatesTheModel) {
  torch::manual_seed(0);
  ddplab::DeepFM model;
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  const auto b = some_batch(64);
  const double before = ddplab::batch_loss(model, b).item<double>();
  ddplab::StepTimer timer;
  timer.begin_step();
  const double loss = ddplab::train_step(model, opt, b, timer);
  timer.end_step();
  EXPECT_DOUBLE_EQ(loss, before);
  // One SGD step on the same batch lowers its loss.
  EXPECT_LT(ddplab::batch_loss(model, b).item<double>(), before);
}

TEST(TrainStep, TimesForwardBackwardAndOptimizerButNoCommWithoutSync) {
  torch::manual_seed(0);
  ddplab::DeepFM model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  const auto b = some_batch(128);
  ddplab::StepTimer timer;
  for (int i = 0; i < 2; ++i) {
    timer.begin_step();
    ddplab::train_step(model, opt, b, timer);
    timer.end_step();
  }
  EXPECT_GT(timer.total(Phase::kForward), 0.0);
  EXPECT_GT(timer.total(Phase::kBackward), 0.0);
  EXPECT_GT(timer.total(Phase::kOptimizer), 0.0);
  EXPECT_EQ(timer.total(Phase::kComm), 0.0);
  EXPECT_EQ(timer.total(Phase::kDataWait), 0.0);
  // The phases are disjoint scopes inside the step.
  EXPECT_LE(timer.compute(), timer.wall());
}

TEST(TrainStep, ClearsTheGradientsOfThePreviousStep) {
  torch::manual_seed(0);
  ddplab::DeepFM model;
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.0));  // lr 0: the weights stay
  const auto b = some_batch(32);
  ddplab::StepTimer timer;
  ddplab::train_step(model, opt, b, timer);
  const torch::Tensor first = model->parameters().back().grad().clone();
  ddplab::train_step(model, opt, b, timer);
  // Not accumulated: the same batch on the same weights gives the same gradient again.
  EXPECT_TRUE(torch::allclose(model->parameters().back().grad(), first));
}

#ifdef DDPLAB_HAVE_GLOO
// The sync's reduction runs once per step, after backward (every gradient is there), timed as
// exposed communication, and its collectives are counted.
TEST(TrainStep, RunsTheSyncAfterBackwardInTheCommPhase) {
  ddplab::testing::run_ranks(2, [](ddplab::dist::ProcessGroup& pg) {
    ddplab::DeepFM model;
    ddplab::dist::broadcast_module(pg, *model, 0);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
    int calls = 0;
    bool grads_ready = true;
    const auto params = model->parameters();
    auto sync = ddplab::dist::make_function_sync(pg, params, [&] {
      ++calls;
      for (const auto& p : params) grads_ready = grads_ready && p.grad().defined();
      torch::Tensor g = params.back().mutable_grad();
      pg.allreduce(g);
      g.div_(pg.size());
    });
    ddplab::StepTimer timer;
    const auto b = some_batch(32, static_cast<uint64_t>(pg.rank()) * 1000);
    for (int i = 0; i < 3; ++i) {
      timer.begin_step();
      ddplab::train_step(model, opt, b, timer, sync.get());
      timer.end_step();
    }
    EXPECT_EQ(calls, 3);
    EXPECT_TRUE(grads_ready);
    EXPECT_EQ(sync->last_step().collectives, 1);
    EXPECT_GT(timer.total(Phase::kComm), 0.0);
    // The averaged parameter is the same on both ranks although their batches differ.
    torch::Tensor last = params.back().detach().clone();
    torch::Tensor sum = last.clone();
    pg.allreduce(sum);
    EXPECT_TRUE(torch::allclose(sum, last * 2));
  });
}
#endif

}  // namespace

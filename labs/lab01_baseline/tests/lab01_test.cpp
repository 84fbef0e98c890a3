// Public tests of lab 01's exercises, run against the tree being built: on the solutions they
// pass; on the skeletons each fails with "exercise 01.x is not implemented yet".
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "ddplab/data/shard.h"
#include "ddplab/metrics.h"
#include "lab01.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;

namespace {

class Lab01 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = std::make_unique<ddplab::testing::ScratchDir>("lab01");
    dir_ = scratch_->dir();
    ddplab::data::GenerateOptions g;
    g.out_dir = dir_.string();
    g.train = 4096;
    g.test = 3000;
    g.shard_size = 1000;
    g.threads = 1;
    ddplab::data::generate(g, [](const std::vector<float>& p, const std::vector<float>& y) {
      return std::make_pair(ddplab::metrics::exact_auc(p, y), ddplab::metrics::log_loss(p, y));
    });
    train_ = std::make_unique<ddplab::data::Dataset>(dir_.string(), ddplab::data::Split::kTrain);
    test_ = std::make_unique<ddplab::data::Dataset>(dir_.string(), ddplab::data::Split::kTest);
  }
  static void TearDownTestSuite() {
    train_.reset();
    test_.reset();
    scratch_.reset();
  }
  static ddplab::data::Batch batch(uint64_t first, size_t n) {
    const auto order = ddplab::data::sequential_order(first + n);
    return ddplab::data::make_batch(*train_, order.data() + first, n);
  }
  /// The reference step, written out here so the test does not trust the code under test.
  static double reference_step(ddplab::DeepFM& m, torch::optim::Optimizer& opt, const ddplab::data::Batch& b) {
    opt.zero_grad();
    auto loss = torch::binary_cross_entropy_with_logits(m->forward(b.dense, b.rows), b.labels);
    loss.backward();
    opt.step();
    return loss.item<double>();
  }
  static ddplab::DeepFM model(uint64_t seed) {
    torch::manual_seed(seed);
    return ddplab::DeepFM();
  }
  static std::unique_ptr<ddplab::testing::ScratchDir> scratch_;
  static fs::path dir_;
  static std::unique_ptr<ddplab::data::Dataset> train_, test_;
};
std::unique_ptr<ddplab::testing::ScratchDir> Lab01::scratch_;
fs::path Lab01::dir_;
std::unique_ptr<ddplab::data::Dataset> Lab01::train_, Lab01::test_;

TEST_F(Lab01, TrainStepReturnsTheMeanBceWithLogitsBeforeTheUpdate) {
  auto m = model(1);
  const auto b = batch(0, 256);
  double expected = 0.0;
  {
    torch::NoGradGuard g;
    expected = torch::binary_cross_entropy_with_logits(m->forward(b.dense, b.rows), b.labels).item<double>();
  }
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(1e-3));
  ddplab::StepTimer timer;
  const double loss = lab01::train_step(m, opt, b, timer);
  EXPECT_NEAR(loss, expected, 1e-6) << "train_step must return the loss of the batch before the step";
}

TEST_F(Lab01, TrainStepMatchesTheReferenceOverSeveralSteps) {
  // Forgetting zero_grad() accumulates gradients across steps; the parameters then drift away
  // from the reference after the second step.
  auto student = model(2);
  auto reference = model(2);
  torch::optim::Adam opt_s(student->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::Adam opt_r(reference->parameters(), torch::optim::AdamOptions(1e-3));
  ddplab::StepTimer timer;
  for (int i = 0; i < 3; ++i) {
    const auto b = batch(static_cast<uint64_t>(i) * 128, 128);
    const double ls = lab01::train_step(student, opt_s, b, timer);
    const double lr = reference_step(reference, opt_r, b);
    EXPECT_NEAR(ls, lr, 1e-5) << "step " << i;
  }
  const auto ps = student->parameters();
  const auto pr = reference->parameters();
  ASSERT_EQ(ps.size(), pr.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    const double diff = (ps[i] - pr[i]).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << "parameter " << i << " differs from the reference by " << diff;
  }
}

TEST_F(Lab01, TrainStepTimesForwardBackwardAndOptimizer) {
  auto m = model(3);
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(1e-3));
  ddplab::StepTimer timer;
  lab01::train_step(m, opt, batch(0, 64), timer);
  EXPECT_GT(timer.total(ddplab::Phase::kForward), 0.0);
  EXPECT_GT(timer.total(ddplab::Phase::kBackward), 0.0);
  EXPECT_GT(timer.total(ddplab::Phase::kOptimizer), 0.0);
  EXPECT_EQ(timer.total(ddplab::Phase::kComm), 0.0) << "a single process does not communicate";
}

TEST_F(Lab01, TrainingLowersTheLossOnARepeatedBatch) {
  auto m = model(4);
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(1e-3));
  ddplab::StepTimer timer;
  const auto b = batch(0, 512);
  const double first = lab01::train_step(m, opt, b, timer);
  double last = first;
  for (int i = 0; i < 20; ++i) last = lab01::train_step(m, opt, b, timer);
  EXPECT_LT(last, first * 0.9) << "loss went from " << first << " to " << last;
}

TEST_F(Lab01, EvaluateComputesExactMetricsOverAllSamples) {
  auto m = model(5);
  // A count that the batch size does not divide: the last partial batch must be included, and
  // the AUC must be computed over all samples at once, not averaged per batch.
  const uint64_t count = 2500;
  const auto r = lab01::evaluate(m, *test_, count, 384, torch::kCPU);
  std::vector<float> probs, labels;
  {
    torch::NoGradGuard g;
    m->eval();
    const auto order = ddplab::data::sequential_order(count);
    const auto b = ddplab::data::make_batch(*test_, order.data(), count);
    const auto p = torch::sigmoid(m->forward(b.dense, b.rows)).contiguous();
    probs.assign(p.data_ptr<float>(), p.data_ptr<float>() + count);
    labels.assign(b.labels.data_ptr<float>(), b.labels.data_ptr<float>() + count);
    m->train();
  }
  EXPECT_EQ(r.samples, count);
  EXPECT_NEAR(r.auc, ddplab::metrics::exact_auc(probs, labels), 1e-6);
  EXPECT_NEAR(r.logloss, ddplab::metrics::log_loss(probs, labels), 1e-5);
}

TEST_F(Lab01, EvaluateComputesNoGradientsAndRestoresTrainingMode) {
  auto m = model(6);
  lab01::evaluate(m, *test_, 1000, 512, torch::kCPU);
  EXPECT_TRUE(m->is_training()) << "evaluate must put the model back in training mode";
  for (const auto& p : m->parameters()) {
    EXPECT_FALSE(p.grad().defined()) << "evaluate must not compute gradients (use torch::NoGradGuard)";
  }
}

TEST_F(Lab01, TrainedModelBeatsChanceAndStaysBelowTheTeacher) {
  auto m = model(7);
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(1e-3));
  ddplab::StepTimer timer;
  for (uint64_t first = 0; first + 256 <= train_->size(); first += 256)
    lab01::train_step(m, opt, batch(first, 256), timer);
  const auto r = lab01::evaluate(m, *test_, test_->size(), 512, torch::kCPU);
  EXPECT_GT(r.auc, 0.55) << "one pass over 4096 samples should beat chance";
  EXPECT_LT(r.auc, test_->metadata().teacher_test_auc + 0.02)
      << "no model should beat the teacher that made the labels";
}

}  // namespace

// The labs' optimizers by name (optim.h): the names build LibTorch's optimizers with the given
// learning rate, an unknown name is a ConfigError that lists the choices, and the state's bytes
// are Adam's two moments.
#include "ddplab/optim.h"

#include <gtest/gtest.h>

#include "ddplab/error.h"

namespace {

TEST(Optim, NamesBuildTorchsOptimizersAtTheGivenRate) {
  torch::Tensor w = torch::ones({10}, torch::requires_grad());
  auto adam = ddplab::optim::make("adam", {w}, 0.25);
  ASSERT_NE(dynamic_cast<torch::optim::Adam*>(adam.get()), nullptr);
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::AdamOptions&>(adam->param_groups()[0].options()).lr(), 0.25);
  auto sgd = ddplab::optim::make("sgd", {w}, 0.5);
  ASSERT_NE(dynamic_cast<torch::optim::SGD*>(sgd.get()), nullptr);
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[0].options()).lr(), 0.5);
  EXPECT_EQ(ddplab::optim::names(), (std::vector<std::string>{"adam", "sgd"}));
}

TEST(Optim, GroupsKeepTheirOwnRates) {
  torch::Tensor a = torch::ones({2}, torch::requires_grad()), b = torch::ones({3}, torch::requires_grad());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a}, std::make_unique<torch::optim::SGDOptions>(0.1));
  groups.emplace_back(std::vector<torch::Tensor>{b});
  auto sgd = ddplab::optim::make("sgd", std::move(groups), 0.01);
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[0].options()).lr(), 0.1);
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[1].options()).lr(), 0.01);
}

TEST(Optim, AnUnknownNameSaysWhichAndTheChoices) {
  try {
    (void)ddplab::optim::make("adamw", {torch::ones({1}, torch::requires_grad())}, 0.1);
    FAIL() << "no error";
  } catch (const ddplab::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "optimizer 'adamw': choose one of adam, sgd");
  }
}

TEST(Optim, StateBytesAreAdamsTwoMomentsAfterAStepAndNothingForPlainSgd) {
  torch::Tensor w = torch::ones({10}, torch::requires_grad());
  auto adam = ddplab::optim::make("adam", {w}, 0.1);
  auto sgd = ddplab::optim::make("sgd", {w}, 0.1);
  EXPECT_EQ(ddplab::optim::state_bytes(*adam), 0);  // no state before the first step
  w.sum().backward();
  adam->step();
  sgd->step();
  EXPECT_EQ(ddplab::optim::state_bytes(*adam), 2 * 10 * 4);
  EXPECT_EQ(ddplab::optim::state_bytes(*sgd), 0);
}

}  // namespace

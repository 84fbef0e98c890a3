// Public tests of lab 02's exercises, run against the tree being built: on the solutions they
// pass; on the skeletons each fails with "exercise 02.x is not implemented yet". Collectives run
// with ranks as threads over one in-memory store (real Gloo), world sizes 1-4, exact values.
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include <gtest/gtest.h>

#include "thread_ranks.h"
#include "ddplab/deepfm.h"
#include "ddplab/error.h"
#include "ddplab/report.h"
#include "lab02.h"

namespace {

using ddplab::dist::ProcessGroup;
using ddplab::testing::run_ranks;

// ---------------------------------------------------------------------------------------------
// 02.1: the environment. Each test sets exactly the variables it names and restores the rest.

const char* const kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

class Lab02Env : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const char* v : kVars) ::unsetenv(v);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  static void set(const std::map<std::string, std::string>& vars) {
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  /// The message of the ConfigError environment_from_launcher() throws (any other exception,
  /// NotImplemented included, propagates and fails the test with its own message).
  static std::string config_error() {
    try {
      const auto e = lab02::environment_from_launcher();
      ADD_FAILURE() << "no ConfigError; got " << e.describe();
    } catch (const ddplab::ConfigError& e) {
      return e.what();
    }
    return "";
  }
  static void expect_error_naming(const std::map<std::string, std::string>& vars, const std::string& a,
                                  const std::string& b = "") {
    for (const char* v : kVars) ::unsetenv(v);
    set(vars);
    const std::string msg = config_error();
    EXPECT_NE(msg.find(a), std::string::npos) << "the error should name " << a << ": " << msg;
    if (!b.empty()) {
      EXPECT_NE(msg.find(b), std::string::npos) << "the error should name " << b << ": " << msg;
    }
  }
  /// Each numeric launcher variable of a good 2-process environment set, in turn, to each of `bad`:
  /// an error naming the variable (and the value, when `name_value` and the value is not blank).
  static void expect_each_number_refused(std::initializer_list<const char*> bad, bool name_value) {
    const std::map<std::string, std::string> good = {{"RANK", "1"},
                                                     {"WORLD_SIZE", "2"},
                                                     {"LOCAL_RANK", "1"},
                                                     {"LOCAL_WORLD_SIZE", "2"},
                                                     {"MASTER_ADDR", "127.0.0.1"},
                                                     {"MASTER_PORT", "29500"}};
    for (const char* var : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"}) {
      for (const char* value : bad) {
        auto vars = good;
        vars[var] = value;
        SCOPED_TRACE(std::string(var) + "='" + value + "'");
        expect_error_naming(vars, var, name_value ? value : "");
      }
    }
  }
  std::map<std::string, std::string> saved_;
};

TEST_F(Lab02Env, NoLauncherVariablesMeanOneProcess) {
  const auto e = lab02::environment_from_launcher();
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.source, "single");
  EXPECT_FALSE(e.distributed());
}

TEST_F(Lab02Env, ReadsEveryTorchrunVariable) {
  set({{"RANK", "5"},
       {"WORLD_SIZE", "8"},
       {"LOCAL_RANK", "1"},
       {"LOCAL_WORLD_SIZE", "4"},
       {"MASTER_ADDR", "10.1.2.3"},
       {"MASTER_PORT", "29517"}});
  const auto e = lab02::environment_from_launcher();
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "10.1.2.3");
  EXPECT_EQ(e.master_port, 29517);
  EXPECT_EQ(e.source, "torchrun");
  // Different values, so nothing can be hard-coded.
  set({{"RANK", "0"},
       {"WORLD_SIZE", "2"},
       {"LOCAL_RANK", "0"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "127.0.0.1"},
       {"MASTER_PORT", "1234"}});
  const auto f = lab02::environment_from_launcher();
  EXPECT_EQ(f.rank, 0);
  EXPECT_EQ(f.world_size, 2);
  EXPECT_EQ(f.local_world_size, 2);
  EXPECT_EQ(f.master_addr, "127.0.0.1");
  EXPECT_EQ(f.master_port, 1234);
}

TEST_F(Lab02Env, LocalVariablesDefaultToTheGlobalOnes) {
  set({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}});
  const auto e = lab02::environment_from_launcher();
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.local_rank, 2) << "LOCAL_RANK defaults to RANK";
  EXPECT_EQ(e.local_world_size, 3) << "LOCAL_WORLD_SIZE defaults to WORLD_SIZE";
}

TEST_F(Lab02Env, AWorldOfOneNeedsNoRendezvous) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  const auto e = lab02::environment_from_launcher();
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_FALSE(e.distributed());
}

TEST_F(Lab02Env, MalformedNumbersNameTheVariableAndValue) { expect_each_number_refused({"two", "-1", "3x"}, true); }

TEST_F(Lab02Env, EmptyOrPaddedNumbersAreErrors) {
  // What a launch script passes when the variable it copies is unset (RANK=$SLURM_PROCID outside
  // Slurm): an empty value, which strtol and atoi read as 0, so every process would be rank 0.
  // Signs and spaces are not plain decimal integers either.
  expect_each_number_refused({"", " 1", "1 ", "+1"}, false);
}

TEST_F(Lab02Env, NumbersTooLargeAreErrors) {
  // Digits only, but too large for an int: an error naming the variable, not a std::out_of_range
  // from std::stoi and not a value wrapped around (4294967298 as a 32-bit int is 2).
  expect_each_number_refused({"4294967298", "99999999999", "123456789012345678901234567890"}, true);
}

TEST_F(Lab02Env, AnEmptyMasterAddrIsNotAnAddress) {
  // Set but empty is not set: a job of 2 cannot meet at "".
  expect_error_naming({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}, {"MASTER_PORT", "29500"}},
                      "MASTER_ADDR");
}

TEST_F(Lab02Env, InconsistentValuesAreErrors) {
  expect_error_naming({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}}, "RANK",
                      "2");
  expect_error_naming({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE", "0");
  expect_error_naming({{"RANK", "0"},
                       {"WORLD_SIZE", "2"},
                       {"LOCAL_RANK", "2"},
                       {"LOCAL_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "h"},
                       {"MASTER_PORT", "29500"}},
                      "LOCAL_RANK", "2");
  expect_error_naming({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
                      "MASTER_PORT", "70000");
  expect_error_naming({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}}, "MASTER_PORT",
                      "0");
}

TEST_F(Lab02Env, MissingVariablesAreNamed) {
  expect_error_naming({{"RANK", "1"}}, "WORLD_SIZE");
  expect_error_naming({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}}, "RANK");
  expect_error_naming({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}, "MASTER_ADDR");
  expect_error_naming({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT");
}

// ---------------------------------------------------------------------------------------------
// 02.2 and 02.3 over real Gloo, ranks as threads.

/// A small module with odd-sized parameters, a parameter that never gets a gradient, and buffers.
struct TinyImpl : torch::nn::Module {
  TinyImpl() {
    a = register_parameter("a", torch::zeros({7}));
    b = register_parameter("b", torch::zeros({3, 5}));
    frozen = register_parameter("frozen", torch::zeros({2}));
    count = register_buffer("count", torch::zeros({1}, torch::kInt64));
    stats = register_buffer("stats", torch::zeros({4}));
  }
  torch::Tensor a, b, frozen, count, stats;
};
TORCH_MODULE(Tiny);

/// Fills every parameter and buffer with values derived from (rank, tensor, index).
void fill(Tiny& m, int rank) {
  torch::NoGradGuard g;
  int k = 0;
  for (auto& p : m->parameters()) p.copy_(torch::arange(p.numel()).reshape(p.sizes()) + 100.0 * k++ + 1000.0 * rank);
  for (auto& b : m->buffers()) b.fill_(10 * rank + k++);
}

/// The collective tests run at every world size from 1 to 4.
template <typename Fn>
void for_worlds(Fn fn) {
  for (int world = 1; world <= 4; ++world) {
    SCOPED_TRACE("world size " + std::to_string(world));
    fn(world);
  }
}

/// broadcast_parameters, or false when it threw a c10::Error (an in-place write into a leaf
/// parameter outside NoGradGuard throws one on every rank): that is
/// BroadcastWritesInPlaceWithoutRecordingAutograd's finding, which the other tests leave to it.
bool broadcast_or_leave(ProcessGroup& pg, torch::nn::Module& m) {
  try {
    lab02::broadcast_parameters(pg, m);
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

TEST(Lab02Comm, BroadcastGivesEveryRankRankZerosParametersAndBuffers) {
  for_worlds([](int world) {
    run_ranks(world, [](ProcessGroup& pg) {
      Tiny m, expected;
      fill(m, pg.rank());
      fill(expected, 0);
      if (!broadcast_or_leave(pg, *m)) return;
      const auto got = m->named_parameters();
      const auto want = expected->named_parameters();
      for (const auto& item : want) {
        EXPECT_TRUE(torch::equal(got[item.key()], item.value())) << "rank " << pg.rank() << " parameter " << item.key();
      }
      const auto gb = m->named_buffers();
      for (const auto& item : expected->named_buffers()) {
        EXPECT_TRUE(torch::equal(gb[item.key()], item.value()))
            << "rank " << pg.rank() << " buffer " << item.key() << " (buffers are model state too)";
      }
    });
  });
}

TEST(Lab02Comm, BroadcastWritesInPlaceWithoutRecordingAutograd) {
  for_worlds([](int world) {
    run_ranks(world, [](ProcessGroup& pg) {
      Tiny m;
      fill(m, pg.rank());
      const void* storage = m->a.data_ptr();
      try {
        lab02::broadcast_parameters(pg, *m);
      } catch (const c10::Error& e) {
        ADD_FAILURE() << "rank " << pg.rank() << ": broadcast_parameters threw: " << e.what_without_backtrace();
        return;
      }
      EXPECT_EQ(m->a.data_ptr(), storage) << "overwrite the parameters in place: an optimizer holds these tensors";
      EXPECT_TRUE(m->a.requires_grad());
      EXPECT_FALSE(m->a.grad().defined()) << "broadcasting weights is not a training step";
    });
  });
}

TEST(Lab02Comm, BroadcastMakesDeepFMDigestsEqual) {
  for_worlds([](int world) {
    std::mutex mu;
    std::vector<std::string> digests(static_cast<size_t>(world));
    run_ranks(world, [&](ProcessGroup& pg) {
      std::unique_ptr<ddplab::DeepFM> m;
      {
        std::lock_guard<std::mutex> lock(mu);  // the global generator: one initialisation at a time
        torch::manual_seed(static_cast<uint64_t>(pg.rank()) + 1);
        m = std::make_unique<ddplab::DeepFM>();
      }
      if (!broadcast_or_leave(pg, **m)) return;
      std::lock_guard<std::mutex> lock(mu);
      digests[static_cast<size_t>(pg.rank())] = ddplab::parameter_digest(**m);
    });
    if (digests[0].empty()) return;  // it threw: BroadcastWritesInPlaceWithoutRecordingAutograd
    for (int r = 1; r < world; ++r) EXPECT_EQ(digests[static_cast<size_t>(r)], digests[0]) << "rank " << r;
  });
}

/// Rank r's gradient is (r + 1) * (index + 1) for `a` and `b`, none for `frozen`.
template <typename Module>
void set_rank_gradients(Module& m, int rank) {
  const double r1 = rank + 1;
  m->a.mutable_grad() = (torch::arange(7) + 1) * r1;
  m->b.mutable_grad() = (torch::arange(15).reshape({3, 5}) + 1) * r1;
}

/// After average_gradients `a` and `b` must hold the average (N + 1) / 2 * (index + 1).
/// `order` says where the gradient-less parameter sits, for the failure messages.
template <typename Module>
void expect_averaged(Module& m, ProcessGroup& pg, int world, const char* order) {
  set_rank_gradients(m, pg.rank());
  lab02::average_gradients(pg, *m);
  // Every rank left holding rank 0's gradient (a broadcast, not an average): that is
  // GradientsAreAveragedOverEveryRank's finding, which this test leaves to it.
  if (world > 1 && torch::equal(m->a.grad(), (torch::arange(7) + 1) * 1.0)) return;
  const double mean = (world + 1) / 2.0;
  EXPECT_TRUE(torch::allclose(m->a.grad(), (torch::arange(7) + 1) * mean, 0, 1e-6))
      << "rank " << pg.rank() << " (" << order << ") got " << m->a.grad() << " expected the average " << mean
      << " x (i+1)";
  EXPECT_TRUE(torch::allclose(m->b.grad(), (torch::arange(15).reshape({3, 5}) + 1) * mean, 0, 1e-6))
      << "rank " << pg.rank() << " (" << order << "): the last parameter was not averaged";
  EXPECT_FALSE(m->a.grad().requires_grad());
}

TEST(Lab02Comm, GradientsAreAveragedNotSummed) {
  for_worlds([](int world) {
    run_ranks(world, [world](ProcessGroup& pg) {
      Tiny m;
      expect_averaged(m, pg, world, "the gradient-less parameter last");
    });
  });
}

TEST(Lab02Comm, GradientsAreAveragedOverEveryRank) {
  // Rank r's gradient is 1 at index r and 0 elsewhere: whatever the scale, every rank's gradient
  // must weigh the same in the result, so indices 0..N-1 end equal, on every rank.
  for_worlds([](int world) {
    run_ranks(world, [world](ProcessGroup& pg) {
      Tiny m;
      m->a.mutable_grad() = torch::zeros({7});
      m->a.mutable_grad()[pg.rank()] = 1.0;
      lab02::average_gradients(pg, *m);
      const auto g = m->a.grad();
      for (int r = 1; r < world; ++r) {
        EXPECT_EQ(g[r].item<double>(), g[0].item<double>())
            << "rank " << pg.rank() << ": rank " << r << "'s gradient weighs differently from rank 0's: " << g;
      }
    });
  });
}

/// A module whose first parameter never gets a gradient (a frozen or unused layer ahead of the
/// trained ones, as a model with a frozen embedding has).
struct FrozenFirstImpl : torch::nn::Module {
  FrozenFirstImpl() {
    frozen = register_parameter("frozen", torch::zeros({2}));
    a = register_parameter("a", torch::zeros({7}));
    b = register_parameter("b", torch::zeros({3, 5}));
  }
  torch::Tensor frozen, a, b;
};
TORCH_MODULE(FrozenFirst);

TEST(Lab02Comm, AParameterWithoutAGradientIsSkippedNotTheEnd) {
  // The same gradients with the gradient-less parameter first and last must come out the same:
  // compared with the code's own result (so the scale is GradientsAreAveraged*'s finding).
  for_worlds([](int world) {
    run_ranks(world, [](ProcessGroup& pg) {
      Tiny last;
      FrozenFirst first;
      set_rank_gradients(last, pg.rank());
      set_rank_gradients(first, pg.rank());
      lab02::average_gradients(pg, *last);
      try {
        lab02::average_gradients(pg, *first);
      } catch (const c10::Error& e) {
        ADD_FAILURE() << "rank " << pg.rank()
                      << ": with the gradient-less parameter first it threw: " << e.what_without_backtrace();
        return;
      }
      EXPECT_TRUE(torch::equal(first->a.grad(), last->a.grad()))
          << "rank " << pg.rank() << ": the parameter after the gradient-less one got " << first->a.grad()
          << " instead of " << last->a.grad();
      EXPECT_TRUE(torch::equal(first->b.grad(), last->b.grad())) << "rank " << pg.rank() << ": the last parameter";
    });
  });
}

TEST(Lab02Comm, AParameterWithoutAGradientKeepsNone) {
  for_worlds([](int world) {
    run_ranks(world, [](ProcessGroup& pg) {
      Tiny m;
      set_rank_gradients(m, pg.rank());
      lab02::average_gradients(pg, *m);
      EXPECT_FALSE(m->frozen.grad().defined())
          << "rank " << pg.rank() << ": a parameter without a gradient is left alone";
    });
  });
}

TEST(Lab02Comm, AveragingKeepsIdenticalModelsIdentical) {
  // Same start, different data per rank, averaged gradients: after an optimizer step every rank
  // holds the same parameters (and they moved).
  for_worlds([](int world) {
    std::mutex mu;
    std::vector<std::string> digests(static_cast<size_t>(world));
    run_ranks(world, [&](ProcessGroup& pg) {
      Tiny m;
      fill(m, 0);
      torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.5));
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        const auto loss = (m->a * (pg.rank() + 1 + step)).sum() + (m->b * m->b).sum() * (pg.rank() + 1);
        loss.backward();
        lab02::average_gradients(pg, *m);
        opt.step();
      }
      std::lock_guard<std::mutex> lock(mu);
      digests[static_cast<size_t>(pg.rank())] = ddplab::parameter_digest(*m);
    });
    // (Whether they moved, i.e. the gradient's scale, is GradientsAreAveragedNotSummed's finding.)
    for (int r = 1; r < world; ++r) EXPECT_EQ(digests[static_cast<size_t>(r)], digests[0]) << "rank " << r;
  });
}

}  // namespace

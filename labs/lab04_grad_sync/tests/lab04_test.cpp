// Lab 04's public tests: the contracts of lab04.h. Ranks run as threads with real Gloo groups, and
// the runtime's per-parameter sync is the oracle. Run them with build/<tree>/bin/lab04_grad_sync_tests.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/autograd/variable.h>

#include "tensors.h"
#include "thread_ranks.h"
#include "ddplab/deepfm.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/error.h"
#include "lab04.h"

namespace {

using ddplab::dist::GradSync;
using ddplab::dist::ProcessGroup;
using ddplab::testing::clear_grads;
using ddplab::testing::compare;
using ddplab::testing::grads;
using ddplab::testing::run_ranks;
using lab04::BucketCaps;

// ---------------------------------------------------------------------------------------------
// A small model: an embedding, two linear layers and a side branch a step may skip. Parameter
// order (registration): emb.weight [10x3], fc1.weight [6x7], fc1.bias [6], fc2.weight [1x6],
// fc2.bias [1], side.weight [1x4], side.bias [1].

struct NetImpl : torch::nn::Module {
  NetImpl() {
    emb = register_module("emb", torch::nn::Embedding(10, 3));
    fc1 = register_module("fc1", torch::nn::Linear(7, 6));
    fc2 = register_module("fc2", torch::nn::Linear(6, 1));
    side = register_module("side", torch::nn::Linear(4, 1));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& ids, bool use_side) {
    const torch::Tensor h = torch::cat({x, emb->forward(ids)}, 1);
    torch::Tensor y = fc2->forward(torch::tanh(fc1->forward(h))).squeeze(1);
    if (use_side) y = y + side->forward(x).squeeze(1);
    return y;
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, side{nullptr};
};
TORCH_MODULE(Net);

constexpr size_t kParams = 7;

/// The same weights on every rank, different per test seed.
Net make_net(uint64_t seed = 1) {
  torch::manual_seed(seed);
  Net net;
  return net;
}

struct Input {
  torch::Tensor x, ids, y;
};

/// A different batch per rank and step.
Input input(int rank, int step, int64_t n = 5) {
  const float r = static_cast<float>(rank), s = static_cast<float>(step);
  Input in;
  in.x = torch::sin(torch::arange(n * 4, torch::kFloat32) * 0.7f + 3.0f * r + 11.0f * s).view({n, 4});
  in.ids = torch::remainder(torch::arange(n, torch::kInt64) * 3 + rank * 5 + step, 10);
  in.y = (torch::arange(n, torch::kFloat32) + r + s).remainder(2.0f);
  return in;
}

torch::Tensor loss_of(Net& net, const Input& in, bool use_side) {
  return torch::binary_cross_entropy_with_logits(net->forward(in.x, in.ids, use_side), in.y);
}

/// One synced step from cleared gradients; returns the gradients it leaves.
std::vector<torch::Tensor> synced(GradSync& sync, Net& net, const Input& in, bool use_side = true) {
  clear_grads(*net);
  const torch::Tensor loss = loss_of(net, in, use_side);
  sync.before_backward(loss);
  loss.backward();
  sync.finish();
  return grads(*net);
}

std::vector<size_t> indices(const lab04::Bucket& b) { return b.params; }

/// Tensors of the given sizes (float32 unless listed in `doubles`), in order.
std::vector<torch::Tensor> tensors(const std::vector<int64_t>& numels, const std::vector<size_t>& doubles = {}) {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < numels.size(); ++i) {
    const bool d = std::find(doubles.begin(), doubles.end(), i) != doubles.end();
    out.push_back(torch::zeros({numels[i]}, d ? torch::kFloat64 : torch::kFloat32));
  }
  return out;
}

const BucketCaps kSmall{64, 128};  // Net: several buckets

/// A layout of the given buckets (parameter indices), with their sizes.
std::vector<lab04::Bucket> buckets_of(Net& net, const std::vector<std::vector<size_t>>& lists) {
  const auto params = net->parameters();
  std::vector<lab04::Bucket> out;
  for (const auto& list : lists) {
    lab04::Bucket b;
    for (size_t i : list) {
      b.params.push_back(i);
      b.numel += params[i].numel();
      b.bytes += lab04::tensor_bytes(params[i]);
    }
    out.push_back(b);
  }
  return out;
}

/// compare(), except where `got` has no gradient at all: another test checks that a gradient is
/// created, so that a test about values names values only.
std::string compare_defined(std::vector<torch::Tensor> got, std::vector<torch::Tensor> want, double atol) {
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!got[i].defined()) got[i] = want[i] = torch::zeros({1});
  }
  return compare(got, want, atol);
}

/// A layout from the runtime (its own rule, not DDP's): the overlap tests do not depend on 04.1.
std::vector<lab04::Bucket> layout(Net& net, const BucketCaps& caps) {
  ddplab::dist::BucketOptions o;
  o.first_bucket_bytes = caps.first_bytes;
  o.bucket_cap_bytes = caps.cap_bytes;
  return ddplab::dist::assign_buckets(net->parameters(), o);
}

// ---------------------------------------------------------------------------------------------
// 04.1: the layout

TEST(Lab04Buckets, DeepFMUnderDDPDefaultsHasTheMlpTailFirst) {
  ddplab::DeepFM model;
  const auto params = model->parameters();
  ASSERT_EQ(params.size(), 12u);
  const auto buckets = lab04::assign_buckets(params);
  ASSERT_EQ(buckets.size(), 2u);
  // Walking back from mlp's output layer: 4 + 1600 + 1600 + 640000 + 1600 + 640000 bytes reach the
  // 1 MiB of bucket 0 with the second 400x400 weight; everything else fits in 25 MiB.
  EXPECT_EQ(indices(buckets[0]), (std::vector<size_t>{11, 10, 9, 8, 7, 6}));
  EXPECT_EQ(buckets[0].bytes, 1284804);
  EXPECT_EQ(indices(buckets[1]), (std::vector<size_t>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(buckets[1].bytes, 4 * ddplab::count_parameters(*model) - 1284804);
  EXPECT_EQ(buckets[0].numel + buckets[1].numel, ddplab::count_parameters(*model));
}

TEST(Lab04Buckets, OneMiBCapsGiveThreeBuckets) {
  ddplab::DeepFM model;
  const auto buckets = lab04::assign_buckets(model->parameters(), BucketCaps{1 << 20, 1 << 20});
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(indices(buckets[0]), (std::vector<size_t>{11, 10, 9, 8, 7, 6}));
  // mlp.0 (686,400 + 1,600), dense_linear (4 + 52), first_order (669,576) reach 1 MiB.
  EXPECT_EQ(indices(buckets[1]), (std::vector<size_t>{5, 4, 3, 2, 1}));
  EXPECT_EQ(buckets[1].bytes, 1600 + 686400 + 4 + 52 + 669576);
  EXPECT_EQ(indices(buckets[2]), (std::vector<size_t>{0}));  // the embedding, alone
}

TEST(Lab04Buckets, ABucketClosesOnceItReachesItsLimit) {
  // float32 sizes 10, 10, 30, 10, 10 elements = 40, 40, 120, 40, 40 bytes; first limit 80, then 100.
  const auto buckets = lab04::assign_buckets(tensors({10, 10, 30, 10, 10}), BucketCaps{80, 100});
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(indices(buckets[0]), (std::vector<size_t>{4, 3}));  // 80 >= 80: closed at its limit
  EXPECT_EQ(indices(buckets[1]), (std::vector<size_t>{2}));     // 120 >= 100: over the cap, alone
  EXPECT_EQ(indices(buckets[2]), (std::vector<size_t>{1, 0}));  // 80 < 100: left open, closed at the end
  EXPECT_EQ(buckets[1].bytes, 120);
  EXPECT_EQ(buckets[2].numel, 20);
}

TEST(Lab04Buckets, EachDtypeHasItsOwnBucketsAndLimits) {
  // Sizes in elements; 1 and 3 are float64 (8 bytes each). First limit 100 bytes, then 1000.
  // Reverse walk: 4 (f32, 80 B) -> f32 open 80; 3 (f64, 160 B) -> f64 160 >= 100: closed [3];
  // 2 (f32, 40 B) -> f32 120 >= 100: closed [4, 2]; 1 (f64, 80 B) -> f64 80; 0 (f32, 4 B) -> f32 4.
  // The open buckets close at the end; sorted by where they began in the walk.
  const auto buckets = lab04::assign_buckets(tensors({1, 10, 10, 20, 20}, {1, 3}), BucketCaps{100, 1000});
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_EQ(indices(buckets[0]), (std::vector<size_t>{4, 2}));
  EXPECT_EQ(indices(buckets[1]), (std::vector<size_t>{3}));
  EXPECT_EQ(indices(buckets[2]), (std::vector<size_t>{1}));
  EXPECT_EQ(indices(buckets[3]), (std::vector<size_t>{0}));
  EXPECT_EQ(buckets[0].bytes, 120);
  EXPECT_EQ(buckets[1].bytes, 160);
}

TEST(Lab04Buckets, EachDeviceHasItsOwnBucketsAndLimits) {
  // The same dtype on two devices (the meta device: sizes without storage). float32 sizes 10, 10,
  // 30, 10, 10 elements; 1 and 3 on meta. First limit 80 bytes, then 100.
  // Reverse walk: 4 (cpu, 40 B) -> cpu 40; 3 (meta, 40 B) -> meta 40; 2 (cpu, 120 B) -> cpu 160
  // >= 80: closed [4, 2]; 1 (meta, 40 B) -> meta 80 >= 80: closed [3, 1]; 0 (cpu, 40 B) -> cpu 40,
  // closed at the end. One bucket per dtype alone would mix the devices: [4, 3], [2], [1, 0].
  auto params = tensors({10, 10, 30, 10, 10});
  for (size_t i : {1, 3}) params[i] = torch::zeros({10}, torch::TensorOptions().device(torch::kMeta));
  const auto buckets = lab04::assign_buckets(params, BucketCaps{80, 100});
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(indices(buckets[0]), (std::vector<size_t>{4, 2}));
  EXPECT_EQ(indices(buckets[1]), (std::vector<size_t>{3, 1}));
  EXPECT_EQ(indices(buckets[2]), (std::vector<size_t>{0}));
  EXPECT_EQ(buckets[1].bytes, 80);
}

TEST(Lab04Buckets, EveryParameterInExactlyOneBucket) {
  Net net = make_net();
  for (const BucketCaps caps : {BucketCaps{}, kSmall, BucketCaps{1, 1}, BucketCaps{4, 1 << 30}}) {
    const auto buckets = lab04::assign_buckets(net->parameters(), caps);
    std::vector<int> seen(kParams, 0);
    for (const auto& b : buckets) {
      int64_t bytes = 0;
      for (size_t i : b.params) {
        ASSERT_LT(i, kParams);
        ++seen[i];
        bytes += lab04::tensor_bytes(net->parameters()[i]);
      }
      EXPECT_EQ(b.bytes, bytes);
    }
    EXPECT_EQ(seen, std::vector<int>(kParams, 1)) << "caps " << caps.first_bytes << "/" << caps.cap_bytes;
  }
  // Caps of one byte: every tensor closes its own bucket, last registered first.
  const auto tiny = lab04::assign_buckets(net->parameters(), BucketCaps{1, 1});
  ASSERT_EQ(tiny.size(), kParams);
  for (size_t b = 0; b < kParams; ++b) EXPECT_EQ(indices(tiny[b]), std::vector<size_t>{kParams - 1 - b});
}

TEST(Lab04Buckets, RejectsCapsBelowOneByteAndAcceptsNoParameters) {
  EXPECT_THROW(lab04::assign_buckets(tensors({4}), BucketCaps{0, 100}), ddplab::ConfigError);
  EXPECT_THROW(lab04::assign_buckets(tensors({4}), BucketCaps{100, -1}), ddplab::ConfigError);
  EXPECT_TRUE(lab04::assign_buckets({}, BucketCaps{}).empty());
}

// ---------------------------------------------------------------------------------------------
// 04.1: bucketed allreduce after backward

class Lab04Bucketed : public ::testing::TestWithParam<int> {};

TEST_P(Lab04Bucketed, GradientsAreTheOraclesMeanWithOneCollectivePerBucket) {
  run_ranks(GetParam(), [](ProcessGroup& pg) {
    Net net = make_net();
    auto oracle = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, net->parameters());
    for (const BucketCaps caps : {BucketCaps{}, kSmall}) {
      lab04::BucketedSync sync(pg, net->parameters(), caps);
      for (int step = 0; step < 2; ++step) {
        SCOPED_TRACE(::testing::Message()
                     << "rank " << pg.rank() << ", step " << step << ", " << sync.buckets().size() << " buckets");
        const Input in = input(pg.rank(), step);
        const auto want = synced(*oracle, net, in);
        const auto got = synced(sync, net, in);
        EXPECT_EQ(compare(got, want, 1e-6), "");
        EXPECT_EQ(sync.last_step().collectives, static_cast<int64_t>(sync.buckets().size()));
        EXPECT_EQ(sync.last_step().bytes, oracle->last_step().bytes);
      }
    }
  });
}

TEST_P(Lab04Bucketed, AParameterWithoutGradientGetsTheMeanOfTheOthers) {
  // One step on a new sync: only rank 0 uses the side branch. Every rank must end with the oracle's
  // side gradients (rank 0's divided by the world size), also the ranks that had none.
  run_ranks(GetParam(), [](ProcessGroup& pg) {
    Net net = make_net();
    auto oracle = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, net->parameters());
    lab04::BucketedSync sync(pg, net->parameters(), kSmall);
    const Input in = input(pg.rank(), 0);
    const bool use_side = pg.rank() == 0;
    const auto want = synced(*oracle, net, in, use_side);
    const auto got = synced(sync, net, in, use_side);
    for (size_t i : {5, 6}) {
      ASSERT_TRUE(got[i].defined()) << "rank " << pg.rank() << ": parameter " << i
                                    << " has no gradient after the step: create it and copy its slice back";
    }
    EXPECT_EQ(compare(got, want, 1e-6), "") << "rank " << pg.rank();
  });
}

TEST_P(Lab04Bucketed, ABucketWithoutAnyGradientHereIsStillReduced) {
  // A layout whose last bucket is the side branch alone; ranks other than 0 skip it: their share
  // is zeros, and they must still issue its allreduce, or rank 0 waits in it for a peer that left.
  run_ranks(
      GetParam(),
      [](ProcessGroup& pg) {
        Net net = make_net();
        auto oracle = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, net->parameters());
        lab04::BucketedSync sync(pg, net->parameters(), buckets_of(net, {{4, 3, 2, 1, 0}, {6, 5}}));
        // One step: a rank that skipped the last allreduce leaves, and rank 0's wait in it fails.
        const Input in = input(pg.rank(), 0);
        const bool use_side = pg.rank() == 0;
        const auto want = synced(*oracle, net, in, use_side);
        const auto got = synced(sync, net, in, use_side);
        EXPECT_EQ(sync.last_step().collectives, 2)
            << "rank " << pg.rank() << ": one allreduce per bucket on every rank";
        EXPECT_EQ(compare_defined(got, want, 1e-6), "") << "rank " << pg.rank();
      },
      std::chrono::seconds(5));
}

TEST_P(Lab04Bucketed, AParameterWithoutGradientContributesZeros) {
  // One sync object over three steps, as training uses it: at step 0 every rank uses the side
  // branch (its slot in the bucket fills); at steps 1 and 2 only rank 0 does, so the others' side
  // gradients are undefined and their slot must hold zeros again, not what step 0 left there.
  const int world = GetParam();
  run_ranks(world, [world](ProcessGroup& pg) {
    Net net = make_net();
    auto oracle = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, net->parameters());
    lab04::BucketedSync sync(pg, net->parameters(), kSmall);
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE(::testing::Message() << "rank " << pg.rank() << ", step " << step);
      const Input in = input(pg.rank(), step);
      const bool use_side = step == 0 || pg.rank() == 0;
      const auto want = synced(*oracle, net, in, use_side);
      const auto got = synced(sync, net, in, use_side);
      EXPECT_EQ(compare_defined(got, want, 1e-6), "");
      if (world > 1 && got[5].defined()) {
        EXPECT_GT(got[5].abs().sum().item<float>(), 0.0f) << "rank 0's side gradient must arrive";
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Lab04Bucketed, ::testing::Values(1, 2, 3));

// ---------------------------------------------------------------------------------------------
// 04.2: overlapped with backward

class Lab04Overlap : public ::testing::TestWithParam<int> {};

/// Whether `ok` holds on every rank (one allreduce): a test's precondition every rank agrees on.
bool on_every_rank(ProcessGroup& pg, bool ok) {
  torch::Tensor bad = torch::tensor({ok ? 0.0f : 1.0f});
  pg.allreduce(bad);
  return bad.item<float>() == 0.0f;
}

TEST_P(Lab04Overlap, GradientsAreTheOraclesMeanWithOneCollectivePerBucket) {
  // Each step on a new sync (a sync reused across steps is the next test's): the values alone.
  run_ranks(GetParam(), [](ProcessGroup& pg) {
    Net net = make_net();
    auto oracle = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, net->parameters());
    for (const BucketCaps caps : {BucketCaps{}, kSmall, BucketCaps{1, 1}}) {
      for (int step = 0; step < 2; ++step) {
        lab04::OverlapSync sync(pg, net->parameters(), layout(net, caps));
        SCOPED_TRACE(::testing::Message()
                     << "rank " << pg.rank() << ", step " << step << ", " << sync.buckets().size() << " buckets");
        const Input in = input(pg.rank(), step);
        const auto want = synced(*oracle, net, in);
        const auto got = synced(sync, net, in);
        EXPECT_EQ(compare(got, want, 1e-6), "");
        EXPECT_EQ(sync.last_step().collectives, static_cast<int64_t>(sync.buckets().size()));
      }
    }
  });
}

TEST_P(Lab04Overlap, OneSyncServesStepAfterStep) {
  // Training keeps one sync for every step: step k on it must give what a new sync gives for the
  // same step (whatever that is: the values are the test above's). Whatever arm() does not reset
  // (ready_, missing_, pending_, next_) carries the last step's state into this one.
  run_ranks(GetParam(), [](ProcessGroup& pg) {
    Net net = make_net();
    for (const BucketCaps caps : {kSmall, BucketCaps{1, 1}}) {
      lab04::OverlapSync sync(pg, net->parameters(), layout(net, caps));
      for (int step = 0; step < 4; ++step) {
        SCOPED_TRACE(::testing::Message()
                     << "rank " << pg.rank() << ", step " << step << ", " << sync.buckets().size() << " buckets");
        const Input in = input(pg.rank(), step);
        std::vector<torch::Tensor> fresh;
        {
          lab04::OverlapSync once(pg, net->parameters(), layout(net, caps));
          fresh = synced(once, net, in);
        }
        const auto got = synced(sync, net, in);
        EXPECT_EQ(compare(got, fresh, 1e-6), "") << "the reused sync differs from a new one";
        EXPECT_EQ(sync.last_step().collectives, static_cast<int64_t>(sync.buckets().size()));
      }
    }
  });
}

TEST_P(Lab04Overlap, BucketsStartDuringBackwardInBucketOrder) {
  run_ranks(GetParam(), [](ProcessGroup& pg) {
    Net net = make_net();
    lab04::OverlapSync sync(pg, net->parameters(), layout(net, kSmall));
    ASSERT_GE(sync.buckets().size(), 3u);
    std::vector<int64_t> launched;
    pg.set_observer([&](ddplab::dist::Op op, int64_t bytes, int64_t) {
      EXPECT_EQ(op, ddplab::dist::Op::kAllreduce);
      launched.push_back(bytes);
    });
    clear_grads(*net);
    const torch::Tensor loss = loss_of(net, input(pg.rank(), 0), true);
    sync.before_backward(loss);
    loss.backward();
    const size_t during_backward = launched.size();
    sync.finish();
    pg.set_observer(nullptr);
    EXPECT_GE(during_backward, 1u) << "no bucket started before backward returned: the overlap is missing";
    std::vector<int64_t> layout;
    for (const auto& b : sync.buckets()) layout.push_back(b.bytes);
    EXPECT_EQ(launched, layout) << "one allreduce per bucket, in bucket order";
  });
}

TEST_P(Lab04Overlap, ACompleteBucketWaitsForTheOnesBeforeIt) {
  // Bucket 0 holds the embedding, whose gradient comes last in backward, and side.bias; bucket 1
  // the rest, complete long before. It must wait for bucket 0 and then go right after it: when
  // bucket next_ completes, every complete bucket after it is launched too.
  // The values are compared with your own sync on a layout whose buckets complete in order (the
  // oracle's values are GradientsAreTheOraclesMean's to judge): only the order may differ here.
  run_ranks(GetParam(), [](ProcessGroup& pg) {
    Net net = make_net();
    const Input in = input(pg.rank(), 0);
    std::vector<torch::Tensor> want;
    {
      lab04::OverlapSync in_order(pg, net->parameters(), layout(net, kSmall));
      want = synced(in_order, net, in);
    }
    lab04::OverlapSync sync(pg, net->parameters(), buckets_of(net, {{0, 6}, {5, 4, 3, 2, 1}}));
    std::vector<int64_t> launched;
    pg.set_observer([&](ddplab::dist::Op, int64_t bytes, int64_t) { launched.push_back(bytes); });
    const auto got = synced(sync, net, in);
    pg.set_observer(nullptr);
    EXPECT_EQ(launched, (std::vector<int64_t>{sync.buckets()[0].bytes, sync.buckets()[1].bytes}))
        << "rank " << pg.rank() << ": both buckets, in bucket order";
    EXPECT_EQ(compare(got, want, 1e-6), "") << "rank " << pg.rank();
  });
}

TEST_P(Lab04Overlap, AccumulatedMicroStepsAreSummedBeforeTheSyncedStep) {
  // Two micro-steps inside no_sync() and a third synced one: the hooks must read the accumulated
  // .grad() (after AccumulateGrad), so the result is the oracle's on the summed gradients.
  run_ranks(GetParam(), [](ProcessGroup& pg) {
    Net net = make_net();
    auto oracle = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, net->parameters());
    auto run = [&](GradSync& sync) {
      clear_grads(*net);
      for (int k = 0; k < 2; ++k) {
        auto guard = sync.no_sync();
        const torch::Tensor loss = loss_of(net, input(pg.rank(), k), true);
        sync.before_backward(loss);
        loss.backward();
        sync.finish();
        EXPECT_EQ(sync.last_step().collectives, 0) << "a no_sync micro-step communicates nothing";
      }
      const torch::Tensor loss = loss_of(net, input(pg.rank(), 2), true);
      sync.before_backward(loss);
      loss.backward();
      sync.finish();
      return grads(*net);
    };
    const auto want = run(*oracle);
    lab04::OverlapSync sync(pg, net->parameters(), layout(net, kSmall));
    const auto got = run(sync);
    // Only when one plain step on a new sync gives the oracle's mean on every rank (the values are
    // GradientsAreTheOraclesMean's to judge): then a difference here is the accumulation's.
    bool plain_ok = false;
    {
      lab04::OverlapSync fresh(pg, net->parameters(), layout(net, kSmall));
      const Input in = input(pg.rank(), 3);
      const auto want_plain = synced(*oracle, net, in);
      plain_ok = compare(synced(fresh, net, in), want_plain, 1e-6).empty();
    }
    if (!on_every_rank(pg, plain_ok)) return;
    EXPECT_EQ(compare(got, want, 1e-6), "") << "rank " << pg.rank();
  });
}

TEST(Lab04Overlap, HooksDoNothingOutsideAStepAndAreRemovedWithTheSync) {
  run_ranks(1, [](ProcessGroup& pg) {
    Net net = make_net();
    int64_t calls = 0;
    pg.set_observer([&](ddplab::dist::Op, int64_t, int64_t) { ++calls; });
    {
      lab04::OverlapSync sync(pg, net->parameters(), layout(net, kSmall));
      loss_of(net, input(0, 0), true).backward();  // not armed: no collective
      EXPECT_EQ(calls, 0);
      synced(sync, net, input(0, 1));
      EXPECT_EQ(calls, static_cast<int64_t>(sync.buckets().size()));
    }
    calls = 0;
    loss_of(net, input(0, 2), true).backward();  // the sync is gone: its hooks must be too
    EXPECT_EQ(calls, 0);
    pg.set_observer(nullptr);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Lab04Overlap, ::testing::Values(1, 2, 3));

// ---------------------------------------------------------------------------------------------
// 04.3: parameters a step does not use

std::vector<lab04::NodePtr> accumulators(Net& net) {
  std::vector<lab04::NodePtr> out;
  for (const auto& p : net->parameters()) out.push_back(torch::autograd::impl::grad_accumulator(p));
  return out;
}

/// Runs `checks` (which returns what went wrong, "" if nothing) in a child process, gtest's death-test
/// machinery: a walk that follows a null pointer crashes the child, and this test fails with the
/// signal on its own, instead of taking the test program (and every other test's result) with it.
void in_child(const std::function<std::string()>& checks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::string why = checks();
        std::fprintf(stderr, "%s\n", why.c_str());
        std::fflush(stderr);
        std::_Exit(why.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "")
      << "exit status 1: the walk's result is wrong (the message above); a signal: the walk crashed";
}

/// "" if `got` is `want`, else what differs.
std::string unreached_is(const std::vector<size_t>& got, const std::vector<size_t>& want, const char* what) {
  return got == want ? "" : fmt::format("{}: got [{}], want [{}]; ", what, fmt::join(got, ", "), fmt::join(want, ", "));
}

TEST(Lab04Unused, TheGraphWalkFindsWhatTheLossDoesNotReach) {
  // The inputs x and ids need no gradient: their edges have no function (they lead nowhere).
  in_child([] {
    Net net = make_net();
    const auto acc = accumulators(net);
    const Input in = input(0, 0);
    std::string why;
    why += unreached_is(lab04::unreached_parameters(loss_of(net, in, true), acc), {}, "the whole net");
    why += unreached_is(lab04::unreached_parameters(loss_of(net, in, false), acc), {5, 6}, "without the side branch");
    // Only the side branch: everything but side.weight and side.bias is unreached.
    const torch::Tensor side_only = net->side->forward(in.x).sum();
    why += unreached_is(lab04::unreached_parameters(side_only, acc), {0, 1, 2, 3, 4}, "the side branch alone");
    // A tensor no gradient flows to reaches nothing.
    why += unreached_is(lab04::unreached_parameters(torch::ones({2}), acc), {0, 1, 2, 3, 4, 5, 6}, "no grad_fn");
    return why;
  });
}

TEST(Lab04Unused, TheWalkVisitsSharedNodesOnce) {
  // 40 layers of y = y + y: 2^40 paths but 41 nodes. A walk without a visited set never ends. The
  // layers reach nothing new: the walk must give what it gives without them (what that is, is the
  // test above's to judge; an input that needs a gradient, so that every edge leads to a node).
  in_child([] {
    Net net = make_net();
    const torch::Tensor side = net->side->forward(input(0, 0).x.clone().requires_grad_(true)).sum();
    torch::Tensor y = side;
    for (int k = 0; k < 40; ++k) y = y + y;
    return unreached_is(lab04::unreached_parameters(y, accumulators(net)),
                        lab04::unreached_parameters(side, accumulators(net)), "40 shared layers vs none");
  });
}

class Lab04UnusedRanks : public ::testing::TestWithParam<int> {};

TEST_P(Lab04UnusedRanks, FindUnusedMatchesTheOracleWhenRanksSkipDifferentParameters) {
  // Rank r skips the side branch at steps s with (s + r) % 2 == 0; at one rank every other step.
  run_ranks(GetParam(), [](ProcessGroup& pg) {
    Net net = make_net();
    auto oracle = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, net->parameters());
    for (const BucketCaps caps : {BucketCaps{}, kSmall}) {
      lab04::OverlapSync sync(pg, net->parameters(), layout(net, caps), /*find_unused=*/true);
      EXPECT_TRUE(sync.finds_unused());
      for (int step = 0; step < 4; ++step) {
        const bool use_side = (step + pg.rank()) % 2 != 0;
        SCOPED_TRACE(::testing::Message()
                     << "rank " << pg.rank() << ", step " << step << ", side " << (use_side ? "used" : "skipped"));
        const Input in = input(pg.rank(), step);
        const auto want = synced(*oracle, net, in, use_side);
        const auto got = synced(sync, net, in, use_side);
        EXPECT_EQ(compare_defined(got, want, 1e-6), "");
        EXPECT_EQ(sync.last_unused(), use_side ? std::vector<size_t>{} : (std::vector<size_t>{5, 6}));
        EXPECT_EQ(sync.last_step().collectives, static_cast<int64_t>(sync.buckets().size()));
      }
    }
  });
}

TEST_P(Lab04UnusedRanks, AParameterThisRankDidNotUseStillGetsTheMean) {
  // One step, find_unused: rank 0 skips the side branch, the others use it. Rank 0's side
  // parameters had no gradient before the sync; after it they hold the others' mean.
  run_ranks(GetParam(), [](ProcessGroup& pg) {
    Net net = make_net();
    auto oracle = ddplab::dist::make_grad_sync(ddplab::dist::SyncStrategy::kPerParam, pg, net->parameters());
    lab04::OverlapSync sync(pg, net->parameters(), layout(net, kSmall), /*find_unused=*/true);
    const Input in = input(pg.rank(), 0);
    const bool use_side = pg.rank() != 0;
    const auto want = synced(*oracle, net, in, use_side);
    const auto got = synced(sync, net, in, use_side);
    for (size_t i : {5, 6}) {
      ASSERT_TRUE(got[i].defined()) << "rank " << pg.rank() << ": parameter " << i
                                    << " has no gradient after the step: reduce() must create it";
    }
    EXPECT_EQ(compare(got, want, 1e-6), "") << "rank " << pg.rank();
  });
}

TEST_P(Lab04UnusedRanks, WithoutFindUnusedTheRankThatSkippedNamesTheBucket) {
  // Rank 0 skips the side branch; the others wait for its bucket and fail on the timeout (or as
  // soon as rank 0's group goes away): an error, not a hang.
  const int world = GetParam();
  std::atomic<int> named{0}, failed{0};
  run_ranks(
      world,
      [&](ProcessGroup& pg) {
        Net net = make_net();
        lab04::OverlapSync sync(pg, net->parameters(), layout(net, kSmall));
        // Rank 0 issues no collective before it fails: without this, it could leave before a peer
        // has finished connecting, and the peer would fail in its group's constructor instead.
        pg.barrier();
        try {
          synced(sync, net, input(pg.rank(), 0), pg.rank() != 0);
        } catch (const std::exception& e) {
          ++failed;
          const std::string what = e.what();
          if (pg.rank() == 0) {
            EXPECT_NE(what.find("was never launched"), std::string::npos) << what;
            EXPECT_NE(what.find("04.3"), std::string::npos) << what;
            ++named;
          }
          return;
        }
        ADD_FAILURE() << "rank " << pg.rank() << " finished a step whose bucket was never launched on rank 0";
      },
      std::chrono::seconds(3));
  EXPECT_EQ(named.load(), 1);
  EXPECT_EQ(failed.load(), world);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Lab04UnusedRanks, ::testing::Values(2, 3));

}  // namespace

// The gradient sync ladder against its oracle: ranks as threads over real Gloo, different data per
// rank; per-parameter allreduce is the reference every faster strategy must reproduce, and with
// integer-valued weights and data the averaged gradient is checked exactly.
#include <functional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tensors.h"
#include "thread_ranks.h"
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "ddplab/config.h"
#include "ddplab/data/schema.h"
#include "ddplab/deepfm.h"
#include "ddplab/fused_adam.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/dist/loopback.h"
#include "ddplab/dist/process_group.h"
#include "ddplab/error.h"

namespace {

using ddplab::dist::assign_buckets;
using ddplab::dist::Bucket;
using ddplab::dist::BucketOptions;
using ddplab::dist::Communicator;
using ddplab::dist::GradSync;
using ddplab::dist::make_grad_sync;
using ddplab::dist::ProcessGroup;
using ddplab::dist::SyncStrategy;
using ddplab::testing::clear_grads;
using ddplab::testing::compare;
using ddplab::testing::grads;
using ddplab::testing::values;

constexpr SyncStrategy kAllStrategies[] = {SyncStrategy::kPerParam, SyncStrategy::kBucketed, SyncStrategy::kOverlap};
/// Small caps so the small test model splits into many buckets (layout worked out below).
const BucketOptions kSmallCaps{64, 256};

int64_t nbytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// ---------------------------------------------------------------------------------------------
// A small model with odd sizes: parameters 0 emb [13,5], 1 fc1.w [9,12], 2 fc1.b, 3 fc2.w [7,9],
// 4 fc2.b, 5 fc3.w [3,7], 6 fc3.b; with extras also 7 side.w [3,3], 8 side.b, 9 unused.w [2,4],
// 10 unused.b ("side" is used only when asked, "unused" never).

struct Batch {
  torch::Tensor x;    // [B, 7]
  torch::Tensor ids;  // [B]
};

struct TinyNetImpl : torch::nn::Module {
  explicit TinyNetImpl(bool extras = false) {
    emb = register_module("emb", torch::nn::Embedding(13, 5));
    fc1 = register_module("fc1", torch::nn::Linear(12, 9));
    fc2 = register_module("fc2", torch::nn::Linear(9, 7));
    fc3 = register_module("fc3", torch::nn::Linear(7, 3));
    if (extras) {
      side = register_module("side", torch::nn::Linear(3, 3));
      unused = register_module("unused", torch::nn::Linear(4, 2));
    }
  }
  /// A sum over samples, so the gradient of a concatenated batch is the sum of the parts'.
  torch::Tensor loss(const Batch& b, bool use_side = false) {
    torch::Tensor h = torch::cat({emb(b.ids), b.x}, 1);
    h = torch::relu(fc1(h));
    h = torch::relu(fc2(h));
    torch::Tensor out = fc3(h);
    if (use_side) out = out + side(out);
    return (out * torch::tensor({1.0f, -2.0f, 3.0f})).sum();
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, side{nullptr}, unused{nullptr};
};
TORCH_MODULE(TinyNet);

/// Values as a function of (parameter, index) so every rank starts from the same weights without
/// a broadcast or the (process-wide) random generator. Integer mode: small integers, so every
/// gradient is an integer below 2^24 and sums over ranks are exact in any order.
void init_params(torch::nn::Module& m, bool integer) {
  torch::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : m.parameters()) {
    const auto i = torch::arange(p.numel(), torch::kFloat32);
    torch::Tensor v = integer ? torch::remainder(i + 3.0f * static_cast<float>(k), 5.0f) - 2.0f
                              : torch::sin(i * 0.37f + static_cast<float>(k)) * 0.4f;
    p.copy_(v.view(p.sizes()));
    ++k;
  }
}

/// Rank `rank`'s micro-batch `step`: different on every rank and step.
Batch make_batch(int rank, int step, int64_t n, bool integer) {
  const auto i = torch::arange(n * 7, torch::kFloat32);
  const float r = static_cast<float>(rank), s = static_cast<float>(step);
  torch::Tensor x = integer ? torch::remainder(i * 3.0f + r * 5.0f + s * 11.0f, 7.0f) - 3.0f
                            : torch::sin(i * 0.71f + r * 1.3f + s * 2.9f);
  torch::Tensor ids = torch::remainder(torch::arange(n, torch::kInt64) * 5 + rank * 3 + step * 7, 13);
  return {x.view({n, 7}), ids};
}

Batch concat(const std::vector<Batch>& parts) {
  std::vector<torch::Tensor> xs, ids;
  for (const auto& b : parts) {
    xs.push_back(b.x);
    ids.push_back(b.ids);
  }
  return {torch::cat(xs), torch::cat(ids)};
}

/// Gradient-sync tests fail fast on a deadlock.
template <typename Fn>
void run_sync_ranks(int world, Fn fn, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  ddplab::testing::run_ranks(world, fn, timeout);
}

/// One synced step: before_backward, backward, finish.
void synced_step(GradSync& sync, TinyNet& m, const Batch& b, bool use_side = false) {
  sync.before_backward();
  m->loss(b, use_side).backward();
  sync.finish();
}

/// Checks the rules assign_buckets documents, for any caps.
void expect_bucket_rules(const std::vector<torch::Tensor>& params, const std::vector<Bucket>& buckets,
                         const BucketOptions& o) {
  std::vector<size_t> order;
  for (const auto& b : buckets) order.insert(order.end(), b.params.begin(), b.params.end());
  std::vector<size_t> reverse;
  for (size_t k = params.size(); k-- > 0;) reverse.push_back(k);
  EXPECT_EQ(order, reverse) << "buckets must cover the parameters once, in reverse order";
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int64_t cap = b == 0 ? o.first_bucket_bytes : o.bucket_cap_bytes;
    int64_t bytes = 0, numel = 0;
    for (size_t i : buckets[b].params) {
      bytes += nbytes(params[i]);
      numel += params[i].numel();
    }
    EXPECT_EQ(buckets[b].bytes, bytes) << "bucket " << b;
    EXPECT_EQ(buckets[b].numel, numel) << "bucket " << b;
    if (buckets[b].params.size() > 1) {
      EXPECT_LE(buckets[b].bytes, cap) << "bucket " << b << " exceeds its cap";
    }
    if (b + 1 < buckets.size()) {  // greedy: the next parameter did not fit
      const torch::Tensor& next = params[buckets[b + 1].params.front()];
      const bool same_kind = next.scalar_type() == params[buckets[b].params.front()].scalar_type();
      EXPECT_TRUE(!same_kind || buckets[b].bytes + nbytes(next) > cap) << "bucket " << b << " closed early";
    }
  }
}

// ---------------------------------------------------------------------------------------------

TEST(SyncStrategyFlag, ParsesTheThreeNamesAndRejectsOthers) {
  for (SyncStrategy s : kAllStrategies) {
    EXPECT_EQ(ddplab::dist::parse_sync_strategy(ddplab::dist::sync_strategy_name(s)), s);
  }
  EXPECT_STREQ(ddplab::dist::sync_strategy_name(SyncStrategy::kPerParam), "per-param");
  EXPECT_EQ(ddplab::dist::parse_sync_strategy("sparse"), SyncStrategy::kSparse);
  try {
    ddplab::dist::parse_sync_strategy("ring");
    FAIL() << "no error";
  } catch (const ddplab::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--sync"), std::string::npos) << what;
    EXPECT_NE(what.find("'ring'"), std::string::npos) << what;
  }
}

TEST(BucketAssignment, SmallCapsGiveTheWorkedOutLayout) {
  TinyNet m;
  const auto params = m->parameters();
  const auto buckets = assign_buckets(params, kSmallCaps);
  // Reverse order: fc3.b (12 B) alone, as fc3.w (84 B) would take bucket 0 over 64 B; then up to
  // 256 B: fc3.w + fc2.b = 112 (+ fc2.w 252 would not fit); fc2.w 252 (+ fc1.b 36 would not);
  // fc1.b 36 (+ fc1.w 432 would not); fc1.w 432 and emb 260 exceed the cap, so each is alone.
  const std::vector<std::vector<size_t>> want_params{{6}, {5, 4}, {3}, {2}, {1}, {0}};
  const std::vector<int64_t> want_bytes{12, 112, 252, 36, 432, 260};
  ASSERT_EQ(buckets.size(), want_params.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_EQ(buckets[b].params, want_params[b]) << "bucket " << b;
    EXPECT_EQ(buckets[b].bytes, want_bytes[b]) << "bucket " << b;
  }
  expect_bucket_rules(params, buckets, kSmallCaps);
}

TEST(BucketAssignment, RulesHoldForManyCaps) {
  TinyNet m(true);
  const auto params = m->parameters();
  for (int64_t first : {1, 16, 64, 100, 5000}) {
    for (int64_t cap : {1, 64, 256, 1000, 1 << 20}) {
      SCOPED_TRACE(testing::Message() << "first " << first << ", cap " << cap);
      expect_bucket_rules(params, assign_buckets(params, {first, cap}), {first, cap});
    }
  }
  // PyTorch's defaults put a model this small in one bucket.
  const auto one = assign_buckets(params);
  ASSERT_EQ(one.size(), 1U);
  EXPECT_EQ(one[0].bytes, 4 * ddplab::count_parameters(*m));
}

TEST(BucketAssignment, ADtypeChangeStartsANewBucket) {
  const std::vector<torch::Tensor> params{torch::zeros({3}), torch::zeros({2}, torch::kFloat64), torch::zeros({4})};
  const auto buckets = assign_buckets(params);
  ASSERT_EQ(buckets.size(), 3U);
  EXPECT_EQ(buckets[1].params, std::vector<size_t>{1});
  EXPECT_EQ(buckets[1].bytes, 16);
}

TEST(BucketAssignment, RejectsCapsBelowOneByte) {
  EXPECT_THROW(assign_buckets({torch::zeros({3})}, {0, 10}), ddplab::ConfigError);
  EXPECT_THROW(assign_buckets({torch::zeros({3})}, {10, -1}), ddplab::ConfigError);
}

TEST(BucketAssignment, DeepFMUnderPyTorchDefaultsHasTwoBuckets) {
  ddplab::DeepFM model;
  const auto params = model->parameters();
  const auto buckets = assign_buckets(params);
  // Parameters: 0 embedding [167394,16], 1 first_order [167394,1], 2-3 dense_linear, 4-5 mlp.0
  // [400,429], 6-7 mlp.2, 8-9 mlp.4 [400,400], 10-11 mlp.6 [1,400]. Reverse order: the output
  // layers fill bucket 0 up to mlp.2.bias (644,804 B; mlp.2.weight's 640,000 B would pass 1 MiB);
  // everything else, embeddings included, fits in one 25 MiB bucket.
  ASSERT_EQ(buckets.size(), 2U);
  EXPECT_EQ(buckets[0].params, (std::vector<size_t>{11, 10, 9, 8, 7}));
  EXPECT_EQ(buckets[1].params, (std::vector<size_t>{6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(buckets[0].bytes, 644804);
  EXPECT_EQ(buckets[1].bytes, 12710848);
  EXPECT_EQ(buckets[0].bytes + buckets[1].bytes, 4 * ddplab::count_parameters(*model));
  expect_bucket_rules(params, buckets, BucketOptions{});
}

// A world of one behind the Communicator interface (dist::Loopback). It has no asynchronous
// path, so overlap runs on Communicator's default allreduce_async.
using LoopbackComm = ddplab::dist::Loopback;

TEST(GradSyncTransport, StrategiesRunOnAnyCommunicator) {
  LoopbackComm comm;
  TinyNet m;
  init_params(*m, false);
  m->loss(make_batch(0, 0, 5, false)).backward();
  const auto local = grads(*m);
  for (SyncStrategy s : kAllStrategies) {
    SCOPED_TRACE(ddplab::dist::sync_strategy_name(s));
    auto sync = make_grad_sync(s, comm, m->parameters(), kSmallCaps);
    clear_grads(*m);
    synced_step(*sync, m, make_batch(0, 0, 5, false));
    EXPECT_EQ(compare(grads(*m), local, 0.0), "");
    EXPECT_EQ(sync->last_step().collectives, static_cast<int64_t>(sync->buckets().size()));
    EXPECT_EQ(sync->last_step().bytes, 4 * ddplab::count_parameters(*m));
  }
}

#ifdef DDPLAB_HAVE_GLOO

class GradSyncTransportWorld : public ::testing::TestWithParam<int> {};

TEST_P(GradSyncTransportWorld, AllreduceAsyncSumsAndCountsLikeAllreduce) {
  const int world = GetParam();
  run_sync_ranks(world, [world](ProcessGroup& pg) {
    std::vector<torch::Tensor> ts;
    std::vector<std::shared_ptr<ddplab::dist::Pending>> pending;
    for (int64_t n : {1, 7, 1023}) {
      ts.push_back(torch::arange(n, torch::kFloat32) + 1000.0f * static_cast<float>(pg.rank()));
      pending.push_back(pg.allreduce_async(ts.back()));
    }
    EXPECT_EQ(pg.stats().ops[0].calls, 3);  // counted when started
    EXPECT_EQ(pg.stats().ops[0].bytes, (1 + 7 + 1023) * 4);
    for (size_t k = 0; k < ts.size(); ++k) {
      pending[k]->wait();
      pending[k]->wait();  // idempotent
      const auto n = ts[k].numel();
      const auto want = torch::arange(n, torch::kFloat32) * world + 1000.0f * world * (world - 1) / 2.0f;
      EXPECT_TRUE(torch::equal(ts[k], want)) << "rank " << pg.rank() << " n " << n;
    }
    EXPECT_EQ(pg.stats().ops[0].calls, 3);
    EXPECT_GE(pg.stats().ops[0].seconds, 0.0);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GradSyncTransportWorld, ::testing::Values(1, 2, 3));

TEST(GradSyncTransport, AllreduceAsyncTimeoutNamesItsOwnCollective) {
  // Rank 1 never joins. Rank 0 starts two allreduces and waits for the first: the error must name
  // #1 and its 40 bytes, not the 12-byte #2 that was started last.
  try {
    run_sync_ranks(
        2,
        [](ProcessGroup& pg) {
          if (pg.rank() == 0) {
            auto a = torch::ones({10});
            auto b = torch::ones({3});
            auto pa = pg.allreduce_async(a);
            auto pb = pg.allreduce_async(b);
            pa->wait();
          } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(1000));
          }
        },
        std::chrono::milliseconds(300));
    FAIL() << "no timeout";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce #1 (40 bytes) did not complete within 300 ms"), std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------------------------------------

class GradSyncOracle : public ::testing::TestWithParam<int> {};

TEST_P(GradSyncOracle, EveryStrategyGivesExactlyTheMeanOfTheLocalGradients) {
  const int world = GetParam();
  run_sync_ranks(world, [world](ProcessGroup& pg) {
    TinyNet m;
    init_params(*m, true);
    // The reference without any communication: every rank's gradient, computed here, summed in
    // rank order and divided like the strategies do. Integer values make every sum exact.
    std::vector<torch::Tensor> want;
    for (int r = 0; r < world; ++r) {
      clear_grads(*m);
      m->loss(make_batch(r, 0, 6, true)).backward();
      const auto g = grads(*m);
      if (want.empty()) {
        want = g;
      } else {
        for (size_t i = 0; i < want.size(); ++i) want[i] += g[i];
      }
    }
    for (auto& w : want) w.div_(world);

    const std::pair<SyncStrategy, BucketOptions> cases[] = {{SyncStrategy::kPerParam, {}},
                                                            {SyncStrategy::kBucketed, kSmallCaps},
                                                            {SyncStrategy::kBucketed, {}},
                                                            {SyncStrategy::kOverlap, kSmallCaps},
                                                            {SyncStrategy::kOverlap, {}}};
    for (const auto& [strategy, caps] : cases) {
      SCOPED_TRACE(testing::Message() << ddplab::dist::sync_strategy_name(strategy) << ", first bucket "
                                      << caps.first_bucket_bytes << " B, rank " << pg.rank());
      auto sync = make_grad_sync(strategy, pg, m->parameters(), caps);
      clear_grads(*m);
      synced_step(*sync, m, make_batch(pg.rank(), 0, 6, true));
      EXPECT_EQ(compare(grads(*m), want, 0.0), "");
      EXPECT_EQ(sync->last_step().collectives, static_cast<int64_t>(sync->buckets().size()));
    }
  });
}

TEST_P(GradSyncOracle, FasterStrategiesMatchPerParamOnAFloatModel) {
  const int world = GetParam();
  run_sync_ranks(world, [](ProcessGroup& pg) {
    TinyNet m;
    init_params(*m, false);
    const Batch batch = make_batch(pg.rank(), 1, 5, false);
    auto oracle = make_grad_sync(SyncStrategy::kPerParam, pg, m->parameters());
    clear_grads(*m);
    synced_step(*oracle, m, batch);
    const auto want = grads(*m);
    for (SyncStrategy s : {SyncStrategy::kBucketed, SyncStrategy::kOverlap}) {
      for (const BucketOptions& caps : {kSmallCaps, BucketOptions{}}) {
        SCOPED_TRACE(testing::Message() << ddplab::dist::sync_strategy_name(s) << ", first bucket "
                                        << caps.first_bucket_bytes << " B, rank " << pg.rank());
        auto sync = make_grad_sync(s, pg, m->parameters(), caps);
        for (int step = 0; step < 2; ++step) {  // twice: the hooks must re-arm
          clear_grads(*m);
          synced_step(*sync, m, batch);
          EXPECT_EQ(compare(grads(*m), want, 1e-6), "") << "step " << step;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GradSyncOracle, ::testing::Values(1, 2, 3, 4));

class GradSyncTraining : public ::testing::TestWithParam<int> {};

TEST_P(GradSyncTraining, SgdAndAdamEndWithThePerParamWeightsOnEveryRank) {
  const int world = GetParam();
  run_sync_ranks(world, [world](ProcessGroup& pg) {
    for (bool adam : {false, true}) {
      std::vector<torch::Tensor> oracle;
      for (SyncStrategy s : kAllStrategies) {
        SCOPED_TRACE(testing::Message() << ddplab::dist::sync_strategy_name(s) << (adam ? ", Adam" : ", SGD")
                                        << ", rank " << pg.rank());
        TinyNet m;
        init_params(*m, false);
        auto sync = make_grad_sync(s, pg, m->parameters(), kSmallCaps);
        std::unique_ptr<torch::optim::Optimizer> opt;
        if (adam) {
          opt = std::make_unique<torch::optim::Adam>(m->parameters(), torch::optim::AdamOptions(0.01));
        } else {
          opt = std::make_unique<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
        }
        for (int step = 0; step < 4; ++step) {
          clear_grads(*m);
          synced_step(*sync, m, make_batch(pg.rank(), step, 4, false));
          opt->step();
        }
        const auto w = values(*m);
        if (oracle.empty()) {
          oracle = w;
        } else {  // gradients within 1e-6 move the weights by a few float ulps at most
          EXPECT_EQ(compare(w, oracle, 1e-6, 1e-6), "");
        }
        // Every rank must hold bit-identical weights: they all applied the same averaged gradient.
        std::vector<torch::Tensor> flat;
        for (const auto& t : w) flat.push_back(t.flatten());
        const torch::Tensor mine = torch::cat(flat);
        std::vector<torch::Tensor> all(static_cast<size_t>(world));
        for (auto& t : all) t = torch::empty_like(mine);
        pg.allgather(all, mine);
        for (int r = 0; r < world; ++r) EXPECT_TRUE(torch::equal(all[static_cast<size_t>(r)], mine)) << "rank " << r;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GradSyncTraining, ::testing::Values(2, 4));

TEST(GradSyncCounts, OneCollectivePerBucketPerStep) {
  run_sync_ranks(2, [](ProcessGroup& pg) {
    TinyNet m;
    init_params(*m, false);
    const int64_t model_bytes = 4 * ddplab::count_parameters(*m);
    const std::pair<SyncStrategy, int64_t> cases[] = {{SyncStrategy::kPerParam, 7},
                                                      {SyncStrategy::kBucketed, 6},
                                                      {SyncStrategy::kOverlap, 6}};
    for (const auto& [strategy, collectives] : cases) {
      SCOPED_TRACE(ddplab::dist::sync_strategy_name(strategy));
      auto sync = make_grad_sync(strategy, pg, m->parameters(), kSmallCaps);
      EXPECT_EQ(static_cast<int64_t>(sync->buckets().size()), collectives);
      for (int step = 0; step < 3; ++step) {
        const auto before = pg.stats();
        clear_grads(*m);
        sync->before_backward();
        m->loss(make_batch(pg.rank(), step, 3, false)).backward();
        // Overlap starts every bucket inside backward (all parameters are used here); the others
        // have not communicated yet.
        EXPECT_EQ(pg.stats().ops[0].calls - before.ops[0].calls, strategy == SyncStrategy::kOverlap ? collectives : 0);
        sync->finish();
        const auto& after = pg.stats();
        EXPECT_EQ(after.ops[0].calls - before.ops[0].calls, collectives) << "step " << step;
        EXPECT_EQ(after.total_calls() - before.total_calls(), collectives) << "allreduce only";
        EXPECT_EQ(after.ops[0].bytes - before.ops[0].bytes, model_bytes);
        EXPECT_EQ(sync->last_step().collectives, collectives);
        EXPECT_EQ(sync->last_step().bytes, model_bytes);
        EXPECT_GE(sync->last_step().wait_seconds, 0.0);
      }
    }
  });
}

class GradSyncNoSync : public ::testing::TestWithParam<int> {};

TEST_P(GradSyncNoSync, AccumulatedMicroStepsEqualOneStepOnTheConcatenatedBatch) {
  const int world = GetParam();
  run_sync_ranks(world, [](ProcessGroup& pg) {
    TinyNet m;
    init_params(*m, false);
    std::vector<Batch> micro;
    for (int k = 0; k < 3; ++k) micro.push_back(make_batch(pg.rank(), k, 3, false));

    auto oracle = make_grad_sync(SyncStrategy::kPerParam, pg, m->parameters());
    clear_grads(*m);
    synced_step(*oracle, m, concat(micro));
    const auto want = grads(*m);

    for (SyncStrategy s : kAllStrategies) {
      SCOPED_TRACE(testing::Message() << ddplab::dist::sync_strategy_name(s) << ", rank " << pg.rank());
      auto sync = make_grad_sync(s, pg, m->parameters(), kSmallCaps);
      clear_grads(*m);
      const int64_t calls = pg.stats().total_calls();
      {
        auto guard = sync->no_sync();
        EXPECT_FALSE(sync->syncing());
        for (int k = 0; k < 2; ++k) {
          synced_step(*sync, m, micro[static_cast<size_t>(k)]);
          EXPECT_EQ(sync->last_step().collectives, 0);
        }
      }
      EXPECT_TRUE(sync->syncing());
      EXPECT_EQ(pg.stats().total_calls(), calls) << "no_sync must not communicate";
      synced_step(*sync, m, micro[2]);
      EXPECT_EQ(sync->last_step().collectives, static_cast<int64_t>(sync->buckets().size()));
      EXPECT_EQ(compare(grads(*m), want, 1e-5), "");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GradSyncNoSync, ::testing::Values(1, 2, 3));

class GradSyncUnused : public ::testing::TestWithParam<int> {};

TEST_P(GradSyncUnused, OverlapFinishesWhenSomeParametersGetNoGradient) {
  // "unused" never gets a gradient; "side" only on rank 0. Their buckets cannot complete during
  // backward, so finish() must launch them; if it did not, the ranks would wait for each other
  // until the timeout.
  const int world = GetParam();
  run_sync_ranks(
      world,
      [](ProcessGroup& pg) {
        TinyNet m(true);
        init_params(*m, false);
        const bool use_side = pg.rank() == 0;
        auto oracle = make_grad_sync(SyncStrategy::kPerParam, pg, m->parameters());
        for (const BucketOptions& caps : {kSmallCaps, BucketOptions{}}) {
          auto sync = make_grad_sync(SyncStrategy::kOverlap, pg, m->parameters(), caps);
          for (int step = 0; step < 2; ++step) {
            SCOPED_TRACE(testing::Message() << "first bucket " << caps.first_bucket_bytes << " B, step " << step
                                            << ", rank " << pg.rank());
            const Batch b = make_batch(pg.rank(), step, 4, false);
            clear_grads(*m);
            synced_step(*oracle, m, b, use_side);
            const auto want = grads(*m);
            clear_grads(*m);
            synced_step(*sync, m, b, use_side);
            EXPECT_EQ(compare(grads(*m), want, 1e-6), "");
            EXPECT_EQ(m->unused->weight.grad().abs().sum().item<float>(), 0.0f);
            EXPECT_GT(m->side->weight.grad().abs().sum().item<float>(), 0.0f) << "rank 0's gradient must arrive";
          }
        }
      },
      std::chrono::seconds(10));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GradSyncUnused, ::testing::Values(2, 3));

TEST(GradSyncDeepFM, OverlapAndBucketedMatchPerParamOnOneStep) {
  run_sync_ranks(2, [](ProcessGroup& pg) {
    ddplab::DeepFM model;
    ddplab::dist::broadcast_module(pg, *model, 0);  // construction drew different random weights
    const int64_t n = 4;
    const int64_t rows = ddplab::data::kTotalRows;
    const auto i = torch::arange(n * ddplab::data::kNumSparse, torch::kInt64);
    const torch::Tensor ids = torch::remainder(i * 7919 + pg.rank() * 104729, rows).view({n, ddplab::data::kNumSparse});
    const torch::Tensor dense =
        torch::sin(torch::arange(n * ddplab::data::kNumDense, torch::kFloat32) + 3.0f * static_cast<float>(pg.rank()))
            .view({n, ddplab::data::kNumDense});
    const torch::Tensor labels = torch::tensor({1.0f, 0.0f, 0.0f, 1.0f});

    std::vector<torch::Tensor> want;
    const std::pair<SyncStrategy, int64_t> cases[] = {{SyncStrategy::kPerParam, 12},
                                                      {SyncStrategy::kBucketed, 2},
                                                      {SyncStrategy::kOverlap, 2}};
    for (const auto& [strategy, collectives] : cases) {
      SCOPED_TRACE(testing::Message() << ddplab::dist::sync_strategy_name(strategy) << ", rank " << pg.rank());
      auto sync = make_grad_sync(strategy, pg, model->parameters());
      clear_grads(*model);
      sync->before_backward();
      torch::binary_cross_entropy_with_logits(model->forward(dense, ids), labels).backward();
      sync->finish();
      EXPECT_EQ(sync->last_step().collectives, collectives);
      EXPECT_EQ(sync->last_step().bytes, 4 * ddplab::count_parameters(*model));
      if (want.empty()) {
        want = grads(*model);
      } else {
        EXPECT_EQ(compare(grads(*model), want, 1e-6), "");
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// sparse: embedding tables synced by the rows each rank touched. TinyNet's emb (13 rows) counts as
// a table with sparse_min_rows 10 (fc1.w has 9 rows); sparse_max_density 1.0 keeps it on the row path even though a
// few samples touch most of its 13 rows.

const BucketOptions kRowCaps{64, 256, 10, 1.0};

class GradSyncSparse : public ::testing::TestWithParam<int> {};

TEST_P(GradSyncSparse, GivesExactlyTheMeanOfTheLocalGradients) {
  const int world = GetParam();
  run_sync_ranks(world, [world](ProcessGroup& pg) {
    TinyNet m;
    init_params(*m, true);
    std::vector<torch::Tensor> want;
    for (int r = 0; r < world; ++r) {
      clear_grads(*m);
      m->loss(make_batch(r, 0, 2, true)).backward();  // 2 samples: rows 0..12 only partly touched
      const auto g = grads(*m);
      if (want.empty()) {
        want = g;
      } else {
        for (size_t i = 0; i < want.size(); ++i) want[i] += g[i];
      }
    }
    for (auto& w : want) w.div_(world);
    auto sync = make_grad_sync(SyncStrategy::kSparse, pg, m->parameters(), kRowCaps);
    // Dense buckets first, then one entry per table (emb is parameter 0).
    ASSERT_EQ(sync->buckets().back().params, std::vector<size_t>{0});
    for (int step = 0; step < 2; ++step) {
      clear_grads(*m);
      synced_step(*sync, m, make_batch(pg.rank(), 0, 2, true));
      EXPECT_EQ(compare(grads(*m), want, 0.0), "") << "step " << step;
      // The dense buckets' allreduces, then 3 allgathers (counts, row ids, rows) for the table;
      // alone, a rank sends nothing for the table.
      EXPECT_EQ(sync->last_step().collectives, static_cast<int64_t>(sync->buckets().size()) - 1 + (world == 1 ? 0 : 3));
    }
  });
}

TEST_P(GradSyncSparse, TrainsLikePerParamWithBitIdenticalRanks) {
  const int world = GetParam();
  run_sync_ranks(world, [world](ProcessGroup& pg) {
    std::vector<torch::Tensor> oracle;
    for (SyncStrategy s : {SyncStrategy::kPerParam, SyncStrategy::kSparse}) {
      SCOPED_TRACE(testing::Message() << ddplab::dist::sync_strategy_name(s) << ", rank " << pg.rank());
      TinyNet m;
      init_params(*m, false);
      auto sync = make_grad_sync(s, pg, m->parameters(), kRowCaps);
      torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(0.01));
      for (int step = 0; step < 4; ++step) {
        clear_grads(*m);
        synced_step(*sync, m, make_batch(pg.rank(), step, 3, false));
        opt.step();
      }
      const auto w = values(*m);
      if (oracle.empty()) {
        oracle = w;
      } else {
        EXPECT_EQ(compare(w, oracle, 1e-6, 1e-6), "");
      }
      std::vector<torch::Tensor> flat;
      for (const auto& t : w) flat.push_back(t.flatten());
      const torch::Tensor mine = torch::cat(flat);
      std::vector<torch::Tensor> all(static_cast<size_t>(world));
      for (auto& t : all) t = torch::empty_like(mine);
      pg.allgather(all, mine);
      for (int r = 0; r < world; ++r) EXPECT_TRUE(torch::equal(all[static_cast<size_t>(r)], mine)) << "rank " << r;
    }
  });
}

// The dense gradients of the bucketed, overlap and sparse rungs live in their buckets (gradient as
// bucket view): backward adds into them, and the average is left there. Whatever the training loop
// does to a gradient between steps — drop it (2.x's zero_grad, the one-pass Adam), zero it in place
// (by hand, or torch's zero_grad in 1.13), accumulate micro-steps outside the sync, replace it
// after backward — the result must be the per-param rung's, exactly (integer gradients). "side"
// and "unused" get no gradient: zeros.
void dense_gradients_live_in_the_buckets(ProcessGroup& pg, SyncStrategy strategy) {
  TinyNet oracle_net(true), net(true);
  init_params(*oracle_net, true);
  init_params(*net, true);
  auto oracle = make_grad_sync(SyncStrategy::kPerParam, pg, oracle_net->parameters());
  auto sync = make_grad_sync(strategy, pg, net->parameters(), kRowCaps);
  torch::optim::SGD oracle_opt(oracle_net->parameters(), 0.1), opt(net->parameters(), 0.1);
  const auto zero_by_hand = [](TinyNet& m) {
    for (auto& p : m->parameters()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  };
  // Each case runs the same loop on both models, then compares their gradients.
  const auto both = [&](const std::string& what, const std::function<void(TinyNet&, GradSync&)>& loop) {
    SCOPED_TRACE(testing::Message() << ddplab::dist::sync_strategy_name(strategy) << ": " << what << ", rank "
                                    << pg.rank());
    loop(oracle_net, *oracle);
    loop(net, *sync);
    EXPECT_EQ(compare(grads(*net), grads(*oracle_net), 0.0), "");
  };
  both("gradients set to none", [&](TinyNet& m, GradSync& s) {
    clear_grads(*m);
    synced_step(s, m, make_batch(pg.rank(), 0, 3, true));
  });
  // After the step the gradients of a bucket lie end to end in its buffer, in the bucket's order.
  // (Separately allocated tensors cannot: LibTorch's CPU allocator aligns to 64 bytes.)
  const auto end_to_end = [](const std::vector<torch::Tensor>& params, const std::vector<size_t>& bucket) {
    for (size_t k = 1; k < bucket.size(); ++k) {
      const torch::Tensor& a = params[bucket[k - 1]].grad();
      const torch::Tensor& b = params[bucket[k]].grad();
      if (static_cast<const char*>(a.data_ptr()) + a.numel() * 4 != static_cast<const char*>(b.data_ptr()))
        return false;
    }
    return true;
  };
  int shared = 0;
  for (const auto& bucket : sync->buckets()) {
    if (bucket.params.size() < 2) continue;
    ++shared;
    EXPECT_TRUE(end_to_end(net->parameters(), bucket.params));
    EXPECT_FALSE(end_to_end(oracle_net->parameters(), bucket.params));
  }
  EXPECT_GT(shared, 0) << "kRowCaps puts several tensors in a bucket";
  // The buffers hold the last average here: zeroing must reach them.
  both("gradients zeroed in place by hand", [&](TinyNet& m, GradSync& s) {
    zero_by_hand(m);
    synced_step(s, m, make_batch(pg.rank(), 1, 3, true));
  });
  // 1.13: detach_() and zero_() in place (an autograd view of the buffer would refuse
  // detach_()); 2.x: set to none.
  both("torch's zero_grad", [&](TinyNet& m, GradSync& s) {
    (m.ptr() == net.ptr() ? opt : oracle_opt).zero_grad();
    synced_step(s, m, make_batch(pg.rank(), 2, 3, true));
  });
  both("a micro-step accumulated outside the sync", [&](TinyNet& m, GradSync& s) {
    clear_grads(*m);
    {
      auto guard = s.no_sync();
      synced_step(s, m, make_batch(pg.rank(), 3, 2, true));
    }
    synced_step(s, m, make_batch(pg.rank(), 4, 2, true));
  });
  both("a micro-step accumulated into the buffers", [&](TinyNet& m, GradSync& s) {
    zero_by_hand(m);
    {
      auto guard = s.no_sync();
      synced_step(s, m, make_batch(pg.rank(), 5, 2, true));
    }
    synced_step(s, m, make_batch(pg.rank(), 6, 2, true));
  });
  // The overlap rung sends a bucket during backward: a gradient replaced after backward is not
  // what it sent (as under PyTorch's DDP), so only the rungs that send after backward take it.
  if (strategy == SyncStrategy::kOverlap) return;
  both("a gradient replaced after backward", [&](TinyNet& m, GradSync& s) {
    zero_by_hand(m);
    s.before_backward();
    m->loss(make_batch(pg.rank(), 7, 3, true)).backward();
    m->fc1->weight.mutable_grad() = m->fc1->weight.grad() * 2.0f;  // out of place, as a clipping might be
    s.finish();
  });
}

TEST_P(GradSyncSparse, DenseGradientsLiveInTheBucketsWhateverTheLoopDoesToThem) {
  run_sync_ranks(GetParam(), [](ProcessGroup& pg) { dense_gradients_live_in_the_buckets(pg, SyncStrategy::kSparse); });
}

TEST_P(GradSyncSparse, BucketedAndOverlapGradientsLiveInTheBucketsToo) {
  run_sync_ranks(GetParam(), [](ProcessGroup& pg) {
    for (SyncStrategy s : {SyncStrategy::kBucketed, SyncStrategy::kOverlap}) dense_gradients_live_in_the_buckets(pg, s);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GradSyncSparse, ::testing::Values(1, 2, 3, 4));

TEST(GradSyncSparseTables, DenseRowsFallBackToOneAllreduce) {
  run_sync_ranks(2, [](ProcessGroup& pg) {
    TinyNet m;
    init_params(*m, true);
    const BucketOptions always_dense{64, 256, 10, 0.0};
    auto sync = make_grad_sync(SyncStrategy::kSparse, pg, m->parameters(), always_dense);
    auto oracle = make_grad_sync(SyncStrategy::kPerParam, pg, m->parameters());
    const Batch b = make_batch(pg.rank(), 0, 4, true);
    clear_grads(*m);
    synced_step(*oracle, m, b);
    const auto want = grads(*m);
    clear_grads(*m);
    synced_step(*sync, m, b);
    EXPECT_EQ(compare(grads(*m), want, 0.0), "");
    // counts allgather + one allreduce of the whole table, after the dense buckets.
    EXPECT_EQ(sync->last_step().collectives, static_cast<int64_t>(sync->buckets().size()) - 1 + 2);
  });
}

TEST(GradSyncSparseTables, DeepFMMovesAFractionOfTheDenseBytes) {
  run_sync_ranks(2, [](ProcessGroup& pg) {
    ddplab::DeepFM model;
    ddplab::dist::broadcast_module(pg, *model, 0);
    const int64_t n = 64;
    const int64_t rows = ddplab::data::kTotalRows;
    const auto i = torch::arange(n * ddplab::data::kNumSparse, torch::kInt64);
    const torch::Tensor ids = torch::remainder(i * 7919 + pg.rank() * 104729, rows).view({n, ddplab::data::kNumSparse});
    const torch::Tensor dense =
        torch::sin(torch::arange(n * ddplab::data::kNumDense, torch::kFloat32) + 3.0f * static_cast<float>(pg.rank()))
            .view({n, ddplab::data::kNumDense});
    const torch::Tensor labels = torch::remainder(torch::arange(n, torch::kFloat32), 2.0f);
    std::vector<torch::Tensor> want;
    for (SyncStrategy s : {SyncStrategy::kPerParam, SyncStrategy::kSparse}) {
      SCOPED_TRACE(ddplab::dist::sync_strategy_name(s));
      auto sync = make_grad_sync(s, pg, model->parameters());
      clear_grads(*model);
      sync->before_backward();
      torch::binary_cross_entropy_with_logits(model->forward(dense, ids), labels).backward();
      sync->finish();
      if (want.empty()) {
        want = grads(*model);
        continue;
      }
      // Exactly equal at 2 ranks: a + b is the same float whichever rank adds it.
      EXPECT_EQ(compare(grads(*model), want, 0.0), "");
      EXPECT_LT(sync->last_step().bytes, 4 * ddplab::count_parameters(*model) / 4);
    }
  });
}

// Row-sparse embedding gradients (DeepFMOptions::sparse_gradients) through the sparse rung, against
// the same rung on dense gradients (same row sums, in rank order) and the per-param oracle: the
// same averaged gradient — bit for bit as the dense sparse rung, within 1e-6 of per-param (whose
// allreduce may add in another order) — in two allgathers for both tables after the dense
// buckets; under the one-pass Adam the weights of the dense rung under torch's Adam, bit-identical
// on every rank.
class GradSyncRowSparse : public ::testing::TestWithParam<int> {};

TEST_P(GradSyncRowSparse, AveragesLikeTheDenseRungInTwoAllgathersAndTrainsAlike) {
  const int world = GetParam();
  run_sync_ranks(world, [world](ProcessGroup& pg) {
    ddplab::DeepFMOptions sparse_opts;
    sparse_opts.sparse_gradients = true;
    ddplab::DeepFM oracle_model, dense_model;
    ddplab::DeepFM sparse_model(sparse_opts);
    ddplab::dist::broadcast_module(pg, *dense_model, 0);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < dense_model->parameters().size(); ++i) {
        sparse_model->parameters()[i].copy_(dense_model->parameters()[i]);
        oracle_model->parameters()[i].copy_(dense_model->parameters()[i]);
      }
    }
    auto oracle = make_grad_sync(SyncStrategy::kPerParam, pg, oracle_model->parameters());
    auto dense_rung = make_grad_sync(SyncStrategy::kSparse, pg, dense_model->parameters());
    auto sync = make_grad_sync(SyncStrategy::kSparse, pg, sparse_model->parameters());
    torch::optim::Adam reference(dense_model->parameters(), torch::optim::AdamOptions(1e-2));
    ddplab::optim::FusedAdam fused(sparse_model->parameters(), torch::optim::AdamOptions(1e-2));
    const int64_t n = 32;
    const int64_t rows = ddplab::data::kTotalRows;
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE(testing::Message() << "rank " << pg.rank() << ", step " << step);
      // Rows repeated within a rank (i % (97 + 13 x rank): each rank a different number of
      // distinct rows, so the packed rows of all but the last rank are padded) and shared across
      // ranks (the same pattern, shifted on every other rank).
      const auto i = torch::arange(n * ddplab::data::kNumSparse, torch::kInt64);
      const torch::Tensor ids =
          torch::remainder(torch::remainder(i, 97 + 13 * pg.rank()) * 7919 + (pg.rank() + step) % 2 * 104729, rows)
              .view({n, ddplab::data::kNumSparse});
      const torch::Tensor dense = torch::sin(torch::arange(n * ddplab::data::kNumDense, torch::kFloat32) +
                                             3.0f * static_cast<float>(pg.rank() + step))
                                      .view({n, ddplab::data::kNumDense});
      const torch::Tensor labels = torch::remainder(torch::arange(n, torch::kFloat32) + pg.rank(), 2.0f);
      const std::pair<ddplab::DeepFM*, GradSync*> runs[] = {{&oracle_model, oracle.get()},
                                                            {&dense_model, dense_rung.get()},
                                                            {&sparse_model, sync.get()}};
      for (const auto& [m, s] : runs) {
        for (auto& p : (*m)->parameters()) p.mutable_grad() = torch::Tensor();
        s->before_backward();
        torch::binary_cross_entropy_with_logits((*m)->forward(dense, ids), labels).backward();
        s->finish();
      }
      // The dense buckets (all entries but the two tables'), then 2 allgathers for both tables.
      EXPECT_EQ(sync->last_step().collectives, static_cast<int64_t>(sync->buckets().size()) - 2 + 2);
      std::vector<torch::Tensor> got;
      for (const auto& p : sparse_model->parameters())
        got.push_back(p.grad().is_sparse() ? p.grad().to_dense() : p.grad());
      EXPECT_EQ(compare(got, grads(*dense_model), 0.0), "");
      EXPECT_EQ(compare(got, grads(*oracle_model), 1e-6, 1e-5), "");
      reference.step();
      fused.step();
      EXPECT_EQ(compare(values(*sparse_model), values(*dense_model), 1e-6, 1e-6), "");
      {
        std::vector<torch::Tensor> flat;
        for (const auto& t : values(*sparse_model)) flat.push_back(t.flatten());
        const torch::Tensor mine = torch::cat(flat);
        std::vector<torch::Tensor> all(static_cast<size_t>(world));
        for (auto& t : all) t = torch::empty_like(mine);
        pg.allgather(all, mine);
        for (int r = 0; r < world; ++r) EXPECT_TRUE(torch::equal(all[static_cast<size_t>(r)], mine)) << "rank " << r;
      }
      // Every step starts again from one set of weights: the two Adams agree to float rounding,
      // not bit for bit, and Adam turns a 1-ulp difference in a near-zero gradient into a step of
      // up to lr, so the next step's gradients would not be comparable exactly.
      torch::NoGradGuard no_grad;
      for (size_t k = 0; k < oracle_model->parameters().size(); ++k) {
        oracle_model->parameters()[k].copy_(dense_model->parameters()[k]);
        sparse_model->parameters()[k].copy_(dense_model->parameters()[k]);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GradSyncRowSparse, ::testing::Values(2, 3));

#else
TEST(GradSyncTransport, NeedsGloo) { GTEST_SKIP() << "this LibTorch build has no Gloo backend"; }
#endif

}  // namespace

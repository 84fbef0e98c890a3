// The scaling forecast's model (forecast.h): the ring formula and its fit, the link table, and
// the step forecast of each rung against hand-computed figures.
#include "ddplab/forecast.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "ddplab/dist/grad_sync.h"
#include "ddplab/error.h"

namespace ddplab::forecast {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Forecast, AllreduceAndAllgatherAreTheRingFormulas) {
  const Ring r{1e-5, 1e9};
  EXPECT_EQ(allreduce_seconds(r, 1, 1e6), 0.0);
  // 2(n-1) a + 2(n-1)/n S/B at n = 4: 6 x 10 us + 1.5 x 1 ms.
  EXPECT_NEAR(allreduce_seconds(r, 4, 1e6), 6e-5 + 1.5e-3, 1e-15);
  // (n-1)(a + S/B) at n = 4 for 1 kB a rank.
  EXPECT_NEAR(allgather_seconds(r, 4, 1e3), 3 * (1e-5 + 1e-6), 1e-15);
  EXPECT_EQ(allgather_seconds(r, 1, 1e3), 0.0);
}

TEST(Forecast, TheFitRecoversTheRingThatMadeTheTimings) {
  for (int n : {2, 4, 8}) {
    const Ring truth{37e-6, 2.5e9};
    std::vector<Timing> t;
    for (double bytes = 4; bytes <= 64.0 * 1024 * 1024; bytes *= 4)
      t.push_back({bytes, allreduce_seconds(truth, n, bytes)});
    const Fit f = fit_ring(t, n);
    EXPECT_NEAR(f.ring.latency_s / truth.latency_s, 1.0, 1e-9) << n << " ranks";
    EXPECT_NEAR(f.ring.bytes_per_s / truth.bytes_per_s, 1.0, 1e-9) << n << " ranks";
    EXPECT_LT(f.worst_relative_error, 1e-9);
    EXPECT_EQ(f.ranks, n);
  }
}

TEST(Forecast, OneOutlierDoesNotPullTheFit) {
  // A 64 KiB call that happened to take a quarter of the time: the other sizes keep the line.
  const Ring truth{700e-6, 1.3e9};
  std::vector<Timing> t;
  for (double bytes = 4; bytes <= 64.0 * 1024 * 1024; bytes *= 4) {
    t.push_back({bytes, allreduce_seconds(truth, 2, bytes) * (bytes == 65536 ? 0.25 : 1.0)});
  }
  const Fit f = fit_ring(t, 2);
  EXPECT_NEAR(f.ring.latency_s / truth.latency_s, 1.0, 0.01);
  EXPECT_NEAR(f.ring.bytes_per_s / truth.bytes_per_s, 1.0, 0.01);
  EXPECT_EQ(f.worst_bytes, 65536);
}

TEST(Forecast, TheFitWeighsSmallMessagesAsMuchAsLargeOnes) {
  // 10 % noise, alternating: an unweighted fit would let the 64 MiB point swamp the latency.
  const Ring truth{500e-6, 1e9};
  std::vector<Timing> t;
  int i = 0;
  for (double bytes = 4; bytes <= 64.0 * 1024 * 1024; bytes *= 4, ++i) {
    t.push_back({bytes, allreduce_seconds(truth, 2, bytes) * (i % 2 ? 1.1 : 0.9)});
  }
  const Fit f = fit_ring(t, 2);
  EXPECT_NEAR(f.ring.latency_s / truth.latency_s, 1.0, 0.12);
  EXPECT_NEAR(f.ring.bytes_per_s / truth.bytes_per_s, 1.0, 0.12);
  // Every point within the noise of its line (9/11 - 1 from a point 10 % low to one 10 % high).
  EXPECT_LT(f.worst_relative_error, 0.23);
  EXPECT_GT(f.worst_relative_error, 0.05);
}

TEST(Forecast, TimingsThatCannotBeFittedAreNamedErrors) {
  EXPECT_NE(error_of([] { fit_ring({{1024, 1e-3}, {1024, 2e-3}}, 2); }).find("at least two sizes"), std::string::npos);
  EXPECT_NE(error_of([] { fit_ring({{4, 1e-3}, {1 << 20, 2e-3}}, 1); }).find("2 or more ranks"), std::string::npos);
  // A line with a positive latency and bandwidth: no fallback.
  EXPECT_TRUE(fit_ring({{4, 1e-3}, {1 << 20, 2e-3}}, 2).fallback.empty());
  EXPECT_NE(error_of([] { fit_ring({{4, 0.0}, {1 << 20, 1e-3}}, 2); }).find("not a timing"), std::string::npos);
}

TEST(Forecast, TimingsWithoutALineStillGiveAPositiveRingAndSaySo) {
  // Seen on the 2-core VM under load: small messages as slow as a megabyte's, 1 MiB faster than 1 KiB.
  const std::vector<Timing> t = {{4, 1.8e-3}, {1024, 1.9e-3}, {4096, 1.6e-3}, {65536, 0.9e-3}, {1 << 20, 0.95e-3}};
  const Fit f = fit_ring(t, 2);
  EXPECT_FALSE(f.fallback.empty());
  EXPECT_NEAR(f.ring.latency_s, 1.8e-3 / 2, 1e-12);            // the median of the <= 4 KiB ones, / 2(n-1)
  EXPECT_NEAR(f.ring.bytes_per_s, (1 << 20) / 0.95e-3, 1e-3);  // the largest message's bus bandwidth (n = 2)
  EXPECT_NE(f.fallback.find("B from the largest (1048576 B)"), std::string::npos) << f.fallback;
}

TEST(Forecast, TheKitsLinksAreSourcedAndNVLinkStaysInOneNode) {
  const auto& links = kit_links();
  ASSERT_EQ(links.size(), 3u);
  for (const auto& l : links) {
    EXPECT_GT(l.ring.latency_s, 0) << l.name;
    EXPECT_GT(l.ring.bytes_per_s, 0) << l.name;
    EXPECT_GT(l.latency_source.size(), 20u) << l.name;
    EXPECT_GT(l.bandwidth_source.size(), 20u) << l.name;
  }
  EXPECT_EQ(find_link(links, "nvlink-v100").max_devices, 8);
  EXPECT_NEAR(find_link(links, "ib-100g").ring.bytes_per_s, 12.2e9, 1);
  EXPECT_FALSE(find_link(links, "ib-100g").estimate);
  EXPECT_NE(error_of([&] { find_link(links, "token-ring"); }).find("the table has: nvlink-v100, ib-100g, 25gbe"),
            std::string::npos);
}

TEST(Forecast, ALinkTableErrorNamesFileLineAndKey) {
  const std::string good =
      "[[link]]\nname = \"x\"\ndescribes = \"d\"\nlatency_us = 1\nlatency_source = \"s\"\ngb_per_s = 1\n"
      "bandwidth_source = \"s\"\nmax_devices = 0\nestimate = false\n";
  EXPECT_EQ(parse_links(good, "t.toml").at(0).ring.latency_s, 1e-6);
  EXPECT_EQ(error_of([&] { parse_links(good + "colour = 1\n", "t.toml"); }).substr(0, 40),
            "t.toml:10: link 'x': unknown key 'colour");
  EXPECT_NE(error_of([&] { parse_links(good + good, "t.toml"); }).find("t.toml:10: link 'x' is listed twice"),
            std::string::npos);
  std::string slow = good;
  slow.replace(slow.find("gb_per_s = 1"), 12, "gb_per_s = 0");
  EXPECT_NE(error_of([&] { parse_links(slow, "t.toml"); }).find("t.toml:1: link 'x': gb_per_s must be a number > 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_links("", "t.toml"); }).find("no [[link]] entries"), std::string::npos);
}

Compute some_compute() {
  Compute c;
  c.per_sample_s = 60e-6;
  c.backward_per_sample_s = 30e-6;
  c.per_step_s = 8e-3;
  return c;
}

TEST(Forecast, OneRankIsComputeOnly) {
  const Model m = deepfm_model(16);
  const auto f = predict(m, some_compute(), Ring{1e-3, 1e9}, 1, 512, Rung::kBucketed);
  EXPECT_EQ(f.comm_s, 0);
  EXPECT_EQ(f.collectives, 0);
  EXPECT_NEAR(f.step_s, 512 * 60e-6 + 8e-3, 1e-12);
  EXPECT_NEAR(f.efficiency, 1.0, 1e-12);
  EXPECT_NEAR(f.samples_per_s, 512 / f.step_s, 1e-9);
}

TEST(Forecast, BucketedIsOneRingAllReducePerDdpBucket) {
  const Model m = deepfm_model(16);
  EXPECT_EQ(m.parameters(), 3338913);
  const Ring ring{1e-3, 1e9};
  const auto f = predict(m, some_compute(), ring, 2, 512, Rung::kBucketed);
  std::vector<torch::Tensor> params;
  for (const auto& s : m.shapes) params.push_back(torch::empty(s));
  const auto buckets = dist::assign_buckets(params);
  double comm = 0, bytes = 0;
  for (const auto& b : buckets) {
    comm += allreduce_seconds(ring, 2, static_cast<double>(b.bytes));
    bytes += static_cast<double>(b.bytes);
  }
  EXPECT_EQ(f.collectives, static_cast<int64_t>(buckets.size()));
  EXPECT_DOUBLE_EQ(f.bytes, m.gradient_bytes());
  EXPECT_DOUBLE_EQ(f.bytes, bytes);
  EXPECT_NEAR(f.comm_s, comm, 1e-12);
  EXPECT_EQ(f.exposed_s, f.comm_s);
  EXPECT_NEAR(f.efficiency, f.compute_s / (f.compute_s + f.comm_s), 1e-12);
}

TEST(Forecast, OverlapHidesBehindBackwardButNeverTheLastBucket) {
  const Model m = deepfm_model(16);
  const Ring ring{1e-4, 1e9};
  const auto dense = predict(m, some_compute(), ring, 4, 512, Rung::kBucketed);
  const auto over = predict(m, some_compute(), ring, 4, 512, Rung::kOverlap);
  EXPECT_EQ(over.comm_s, dense.comm_s);
  EXPECT_LT(over.exposed_s, dense.exposed_s);
  Compute long_backward = some_compute();
  long_backward.backward_per_sample_s = 1.0;  // backward far longer than any collective
  const auto hidden = predict(m, long_backward, ring, 4, 512, Rung::kOverlap);
  std::vector<torch::Tensor> params;
  for (const auto& s : m.shapes) params.push_back(torch::empty(s));
  const auto last = static_cast<double>(dist::assign_buckets(params).back().bytes);
  EXPECT_NEAR(hidden.exposed_s, allreduce_seconds(ring, 4, last), 1e-12);
}

TEST(Forecast, SparseAllGathersRowsUntilTheyCouldCoverHalfATable) {
  Model m = deepfm_model(16);
  m.rows_touched = 12000;
  const Ring ring{1e-4, 1e9};
  const auto two = predict(m, some_compute(), ring, 2, 512, Rung::kSparse);
  // Two tables ([167394, 16] and [167394, 1]), each: count, ids, rows; plus the MLP's buckets.
  std::vector<torch::Tensor> mlp;
  for (const auto& s : m.shapes) {
    if (!(s.size() == 2 && s[0] >= 4096)) mlp.push_back(torch::empty(s));
  }
  const auto mlp_buckets = dist::assign_buckets(mlp);
  EXPECT_EQ(two.collectives, static_cast<int64_t>(mlp_buckets.size()) + 6);
  double mlp_bytes = 0;
  for (const auto& b : mlp_buckets) mlp_bytes += static_cast<double>(b.bytes);
  EXPECT_DOUBLE_EQ(two.bytes, mlp_bytes + 2 * 8 + 12000 * 8 * 2 + 12000 * (16 + 1) * 4.0);
  EXPECT_TRUE(two.note.empty());
  // At 8 ranks, 8 x 12,000 rows could pass half of 167,394: both tables go dense.
  const auto eight = predict(m, some_compute(), ring, 8, 512, Rung::kSparse);
  EXPECT_EQ(eight.collectives, static_cast<int64_t>(mlp_buckets.size()) + 4);
  EXPECT_DOUBLE_EQ(eight.bytes, mlp_bytes + 2 * 8 + 167394.0 * 17 * 4);
  EXPECT_NE(eight.note.find("[167394 x 16], [167394 x 1] all-reduced densely"), std::string::npos) << eight.note;
}

TEST(Forecast, RanksThatOutnumberTheCoresTakeTurnsAtTheWorkButNotAtWaiting) {
  const Model m = deepfm_model(16);
  const Machine four_on_two = Machine::cpu(4, 2);
  EXPECT_EQ(four_on_two.slowdown, 2.0);
  EXPECT_FALSE(four_on_two.overlap_hides);
  const auto a = predict(m, some_compute(), Ring{1e-4, 1e9}, 4, 512, Rung::kBucketed);
  const auto b = predict(m, some_compute(), Ring{1e-4, 1e9}, 4, 512, Rung::kBucketed, four_on_two);
  EXPECT_NEAR(b.compute_s, 2 * a.compute_s, 1e-12);
  // The bandwidth terms take turns, the latency terms (2 buckets, 6 ring steps each) do not.
  const double latency = 2 * 6 * 1e-4;
  EXPECT_NEAR(b.comm_s, latency + 2 * (a.comm_s - latency), 1e-12);
  EXPECT_NEAR(b.step_s, b.compute_s + b.comm_s, 1e-12);
  EXPECT_EQ(Machine::cpu(2, 2).slowdown, 1.0);
  EXPECT_TRUE(Machine::cpu(1, 2).overlap_hides);
}

TEST(Forecast, OverlapHidesNothingWithoutACoreForTheCommunication) {
  const Model m = deepfm_model(16);
  const Ring ring{1e-4, 1e9};
  const auto dense = predict(m, some_compute(), ring, 2, 512, Rung::kBucketed, Machine::cpu(2, 2));
  const auto over = predict(m, some_compute(), ring, 2, 512, Rung::kOverlap, Machine::cpu(2, 2));
  EXPECT_EQ(over.exposed_s, dense.exposed_s);
  EXPECT_LT(predict(m, some_compute(), ring, 2, 512, Rung::kOverlap).exposed_s, dense.exposed_s);
}

TEST(Forecast, TheJobsOwnSmallCollectivesCostLatencyEachStep) {
  Model m = deepfm_model(16);
  const Ring ring{1e-4, 1e9};
  const auto without = predict(m, some_compute(), ring, 512, 512, Rung::kBucketed);
  m.control_allreduces = 1;
  const auto with = predict(m, some_compute(), ring, 512, 512, Rung::kBucketed);
  EXPECT_EQ(with.collectives, without.collectives + 1);
  // 2 x 511 ring steps of 100 us: 102 ms a step, for 8 bytes.
  EXPECT_NEAR(with.exposed_s - without.exposed_s, 2 * 511 * 1e-4 + 2.0 * 511 / 512 * 8 / 1e9, 1e-12);
}

TEST(Forecast, SparseLocalWorkIsExposedAndGrowsWithTheRanksWhoseRowsAreAdded) {
  Model m = deepfm_model(16);
  m.rows_touched = 1000;
  const Ring ring{1e-4, 1e9};
  const auto bare = predict(m, some_compute(), ring, 2, 512, Rung::kSparse);
  m.sparse_work = {3e-3, 1e-3};
  const auto worked = predict(m, some_compute(), ring, 2, 512, Rung::kSparse);
  EXPECT_NEAR(worked.exposed_s - bare.exposed_s, 3e-3 + 2 * 1e-3, 1e-12);
  EXPECT_EQ(worked.comm_s, bare.comm_s);  // local work, not communication
  const SparseWork measured = measure_sparse_work(m, 1);
  EXPECT_GT(measured.scan_s, 0);
  EXPECT_GT(measured.per_rank_s, 0);
}

TEST(Forecast, RowSparseGradientsTravelInTwoAllGathersWithTheirOwnWork) {
  Model m = deepfm_model(16);
  m.rows_touched = 1000;
  m.lookups = 13000;
  m.sparse_work = {3e-3, 1e-3};  // the search of dense gradients: not this path's work
  const Ring ring{1e-4, 1e9};
  const auto dense_grads = predict(m, some_compute(), ring, 2, 512, Rung::kSparse);
  m.row_sparse = true;
  const auto bare = predict(m, some_compute(), ring, 2, 512, Rung::kSparse);
  int64_t tables = 0;
  for (const auto& s : m.shapes) tables += s.size() == 2 && s[0] >= 4096 ? 1 : 0;
  ASSERT_EQ(tables, 2) << "the course's DeepFM has two tables (the embeddings and the first-order weights)";
  // Per table an all-gather of its count, its ids and its rows before; now two in all.
  EXPECT_EQ(dense_grads.collectives - bare.collectives, 3 * tables - 2);
  // The same counts and rows, the ids as 4 bytes instead of 8.
  EXPECT_NEAR(dense_grads.bytes - bare.bytes, 4.0 * 1000 * static_cast<double>(tables), 1e-6);
  m.row_sparse_work = {2e-3, 5e-4};
  const auto worked = predict(m, some_compute(), ring, 2, 512, Rung::kSparse);
  EXPECT_NEAR(worked.exposed_s - bare.exposed_s, 2e-3 + 2 * 5e-4, 1e-12) << "its own work, not the dense search's";
  EXPECT_EQ(worked.comm_s, bare.comm_s);
  EXPECT_EQ(predict(m, some_compute(), ring, 2, 512, Rung::kBucketed).collectives,
            predict(deepfm_model(16), some_compute(), ring, 2, 512, Rung::kBucketed).collectives)
      << "the other rungs send dense gradients whatever the optimizer";
  // A table that all ranks' rows could cover half of is all-reduced, as before.
  m.rows_touched = 1e6;
  const auto crowded = predict(m, some_compute(), ring, 2, 512, Rung::kSparse);
  EXPECT_NE(crowded.note.find("all-reduced densely"), std::string::npos) << crowded.note;

  // Measured by running the runtime's own rung at 2 and 4 stand-in ranks.
  m.rows_touched = 1000;
  const SparseWork measured = measure_row_sparse_work(m, 1);
  EXPECT_GT(measured.scan_s + measured.per_rank_s, 0);
}

TEST(Forecast, TheComputeOfOneRankIsItsMedianStepSplitByPhase) {
  nlohmann::json r = {{"world_size", 1},
                      {"config", {{"batch", 100}}},
                      {"phases",
                       {{"wall", 2.0},
                        {"steps", 10},
                        {"forward", 0.4},
                        {"backward", 0.8},
                        {"data_wait", 0.0},
                        {"optimizer", 0.6},
                        {"step_median", 0.1}}}};
  // Mean step 0.2 s, median 0.1 s: per step forward 0.02, backward 0.04, the rest 0.04.
  const Compute c = compute_from_report(r);
  EXPECT_NEAR(c.per_sample_s, 0.06 / 100, 1e-15);
  EXPECT_NEAR(c.backward_per_sample_s, 0.04 / 100, 1e-15);
  EXPECT_NEAR(c.per_step_s, 0.04, 1e-15);
  EXPECT_NEAR(c.step_seconds(100), 0.1, 1e-15);
  r["world_size"] = 2;
  EXPECT_NE(error_of([&] { compute_from_report(r); }).find("this report is of 2 ranks"), std::string::npos);
}

TEST(Forecast, AnEpochCostsItsDeviceHours) {
  StepForecast f;
  f.ranks = 8;
  f.samples_per_s = 1000;
  // 3.6 M samples at 1,000/s: one hour of 8 devices at $3.06 a device-hour.
  EXPECT_NEAR(epoch_usd(f, 3.6e6, 3.06), 8 * 3.06, 1e-9);
  EXPECT_NEAR(compute_from_throughput(3500).step_seconds(256), 256.0 / 3500, 1e-15);
  EXPECT_NEAR(relative_error(115, 100), 0.15, 1e-12);
}

}  // namespace
}  // namespace ddplab::forecast

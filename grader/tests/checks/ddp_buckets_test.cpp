// DDP's bucket layout as the grader recomputes it (ddp_buckets.h), against layouts worked out by
// hand: the course's DeepFM at DDP's default caps, caps of 1 byte, a tensor larger than its cap,
// mixed dtypes and devices (where the launch order is not the order buckets close), no parameters.
#include "../../src/checks/ddp_buckets.h"

#include <gtest/gtest.h>

namespace ddplab::grader::checks {
namespace {

LayoutParam f32(const std::string& name, uint64_t bytes) { return {name, bytes, "float32", "cpu"}; }

/// The buckets as lists of parameter names (in the order they joined), and their bytes.
std::vector<std::pair<std::vector<std::string>, uint64_t>> named(const std::vector<LayoutParam>& params,
                                                                 const std::vector<LayoutBucket>& buckets) {
  std::vector<std::pair<std::vector<std::string>, uint64_t>> out;
  for (const auto& b : buckets) {
    std::vector<std::string> names;
    for (size_t i : b.params) names.push_back(params.at(i).name);
    out.emplace_back(names, b.bytes);
  }
  return out;
}

using Named = std::vector<std::pair<std::vector<std::string>, uint64_t>>;

/// The course's DeepFM (embedding_dim 16, 3 hidden layers of 400), in registration order.
std::vector<LayoutParam> deepfm() {
  return {f32("embedding.weight", 167394 * 16 * 4),
          f32("first_order.weight", 167394 * 4),
          f32("dense_linear.weight", 13 * 4),
          f32("dense_linear.bias", 4),
          f32("mlp.0.weight", 429 * 400 * 4),
          f32("mlp.0.bias", 400 * 4),
          f32("mlp.2.weight", 400 * 400 * 4),
          f32("mlp.2.bias", 400 * 4),
          f32("mlp.4.weight", 400 * 400 * 4),
          f32("mlp.4.bias", 400 * 4),
          f32("mlp.6.weight", 400 * 4),
          f32("mlp.6.bias", 4)};
}

TEST(DdpBuckets, DeepFMAtDDPsDefaultCaps) {
  // Walking back from mlp.6.bias: 4 + 1,600 + 1,600 + 640,000 + 1,600 = 644,804 bytes, under 1 MiB;
  // mlp.2.weight takes it to 1,284,804 >= 1,048,576 and closes it. The rest, 12,070,848 bytes, stays
  // under 25 MiB and is closed at the end.
  const auto p = deepfm();
  const auto layout = ddp_bucket_layout(p, 1 << 20, 25 << 20);
  EXPECT_EQ(named(p, layout),
            (Named{{{"mlp.6.bias", "mlp.6.weight", "mlp.4.bias", "mlp.4.weight", "mlp.2.bias", "mlp.2.weight"},
                    1284804},
                   {{"mlp.0.bias", "mlp.0.weight", "dense_linear.bias", "dense_linear.weight", "first_order.weight",
                     "embedding.weight"},
                    12070848}}));
}

TEST(DdpBuckets, CapsOfOneByteGiveOneBucketPerParameterLastRegisteredFirst) {
  const auto p = deepfm();
  const auto layout = ddp_bucket_layout(p, 1, 1);
  ASSERT_EQ(layout.size(), p.size());
  for (size_t b = 0; b < layout.size(); ++b) {
    EXPECT_EQ(layout[b].params, std::vector<size_t>{p.size() - 1 - b});
    EXPECT_EQ(layout[b].bytes, p[p.size() - 1 - b].bytes);
  }
}

TEST(DdpBuckets, ABucketMayExceedItsCapByItsLastTensor) {
  // Walk: c (5) stays open under 20; b (100) takes it to 105 >= 20: closed at 105. The limit is now
  // the cap (50): a (10) stays open and is closed at the end.
  const std::vector<LayoutParam> p = {f32("a", 10), f32("b", 100), f32("c", 5)};
  EXPECT_EQ(named(p, ddp_bucket_layout(p, 20, 50)), (Named{{{"c", "b"}, 105}, {{"a"}, 10}}));
  // A tensor larger than the limit met first closes its bucket at once, alone.
  const std::vector<LayoutParam> q = {f32("a", 5), f32("big", 100)};
  EXPECT_EQ(named(q, ddp_bucket_layout(q, 20, 50)), (Named{{{"big"}, 100}, {{"a"}, 5}}));
  // Reaching the limit exactly closes the bucket (>=).
  const std::vector<LayoutParam> r = {f32("a", 4), f32("b", 2), f32("c", 2)};
  EXPECT_EQ(named(r, ddp_bucket_layout(r, 4, 4)), (Named{{{"c", "b"}, 4}, {{"a"}, 4}}));
}

TEST(DdpBuckets, EachDtypeAndDeviceFillsItsOwnBucketWithItsOwnLimits) {
  // Walk p4 p3 p2 p1 p0. float32: p4 (8), p2 (16 >= 16: closed; its limit becomes 100), p0 (8, open
  // at the end). float16: p3 (8), p1 (16 >= 16: closed). Launch order: by the last-registered member.
  const std::vector<LayoutParam> p = {{"p0", 8, "float32", "cpu"},
                                      {"p1", 8, "float16", "cpu"},
                                      {"p2", 8, "float32", "cpu"},
                                      {"p3", 8, "float16", "cpu"},
                                      {"p4", 8, "float32", "cpu"}};
  EXPECT_EQ(named(p, ddp_bucket_layout(p, 16, 100)), (Named{{{"p4", "p2"}, 16}, {{"p3", "p1"}, 16}, {{"p0"}, 8}}));
  // The device is part of the key too.
  const std::vector<LayoutParam> d = {{"a", 8, "float32", "cuda:0"}, {"b", 8, "float32", "cpu"}};
  EXPECT_EQ(named(d, ddp_bucket_layout(d, 100, 100)), (Named{{{"b"}, 8}, {{"a"}, 8}}));
}

TEST(DdpBuckets, LaunchOrderIsTheFirstMemberInTheWalkNotTheOrderBucketsClose) {
  // Walk p3 p2 p1 p0. The float16 bucket {p2, p0} closes first (51 >= 10); the float32 bucket
  // {p3, p1} (2 bytes) is closed only at the end, but its first member p3 is met first: it goes first.
  const std::vector<LayoutParam> p = {{"p0", 50, "float16", "cpu"},
                                      {"p1", 1, "float32", "cpu"},
                                      {"p2", 1, "float16", "cpu"},
                                      {"p3", 1, "float32", "cpu"}};
  EXPECT_EQ(named(p, ddp_bucket_layout(p, 10, 10)), (Named{{{"p3", "p1"}, 2}, {{"p2", "p0"}, 51}}));
}

TEST(DdpBuckets, NoParametersNoBuckets) {
  EXPECT_TRUE(ddp_bucket_layout({}, 1 << 20, 25 << 20).empty());
  EXPECT_TRUE(per_param_layout({}).empty());
}

TEST(DdpBuckets, PerParameterLayoutIsRegistrationOrder) {
  const std::vector<LayoutParam> p = {f32("a", 10), f32("b", 20), f32("c", 30)};
  EXPECT_EQ(named(p, per_param_layout(p)), (Named{{{"a"}, 10}, {{"b"}, 20}, {{"c"}, 30}}));
}

}  // namespace
}  // namespace ddplab::grader::checks

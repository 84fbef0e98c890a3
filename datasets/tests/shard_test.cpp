// Tests of the shard format, meta.json, Dataset, generate() and compute_stats(): round trips, and
// for every kind of damage an error that names the file and the byte offset where it went wrong.
#include "ddplab/data/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include "ddplab/data/error.h"
#include "ddplab/data/generator.h"
#include "scratch_dir.h"

namespace ddplab::data {
namespace {

namespace fs = std::filesystem;

using TempDir = ddplab::testing::ScratchDir;

// Valid records whose every field is derived from the index, so any misplaced byte shows.
std::vector<Sample> make_records(uint64_t n, uint64_t salt = 0) {
  std::vector<Sample> r(n);
  for (uint64_t i = 0; i < n; ++i) {
    r[i].label = static_cast<uint32_t>((i + salt) % 2);
    for (int j = 0; j < kNumDense; ++j) r[i].dense[j] = static_cast<float>((i * 13 + j + salt) % 100) * 0.125f;
    for (int f = 0; f < kNumSparse; ++f) r[i].ids[f] = static_cast<uint32_t>((i * 31 + f + salt) % kCardinality[f]);
  }
  return r;
}

void patch(const std::string& path, uint64_t offset, const void* bytes, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
}

void patch_u32(const std::string& path, uint64_t offset, uint32_t v) { patch(path, offset, &v, sizeof(v)); }

// Runs fn, expects a DataError, checks that it names `file` (and `offset` if >= 0) and mentions
// `words`; returns the message.
std::string expect_data_error(const std::function<void()>& fn, const std::string& file, int64_t offset,
                              const std::string& words) {
  try {
    fn();
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.file(), file) << msg;
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    if (offset >= 0) {
      EXPECT_TRUE(e.has_offset()) << msg;
      EXPECT_EQ(e.offset(), static_cast<uint64_t>(offset)) << msg;
      EXPECT_NE(msg.find("at byte " + std::to_string(offset)), std::string::npos) << msg;
    }
    EXPECT_NE(msg.find(words), std::string::npos) << "expected \"" << words << "\" in: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no DataError; expected one naming " << file;
  return "";
}

constexpr uint64_t kHeader = sizeof(ShardHeader);
constexpr uint64_t kRecord = sizeof(Sample);

TEST(ShardTest, Fnv1aMatchesTheReferenceVectors) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
  EXPECT_EQ(fnv1a64("bar", 3, fnv1a64("foo", 3)), fnv1a64("foobar", 6));  // continued
}

TEST(ShardTest, RoundTripsRecordsAndHeader) {
  TempDir dir;
  const auto recs = make_records(1000);
  const std::string path = dir.path("train-00000.bin");
  write_shard(path, 42, 7000, recs.data(), recs.size());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(fs::file_size(path), kHeader + 1000 * kRecord);
  const ShardReader r(path, /*verify_checksum=*/true);
  EXPECT_EQ(std::memcmp(r.header().magic, kShardMagic, 8), 0);
  EXPECT_EQ(r.header().version, kShardVersion);
  EXPECT_EQ(r.header().seed, 42u);
  EXPECT_EQ(r.header().first_index, 7000u);
  EXPECT_EQ(r.header().checksum, fnv1a64(recs.data(), recs.size() * kRecord));
  ASSERT_EQ(r.size(), 1000u);
  EXPECT_EQ(std::memcmp(r.data(), recs.data(), recs.size() * kRecord), 0);
  EXPECT_EQ(r[999].ids[25], recs[999].ids[25]);
  EXPECT_EQ(r.path(), path);
  // Moving keeps the mapping valid.
  ShardReader moved = ShardReader(path);
  const Sample first = moved[0];
  ShardReader target(path);
  target = std::move(moved);
  EXPECT_EQ(std::memcmp(&target[0], &first, kRecord), 0);
}

TEST(ShardTest, StreamingWriterEqualsWriteShardAndCleansUpWhenAbandoned) {
  TempDir dir;
  const auto recs = make_records(1000);
  const std::string whole = dir.path("whole.bin");
  const std::string pieces = dir.path("pieces.bin");
  write_shard(whole, 3, 500, recs.data(), recs.size());
  {
    ShardWriter w(pieces, 3, 500);
    EXPECT_TRUE(fs::exists(pieces + ".tmp"));
    EXPECT_FALSE(fs::exists(pieces));  // nothing visible before commit
    w.append(recs.data(), 1);
    w.append(recs.data() + 1, 0);
    w.append(recs.data() + 1, 998);
    w.append(recs.data() + 999, 1);
    EXPECT_EQ(w.count(), 1000u);
    w.commit();
    expect_data_error([&] { w.append(recs.data(), 1); }, pieces, -1, "after commit");
  }
  std::ifstream a(whole, std::ios::binary);
  std::ifstream b(pieces, std::ios::binary);
  const std::string ta((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  const std::string tb((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
  EXPECT_EQ(ta.size(), kHeader + 1000 * kRecord);
  EXPECT_TRUE(ta == tb) << "streamed shard differs from write_shard's";

  const std::string abandoned = dir.path("abandoned.bin");
  {
    ShardWriter w(abandoned, 3, 0);
    w.append(recs.data(), 10);
  }  // destroyed without commit, as when generation throws
  EXPECT_FALSE(fs::exists(abandoned + ".tmp"));
  EXPECT_FALSE(fs::exists(abandoned));
}

TEST(ShardTest, EmptyShardIsValid) {
  TempDir dir;
  const std::string path = dir.path("empty.bin");
  write_shard(path, 1, 0, nullptr, 0);
  const ShardReader r(path, true);
  EXPECT_EQ(r.size(), 0u);
}

TEST(ShardTest, RejectsBadHeaderFieldsAtTheirOffsets) {
  TempDir dir;
  const auto recs = make_records(10);
  const std::string path = dir.path("s.bin");
  struct Case {
    uint64_t offset;
    uint32_t value;
    const char* words;
  };
  const Case cases[] = {
      {offsetof(ShardHeader, magic), 0x21212121, "bad magic"},
      {offsetof(ShardHeader, version), 2, "version is 2, expected 1"},
      {offsetof(ShardHeader, record_size), 156, "record_size is 156, expected 160"},
      {offsetof(ShardHeader, num_dense), 14, "num_dense is 14"},
      {offsetof(ShardHeader, num_sparse), 25, "num_sparse is 25"},
  };
  for (const Case& c : cases) {
    write_shard(path, 1, 0, recs.data(), recs.size());
    patch_u32(path, c.offset, c.value);
    expect_data_error([&] { ShardReader r(path); }, path, static_cast<int64_t>(c.offset), c.words);
  }
  EXPECT_EQ(offsetof(ShardHeader, version), 8u);
  EXPECT_EQ(offsetof(ShardHeader, record_size), 12u);
}

TEST(ShardTest, RejectsAFileShorterThanTheHeader) {
  TempDir dir;
  const std::string path = dir.path("short.bin");
  const auto recs = make_records(3);
  write_shard(path, 1, 0, recs.data(), recs.size());
  fs::resize_file(path, 30);
  expect_data_error([&] { ShardReader r(path); }, path, 30, "header");
  fs::resize_file(path, 0);
  expect_data_error([&] { ShardReader r(path); }, path, 0, "header");
}

TEST(ShardTest, InMemoryHoldsTheSameRecordsAndSurvivesMovesAndTheFile) {
  // ddp_train holds its training split in memory (issue 18): the same bytes, owned by the reader,
  // not by the file's mapping; validated the same way first.
  TempDir dir;
  const auto recs = make_records(1000);
  const std::string path = dir.path("train-00000.bin");
  write_shard(path, 42, 7000, recs.data(), recs.size());
  ShardReader mem(path, /*verify_checksum=*/true, /*in_memory=*/true);
  EXPECT_TRUE(mem.in_memory());
  EXPECT_FALSE(ShardReader(path).in_memory());
  EXPECT_EQ(mem.header().first_index, 7000u);
  ASSERT_EQ(mem.size(), 1000u);
  EXPECT_EQ(std::memcmp(mem.data(), recs.data(), recs.size() * kRecord), 0);
  mem.verify_checksum();
  fs::remove(path);  // the copy does not need the file any more
  ShardReader moved = std::move(mem);
  EXPECT_TRUE(moved.in_memory());
  EXPECT_EQ(std::memcmp(moved.data(), recs.data(), recs.size() * kRecord), 0);
  // A bad file fails before anything is copied, with the same error as when mapped.
  write_shard(path, 1, 0, recs.data(), 20);
  fs::resize_file(path, kHeader + 10 * kRecord + 50);
  expect_data_error([&] { ShardReader r(path, false, true); }, path, kHeader + 10 * kRecord + 50, "truncated");
}

TEST(ShardTest, RejectsTruncatedFileAtWhereTheDataEnds) {
  TempDir dir;
  const std::string path = dir.path("trunc.bin");
  const auto recs = make_records(20);
  write_shard(path, 1, 0, recs.data(), recs.size());
  const uint64_t cut = kHeader + 10 * kRecord + 50;
  fs::resize_file(path, cut);
  const std::string msg = expect_data_error([&] { ShardReader r(path); }, path, cut, "truncated");
  EXPECT_NE(msg.find("20 records"), std::string::npos) << msg;
  // A garbage count far beyond the file must not overflow the size arithmetic.
  write_shard(path, 1, 0, recs.data(), recs.size());
  const uint64_t huge = ~uint64_t{0} / 2;
  patch(path, offsetof(ShardHeader, count), &huge, sizeof(huge));
  expect_data_error([&] { ShardReader r(path); }, path, kHeader + 20 * kRecord, "truncated");
}

TEST(ShardTest, RejectsTrailingBytesAtWhereTheDataShouldEnd) {
  TempDir dir;
  const std::string path = dir.path("trail.bin");
  const auto recs = make_records(20);
  write_shard(path, 1, 0, recs.data(), recs.size());
  fs::resize_file(path, kHeader + 20 * kRecord + 7);
  expect_data_error([&] { ShardReader r(path); }, path, kHeader + 20 * kRecord, "7 trailing bytes");
}

TEST(ShardTest, ChecksumMismatchNamesTheFile) {
  TempDir dir;
  const std::string path = dir.path("sum.bin");
  const auto recs = make_records(20);
  write_shard(path, 1, 0, recs.data(), recs.size());
  // Flip the lowest mantissa bit of a dense value: every field stays valid, only the hash sees it.
  Sample s = recs[5];
  uint32_t bits;
  std::memcpy(&bits, &s.dense[3], 4);
  bits ^= 1;
  patch_u32(path, kHeader + 5 * kRecord + offsetof(Sample, dense) + 3 * 4, bits);
  const ShardReader quick(path);  // header-only open does not read the records
  expect_data_error([&] { quick.verify_checksum(); }, path, -1, "checksum mismatch");
  expect_data_error([&] { ShardReader r(path, true); }, path, -1, "checksum mismatch");
}

TEST(ShardTest, FullVerifyReportsTheOffsetOfABadField) {
  TempDir dir;
  const std::string path = dir.path("fields.bin");
  auto recs = make_records(20);
  recs[7].label = 2;
  write_shard(path, 1, 0, recs.data(), recs.size());  // checksum is right: only field checks see it
  const ShardReader quick(path);
  EXPECT_NO_THROW(quick.verify_checksum());
  expect_data_error([&] { ShardReader r(path, true); }, path, kHeader + 7 * kRecord + offsetof(Sample, label),
                    "label 2 is not 0 or 1");

  recs = make_records(20);
  recs[11].ids[3] = kCardinality[3];
  write_shard(path, 1, 0, recs.data(), recs.size());
  expect_data_error([&] { ShardReader(path).verify_records(); }, path,
                    kHeader + 11 * kRecord + offsetof(Sample, ids) + 3 * 4, "field 3");

  recs = make_records(20);
  recs[2].dense[12] = std::nanf("");
  write_shard(path, 1, 0, recs.data(), recs.size());
  expect_data_error([&] { ShardReader(path, true); }, path, kHeader + 2 * kRecord + offsetof(Sample, dense) + 12 * 4,
                    "dense[12]");
}

TEST(ShardTest, MissingShardFileIsNamed) {
  TempDir dir;
  const std::string path = dir.path("nope.bin");
  expect_data_error([&] { ShardReader r(path); }, path, -1, "cannot open");
}

TEST(ShardTest, FailedWriteLeavesNoTemporary) {
  TempDir dir;
  const auto recs = make_records(5);
  // The directory does not exist: creating the temporary fails.
  const std::string missing = dir.path("no-such-dir/train-00000.bin");
  expect_data_error([&] { write_shard(missing, 1, 0, recs.data(), recs.size()); }, missing, -1, "cannot create");
  EXPECT_FALSE(fs::exists(missing + ".tmp"));
  // The target is a non-empty directory: everything is written, then the rename fails.
  const std::string blocked = dir.path("blocked.bin");
  fs::create_directories(fs::path(blocked) / "inside");
  expect_data_error([&] { write_shard(blocked, 1, 0, recs.data(), recs.size()); }, blocked, -1, "cannot rename");
  EXPECT_FALSE(fs::exists(blocked + ".tmp"));
  EXPECT_TRUE(fs::is_directory(blocked));
}

// ---- meta.json ----

Metadata sample_meta() {
  Metadata m;
  m.seed = 9;
  m.train_count = 2500;
  m.test_count = 700;
  m.shard_size = 1000;
  m.teacher_bias = -1.5994;
  m.teacher_test_auc = 0.81;
  m.teacher_test_logloss = 0.44;
  m.train_click_rate = 0.251;
  m.test_click_rate = 0.249;
  m.train_shards = {"train-00000.bin", "train-00001.bin", "train-00002.bin"};
  m.test_shards = {"test-00000.bin"};
  return m;
}

TEST(MetadataTest, RoundTrips) {
  TempDir dir;
  const Metadata m = sample_meta();
  write_metadata(dir.dir().string(), m);
  EXPECT_FALSE(fs::exists(dir.path("meta.json.tmp")));
  const Metadata r = read_metadata(dir.dir().string());
  EXPECT_EQ(r.version, 1);
  EXPECT_EQ(r.seed, 9u);
  EXPECT_EQ(r.train_count, 2500u);
  EXPECT_EQ(r.test_count, 700u);
  EXPECT_EQ(r.shard_size, 1000u);
  EXPECT_EQ(r.teacher_bias, -1.5994);
  EXPECT_EQ(r.teacher_test_auc, 0.81);
  EXPECT_EQ(r.train_click_rate, 0.251);
  EXPECT_EQ(r.train_shards, m.train_shards);
  EXPECT_EQ(r.test_shards, m.test_shards);
  std::ifstream in(dir.path("meta.json"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"format\": \"ddplab.ctr-small\""), std::string::npos) << text;
}

TEST(MetadataTest, MissingMalformedOrIncompleteMetaJsonIsNamed) {
  TempDir dir;
  const std::string d = dir.dir().string();
  const std::string file = dir.path("meta.json");
  expect_data_error([&] { read_metadata(d); }, file, -1, "cannot open");
  expect_data_error([&] { Dataset ds(d, Split::kTrain); }, file, -1, "cannot open");

  std::ofstream(file) << "{\"format\": \"ddplab.ctr-small\", \"version\": ";
  const std::string msg = expect_data_error([&] { read_metadata(d); }, file, -1, "malformed JSON");
  EXPECT_NE(msg.find("at byte"), std::string::npos) << msg;

  write_metadata(d, sample_meta());
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const auto without = [&](const std::string& key) {
    const size_t at = text.find("\"" + key + "\"");
    const size_t end = text.find('\n', at);
    std::string t = text;
    t.erase(at, end - at + 1);
    return t;
  };
  std::ofstream(file) << without("seed");
  // "seed" is not the last key, so dropping its line leaves valid JSON.
  expect_data_error([&] { read_metadata(d); }, file, -1, "missing key \"seed\"");

  std::string wrong = text;
  wrong.replace(wrong.find("ddplab.ctr-small"), 16, "something.else!!");
  std::ofstream(file) << wrong;
  expect_data_error([&] { read_metadata(d); }, file, -1, "key \"format\"");

  std::string typed = text;
  typed.replace(typed.find("\"train_count\": 2500"), 19, "\"train_count\": \"x\"");
  std::ofstream(file) << typed;
  expect_data_error([&] { read_metadata(d); }, file, -1, "bad value for key \"train_count\"");

  Metadata escaping = sample_meta();
  escaping.test_shards = {"../elsewhere/test-00000.bin"};
  write_metadata(d, escaping);
  expect_data_error([&] { read_metadata(d); }, file, -1, "key \"test_shards\"");
}

// ---- Dataset, generate(), compute_stats() ----

// The teacher metrics generate() asks for, computed here without common/ (datasets/ does not
// depend on it): exact AUC by pairs would be slow, so a rank-based one as in common/.
std::pair<double, double> test_metrics(const std::vector<float>& probs, const std::vector<float>& labels) {
  std::vector<size_t> order(probs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] < probs[b]; });
  double rank_sum = 0.0;
  double pos = 0.0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && probs[order[j]] == probs[order[i]]) ++j;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += 0.5 * static_cast<double>(i + 1 + j);
        pos += 1.0;
      }
    }
    i = j;
  }
  double ll = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) ll -= labels[i] > 0.5f ? std::log(probs[i]) : std::log1p(-probs[i]);
  const double neg = static_cast<double>(probs.size()) - pos;
  return {(rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg), ll / static_cast<double>(probs.size())};
}

GenerateOptions small_options(const TempDir& dir) {
  GenerateOptions o;
  o.out_dir = dir.dir().string();
  o.train = 2500;
  o.test = 700;
  o.seed = 1;
  o.shard_size = 1000;
  o.threads = 2;
  return o;
}

TEST(DatasetTest, GenerateWritesShardsThatReadBackAsTheGeneratorsSamples) {
  TempDir dir;
  const GenerateResult res = generate(small_options(dir), test_metrics);
  const Metadata& m = res.meta;
  EXPECT_EQ(m.train_shards, (std::vector<std::string>{"train-00000.bin", "train-00001.bin", "train-00002.bin"}));
  EXPECT_EQ(m.test_shards, std::vector<std::string>{"test-00000.bin"});
  EXPECT_EQ(m.teacher_bias, -1.5994);
  EXPECT_GT(m.teacher_test_auc, 0.7);  // 700 samples: only roughly the full split's 0.8076
  EXPECT_LT(m.teacher_test_auc, 0.9);
  EXPECT_GE(res.threads, 1);
  EXPECT_GT(res.samples_per_s_per_thread, 0.0);
  for (const auto& entry : fs::directory_iterator(dir.dir())) {
    EXPECT_EQ(entry.path().extension() == ".tmp", false) << entry.path();
  }

  const Generator g(1);
  const Dataset train(dir.dir().string(), Split::kTrain, /*verify_checksums=*/true);
  const Dataset held(dir.dir().string(), Split::kTrain, false, /*in_memory=*/true);
  ASSERT_EQ(held.size(), train.size());
  EXPECT_EQ(held.file_bytes(), 3 * kHeader + 2500 * kRecord);
  for (uint64_t i = 0; i < held.size(); i += 97) {
    EXPECT_EQ(std::memcmp(&held[i], &train[i], kRecord), 0) << "sample " << i;
  }
  const Dataset test(dir.dir().string(), Split::kTest, true);
  ASSERT_EQ(train.size(), 2500u);
  ASSERT_EQ(test.size(), 700u);
  EXPECT_EQ(train.shards().size(), 3u);
  EXPECT_EQ(train.shards()[2].size(), 500u);
  uint64_t train_pos = 0;
  for (uint64_t i = 0; i < train.size(); ++i) {
    Sample s;
    g.sample(i, s);
    ASSERT_EQ(std::memcmp(&train[i], &s, kRecord), 0) << "train sample " << i;
    train_pos += s.label;
  }
  for (uint64_t i = 0; i < test.size(); ++i) {
    Sample s;
    g.sample(kTestBase + i, s);
    ASSERT_EQ(std::memcmp(&test[i], &s, kRecord), 0) << "test sample " << i;
  }
  EXPECT_DOUBLE_EQ(m.train_click_rate, train_pos / 2500.0);
  EXPECT_EQ(train.metadata().teacher_test_auc, m.teacher_test_auc);
  expect_data_error([&] { (void)train[2500]; }, dir.dir().string(), -1, "out of range");
  EXPECT_STREQ(split_name(Split::kTrain), "train");
  EXPECT_STREQ(split_name(Split::kTest), "test");

  const SplitStats st = compute_stats(train);
  EXPECT_EQ(st.count, 2500u);
  EXPECT_DOUBLE_EQ(st.click_rate, train_pos / 2500.0);
  ASSERT_EQ(st.dense_mean.size(), static_cast<size_t>(kNumDense));
  ASSERT_EQ(st.distinct_ids.size(), static_cast<size_t>(kNumSparse));
  EXPECT_EQ(st.distinct_ids[8], 3u);  // 3 ids, all seen in 2500 samples
  EXPECT_EQ(st.distinct_ids[19], 4u);
  EXPECT_NEAR(st.top_id_share[8], 0.5653, 0.04);  // Zipf 1.1 over 3 ids
  for (int j = 0; j < kNumDense; ++j) {
    // log1p(floor(exp(1 + 1.5 z))): mean about 1.5, spread about 1.2.
    EXPECT_GT(st.dense_mean[j], 1.0);
    EXPECT_LT(st.dense_mean[j], 2.0);
    EXPECT_GT(st.dense_std[j], 0.8);
    EXPECT_LT(st.dense_std[j], 1.6);
  }
}

TEST(DatasetTest, RegenerationReplacesTheDataSetAndRemovesStaleShards) {
  TempDir dir;
  GenerateOptions o = small_options(dir);
  generate(o, test_metrics);
  ASSERT_TRUE(fs::exists(dir.path("train-00002.bin")));
  o.shard_size = 2000;
  o.threads = 1;
  generate(o, test_metrics);
  EXPECT_FALSE(fs::exists(dir.path("train-00002.bin")));
  const Dataset train(dir.dir().string(), Split::kTrain, true);
  EXPECT_EQ(train.shards().size(), 2u);
  EXPECT_EQ(train.metadata().shard_size, 2000u);
}

TEST(DatasetTest, InterruptedGenerationLeavesNoMetaJson) {
  TempDir dir;
  GenerateOptions o = small_options(dir);
  generate(o, test_metrics);
  ASSERT_TRUE(fs::exists(dir.path("meta.json")));
  const auto failing = [](const std::vector<float>&, const std::vector<float>&) -> std::pair<double, double> {
    throw std::runtime_error("interrupted");
  };
  EXPECT_THROW(generate(o, failing), std::runtime_error);
  EXPECT_FALSE(fs::exists(dir.path("meta.json")));
  expect_data_error([&] { Dataset ds(dir.dir().string(), Split::kTrain); }, dir.path("meta.json"), -1, "cannot open");
}

TEST(DatasetTest, OpeningNamesAMissingOrForeignShard) {
  TempDir dir;
  const GenerateOptions o = small_options(dir);
  generate(o, test_metrics);
  const std::string d = dir.dir().string();

  // A shard of another data set (seed 5) in place of train-00001.bin.
  const auto recs = make_records(1000);
  write_shard(dir.path("train-00001.bin"), 5, 1000, recs.data(), recs.size());
  expect_data_error([&] { Dataset ds(d, Split::kTrain); }, dir.path("train-00001.bin"), offsetof(ShardHeader, seed),
                    "seed 5");
  // Right seed, wrong place.
  write_shard(dir.path("train-00001.bin"), 1, 3000, recs.data(), recs.size());
  expect_data_error([&] { Dataset ds(d, Split::kTrain); }, dir.path("train-00001.bin"),
                    offsetof(ShardHeader, first_index), "first index 3000, expected 1000");
  // Gone.
  fs::remove(dir.path("train-00001.bin"));
  expect_data_error([&] { Dataset ds(d, Split::kTrain); }, dir.path("train-00001.bin"), -1, "cannot open");
  // The test split does not need it.
  EXPECT_EQ(Dataset(d, Split::kTest).size(), 700u);
  // Fewer samples than meta.json promises.
  Metadata m = read_metadata(d);
  m.train_shards.pop_back();
  m.train_shards.pop_back();
  write_metadata(d, m);
  expect_data_error([&] { Dataset ds(d, Split::kTrain); }, dir.path("meta.json"), -1, "\"train_count\"");
}

TEST(DatasetTest, GenerateRejectsBadOptions) {
  TempDir dir;
  GenerateOptions o = small_options(dir);
  o.shard_size = 0;
  EXPECT_THROW(generate(o, test_metrics), DataError);
  o = small_options(dir);
  o.test = 0;
  EXPECT_THROW(generate(o, test_metrics), DataError);
}

}  // namespace
}  // namespace ddplab::data

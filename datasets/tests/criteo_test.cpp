// Criteo TSV import and export: a fixture of hand-written lines for every edge case of the format,
// the error of each kind of malformed line (file and line), the vocabulary map, gzip input, and a
// round trip of a generated data set through text at 1 and 3 threads.
#include "ddplab/data/criteo.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "ddplab/data/error.h"
#include "scratch_dir.h"
#include "ddplab/data/generator.h"

namespace ddplab::data {
namespace {

namespace fs = std::filesystem;

class CriteoTest : public ddplab::testing::ScratchTest {};

/// A line of 40 fields: the label, 13 dense and 26 categorical values as given.
std::string line(const std::string& label, std::vector<std::string> dense, std::vector<std::string> cats) {
  dense.resize(kNumDense);
  cats.resize(kNumSparse);
  std::string s = label;
  for (const auto& d : dense) s += "\t" + d;
  for (const auto& c : cats) s += "\t" + c;
  return s;
}

float log1pf_of(double x) { return static_cast<float>(std::log1p(x)); }

TEST_F(CriteoTest, ParsesEveryKindOfFieldTheLayoutAllows) {
  CriteoRecord r;
  // Missing dense and categorical values, a negative count (DLRM: 0), upper- and lower-case hex,
  // short hashes, a count over the shard range (clamped and counted), Windows line end.
  const std::string l = line("1", {"", "-3", "0", "7", "2000000"}, {"68fd1e64", "", "A", "ffffffff"}) + "\r";
  ASSERT_EQ(parse_criteo_line(l, r), "");
  EXPECT_EQ(r.label, 1u);
  EXPECT_EQ(r.dense[0], 0.0f) << "missing: 0";
  EXPECT_EQ(r.dense[1], 0.0f) << "negative: 0";
  EXPECT_EQ(r.dense[3], log1pf_of(7));
  EXPECT_EQ(r.dense[4], log1pf_of(static_cast<double>(kMaxDenseCount)));
  EXPECT_EQ(r.clamped, 1);
  EXPECT_EQ(r.hashes[0], 0x68fd1e64u);
  EXPECT_EQ(r.hashes[1], 0u) << "missing: 0";
  EXPECT_EQ(r.hashes[2], 0xau);
  EXPECT_EQ(r.hashes[3], 0xffffffffu);
}

TEST_F(CriteoTest, NamesTheFieldOfEveryMalformedLine) {
  CriteoRecord r;
  const std::string good = line("0", {}, {});
  EXPECT_EQ(parse_criteo_line(good, r), "");
  EXPECT_EQ(parse_criteo_line(line("0", {}, {"", "", "a"}), r), "");
  EXPECT_EQ(parse_criteo_line(good + "\tx", r), "expected 40 tab-separated fields, found 41");
  EXPECT_EQ(parse_criteo_line("0\t1\t2", r), "expected 40 tab-separated fields, found 3");
  EXPECT_EQ(parse_criteo_line("", r), "expected 40 tab-separated fields, found 1");
  EXPECT_EQ(parse_criteo_line(line("2", {}, {}), r), "field label (column 1): '2' is not 0 or 1");
  EXPECT_EQ(parse_criteo_line(line("0", {"", "", "12x"}, {}), r), "field I3 (column 4): '12x' is not an integer");
  EXPECT_EQ(parse_criteo_line(line("0", {"-"}, {}), r), "field I1 (column 2): '-' is not an integer");
  EXPECT_EQ(parse_criteo_line(line("0", {}, {"", "zz"}), r),
            "field C2 (column 16): 'zz' is not a 32-bit hexadecimal hash");
  EXPECT_EQ(parse_criteo_line(line("0", {}, {"123456789"}), r),
            "field C1 (column 15): '123456789' is not a 32-bit hexadecimal hash");
}

TEST_F(CriteoTest, AMalformedLineStopsTheImportWithItsFileAndLine) {
  const std::string text = line("0", {"1"}, {"a"}) + "\n" + line("1", {"2"}, {"b"}) + "\n" + "1\t2\n";
  CriteoImportOptions o;
  o.inputs = {write("day_0.tsv", text)};
  o.out_dir = path("out");
  o.threads = 2;
  try {
    import_criteo(o);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), o.inputs[0] + ": line 3: expected 40 tab-separated fields, found 2");
  }
  EXPECT_FALSE(fs::exists(path("out/meta.json"))) << "a failed import must not look complete";
  o.skip_malformed = true;
  const auto r = import_criteo(o);
  EXPECT_EQ(r.lines, 3u);
  EXPECT_EQ(r.skipped, 1u);
  EXPECT_EQ(r.meta.train_count + r.meta.test_count, 2u);
}

TEST_F(CriteoTest, FilesAreOneStreamInTheirOrderAndErrorsCountLinesPerFile) {
  const std::string a = line("1", {"1"}, {}) + "\n" + line("0", {"2"}, {}) + "\n";
  const std::string b = line("1", {"3"}, {}) + "\n" + line("0", {"4"}, {"q"}) + "\n";
  CriteoImportOptions o;
  o.inputs = {write("day_0.tsv", a), write("day_1.tsv", b)};
  o.out_dir = path("out");
  try {
    import_criteo(o);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              o.inputs[1] + ": line 2: field C1 (column 15): 'q' is not a 32-bit hexadecimal hash");
  }
  o.inputs[1] = write("day_1.tsv", line("1", {"3"}, {}));  // and no newline at the end
  o.test_fraction = 0.0;
  const auto r = import_criteo(o);
  ASSERT_EQ(r.meta.train_count, 3u);
  const Dataset ds(o.out_dir, Split::kTrain);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(ds[i].dense[0], log1pf_of(static_cast<double>(i + 1))) << i;
}

TEST_F(CriteoTest, HashModeKeepsTheLineOrderAndTheTestSplitIsTheLastLines) {
  std::string text;
  for (int i = 0; i < 10; ++i) {
    text += line(i % 3 == 0 ? "1" : "0", {std::to_string(i)}, {fmt::format("{:x}", 1000 + i), "", "4e21"}) + "\n";
  }
  CriteoImportOptions o;
  o.inputs = {write("a.tsv", text)};
  o.out_dir = path("out");
  o.test_fraction = 0.2;
  o.shard_size = 3;  // several shards per split
  const auto r = import_criteo(o);
  EXPECT_EQ(r.meta.train_count, 8u);
  EXPECT_EQ(r.meta.test_count, 2u);
  EXPECT_EQ(r.meta.train_shards.size(), 3u);
  const Dataset train(o.out_dir, Split::kTrain), test(o.out_dir, Split::kTest);
  for (uint64_t i = 0; i < 10; ++i) {
    const Sample& s = i < 8 ? train[i] : test[i - 8];
    EXPECT_EQ(s.label, i % 3 == 0 ? 1u : 0u) << "line " << i;
    EXPECT_EQ(s.dense[0], log1pf_of(static_cast<double>(i)));
    EXPECT_EQ(s.ids[0], (1000 + i) % kCardinality[0]);
    EXPECT_EQ(s.ids[1], 0u);
    EXPECT_EQ(s.ids[2], 0x4e21u % kCardinality[2]);
  }
  EXPECT_DOUBLE_EQ(r.meta.train_click_rate, 3.0 / 8.0);
}

TEST_F(CriteoTest, VocabularyGivesTheFrequentHashesIdsMostFrequentFirst) {
  // Field C1: hash 0xbb five times, 0xaa three times, 0xcc once; with min_count 2, 0xcc and the
  // missing values map to 0. C9 has cardinality 3: only its two most frequent hashes get ids.
  std::string text;
  const char* c1[] = {"bb", "aa", "bb", "cc", "bb", "aa", "bb", "aa", "bb", ""};
  const char* c9[] = {"1", "2", "3", "1", "2", "1", "3", "3", "3", "1"};
  for (int i = 0; i < 10; ++i) {
    std::vector<std::string> cats(kNumSparse);
    cats[0] = c1[i];
    cats[8] = c9[i];
    text += line("0", {}, cats) + "\n";
  }
  CriteoImportOptions o;
  o.inputs = {write("v.tsv", text)};
  o.out_dir = path("out");
  o.test_fraction = 0.0;
  o.map = CategoricalMap::kVocabulary;
  o.min_count = 2;
  import_criteo(o);
  const Dataset ds(o.out_dir, Split::kTrain);
  const uint32_t want_c1[] = {1, 2, 1, 0, 1, 2, 1, 2, 1, 0};  // bb: 1, aa: 2, cc (once) and missing: 0
  // C9: hashes 1 and 3 four times each (ties: the lower hash first), 2 twice: no id left for it.
  const uint32_t want_c9[] = {1, 0, 2, 1, 0, 1, 2, 2, 2, 1};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(ds[static_cast<uint64_t>(i)].ids[0], want_c1[i]) << "C1, line " << i;
    EXPECT_EQ(ds[static_cast<uint64_t>(i)].ids[8], want_c9[i]) << "C9, line " << i;
  }
}

TEST_F(CriteoTest, ReadsGzipLikePlainText) {
  std::string text;
  for (int i = 0; i < 5; ++i) text += line("1", {std::to_string(i * 10)}, {"abc"}) + "\n";
  const std::string gz = path("day.tsv.gz");
  gzFile f = gzopen(gz.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(f);
  CriteoImportOptions o;
  o.inputs = {gz};
  o.out_dir = path("out");
  o.test_fraction = 0.0;
  const auto r = import_criteo(o);
  EXPECT_EQ(r.meta.train_count, 5u);
  EXPECT_EQ(r.bytes, text.size()) << "bytes counts the text after decompression";
  EXPECT_EQ(Dataset(o.out_dir, Split::kTrain)[4].dense[0], log1pf_of(40));
}

TEST_F(CriteoTest, AGeneratedDataSetSurvivesTheRoundTripThroughText) {
  GenerateOptions g;
  g.out_dir = path("gen");
  g.train = 3000;
  g.test = 500;
  g.shard_size = 1024;
  g.threads = 1;
  generate(g, [](const std::vector<float>&, const std::vector<float>&) { return std::make_pair(0.5, 0.7); });
  const std::string tsv = path("runs/text/train.tsv");  // folders that do not exist yet are made
  EXPECT_EQ(export_tsv(g.out_dir, Split::kTrain, tsv), 3000u);
  EXPECT_FALSE(fs::exists(tsv + ".tmp"));
  const Dataset original(g.out_dir, Split::kTrain);
  for (int threads : {1, 3}) {
    CriteoImportOptions o;
    o.inputs = {tsv};
    o.out_dir = path("imported" + std::to_string(threads));
    o.test_fraction = 0.0;
    o.threads = threads;
    o.shard_size = 700;
    const auto r = import_criteo(o);
    EXPECT_EQ(r.clamped, 0u);
    const Dataset back(o.out_dir, Split::kTrain);
    ASSERT_EQ(back.size(), original.size());
    for (uint64_t i = 0; i < back.size(); ++i) {
      ASSERT_EQ(std::memcmp(&back[i], &original[i], sizeof(Sample)), 0)
          << "sample " << i << " differs after export and import at " << threads << " thread(s)";
    }
  }
}

}  // namespace
}  // namespace ddplab::data

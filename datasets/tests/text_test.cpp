// Criteo text read in place: what TextFile counts as read, the lines of a range, and a batch
// parsed from text equal to the batch of the binary data set it was exported from.
#include "ddplab/data/text.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ddplab/data/criteo.h"
#include "ddplab/data/error.h"
#include "scratch_dir.h"
#include "ddplab/data/generator.h"

namespace ddplab::data {
namespace {

namespace fs = std::filesystem;

class TextTest : public ddplab::testing::ScratchTest {};

TEST_F(TextTest, CountsEveryByteItHandsOutAndNothingElse) {
  const TextFile f(write("a.txt", "one\ntwo\nthree"));
  EXPECT_EQ(f.size(), 13u);
  EXPECT_EQ(f.bytes_read(), 0u);
  EXPECT_EQ(f.read(4, 8), "two\n");
  EXPECT_EQ(f.bytes_read(), 4u);
  EXPECT_EQ(f.read(8, 100), "three");  // clamped to the end
  EXPECT_EQ(f.bytes_read(), 9u);
  EXPECT_EQ(f.read_line(0), "one");  // the line and its '\n'
  EXPECT_EQ(f.bytes_read(), 13u);
  EXPECT_EQ(f.read_line(8), "three");  // the last line has no '\n'
  EXPECT_EQ(f.bytes_read(), 18u);
  EXPECT_EQ(f.line_number(0), 1u);
  EXPECT_EQ(f.line_number(9), 3u);
  EXPECT_EQ(f.bytes_read(), 18u);  // line numbers are for error messages, not reading
  EXPECT_THROW((void)f.read(14, 15), DataError);
  EXPECT_THROW((void)f.read_line(13), DataError);
}

TEST_F(TextTest, AnEmptyFileHasNoLinesAndAMissingOneIsNamed) {
  const TextFile f(write("empty.txt", ""));
  EXPECT_EQ(f.size(), 0u);
  EXPECT_TRUE(line_starts(f, {0, 0}).empty());
  try {
    TextFile missing(path("nope.tsv"));
    FAIL() << "opened a file that does not exist";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.tsv: cannot open"), std::string::npos) << e.what();
  }
}

TEST_F(TextTest, LineStartsAreTheLinesThatBeginInTheRange) {
  const TextFile f(write("a.txt", "aa\nb\n\ncccc\nd"));  // starts 0, 3, 5, 6, 11
  EXPECT_EQ(line_starts(f, {0, f.size()}), (std::vector<uint64_t>{0, 3, 5, 6, 11}));
  EXPECT_EQ(line_starts(f, {3, 6}), (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(line_starts(f, {3, 4}), (std::vector<uint64_t>{3}));  // a line beginning in the range, ending after it
  EXPECT_EQ(line_starts(f, {11, 1000}), (std::vector<uint64_t>{11}));
  EXPECT_TRUE(line_starts(f, {6, 6}).empty());
  try {
    (void)line_starts(f, {4, 9});
    FAIL() << "a range beginning inside a line was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("at byte 4: the range does not begin at a line start"), std::string::npos)
        << e.what();
  }
}

TEST_F(TextTest, ABatchParsedFromExportedTextIsTheBinaryDataSetsBatch) {
  GenerateOptions g;
  g.out_dir = path("gen");
  g.train = 700;
  g.test = 10;
  g.shard_size = 256;
  g.threads = 1;
  generate(g, [](const std::vector<float>&, const std::vector<float>&) { return std::make_pair(0.5, 0.7); });
  const std::string tsv = path("train.tsv");
  ASSERT_EQ(export_tsv(g.out_dir, Split::kTrain, tsv), 700u);
  const Dataset ds(g.out_dir, Split::kTrain);
  const TextFile f(tsv);
  const std::vector<uint64_t> starts = line_starts(f, {0, f.size()});
  ASSERT_EQ(starts.size(), 700u);
  EXPECT_EQ(f.bytes_read(), f.size());
  const Batch text = parse_text_batch(f, starts.data() + 100, 300);
  std::vector<uint64_t> order(300);
  for (size_t i = 0; i < order.size(); ++i) order[i] = 100 + i;
  const Batch bin = make_batch(ds, order.data(), order.size());
  EXPECT_TRUE(torch::equal(text.dense, bin.dense));
  EXPECT_TRUE(torch::equal(text.rows, bin.rows));
  EXPECT_TRUE(torch::equal(text.labels, bin.labels));
  EXPECT_EQ(text.indices, std::vector<uint64_t>(starts.begin() + 100, starts.begin() + 400));  // the lines' offsets
  EXPECT_EQ(f.bytes_read(), f.size() + (starts[400] - starts[100]));  // exactly those lines, once more
}

TEST_F(TextTest, AMalformedLineIsAnErrorNamingTheFileAndTheLine) {
  std::string good = "1";
  for (int i = 0; i < kNumDense; ++i) good += "\t" + std::to_string(i);
  for (int i = 0; i < kNumSparse; ++i) good += "\t0000abcd";
  const std::string p = write("bad.tsv", good + "\n" + good + "\n" + "1\tx" + good.substr(1) + "\n" + good + "\n");
  const TextFile f(p);
  const auto starts = line_starts(f, {0, f.size()});
  ASSERT_EQ(starts.size(), 4u);
  EXPECT_NO_THROW((void)parse_text_batch(f, starts.data(), 2));
  try {
    (void)parse_text_batch(f, starts.data() + 1, 3);
    FAIL() << "a malformed line was parsed";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.tsv: line 3: field I1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddplab::data

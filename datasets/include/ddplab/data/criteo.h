// Criteo's text layout (Kaggle Display Advertising Challenge / Terabyte click logs): one sample per
// line, tab-separated: the label, 13 integer features I1..I13 and 26 categorical features C1..C26,
// each a 32-bit hash in hexadecimal; any feature may be empty (missing). `ddplab data import criteo`
// converts such files (plain or gzip) into the kit's binary shards with DLRM's preprocessing, and
// `ddplab data export tsv` writes a data set back in the same layout, so lab 08's raw input is
// real Criteo-layout text of a data set whose teacher is known.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ddplab/data/schema.h"
#include "ddplab/data/shard.h"

namespace ddplab::data {

inline constexpr int kCriteoFields = 1 + kNumDense + kNumSparse;  ///< 40 tab-separated fields a line
/// The shard format's range of a dense value: larger counts are clamped to it (and counted).
inline constexpr int64_t kMaxDenseCount = 1000000;

/// A line's values before the categorical mapping: the label, the dense features after DLRM's
/// preprocessing (missing and negative as 0, clamped to kMaxDenseCount, then log1p as float32) and
/// the categorical hashes (missing as 0).
struct CriteoRecord {
  uint32_t label = 0;
  float dense[kNumDense] = {};
  uint32_t hashes[kNumSparse] = {};
  int clamped = 0;  ///< dense values above kMaxDenseCount in this line
};

/// Parses one line (without its newline; a trailing carriage return is ignored). Returns an empty string when
/// the line is good, else what is wrong with it, naming the field ("field I3 (column 4): '12x' is
/// not an integer").
std::string parse_criteo_line(std::string_view line, CriteoRecord& out);

/// The line of `s` in Criteo's layout (no newline): the label, the dense counts recovered from
/// log1p (exact for the kit's data), the ids as 8 lowercase hex digits.
std::string format_criteo_line(const Sample& s);

/// How a categorical hash becomes an id in [0, kCardinality[f]).
enum class CategoricalMap {
  kHash,        ///< hash mod the field's cardinality (DLRM's --max-ind-range; exact for exported kit data)
  kVocabulary,  ///< per field, the hashes seen at least min_count times, most frequent first, get ids
                ///< 1, 2, ... up to the cardinality; the rest and missing values get 0
};

struct CriteoImportOptions {
  std::vector<std::string> inputs;  ///< files read in order as one stream; gzip is detected by content
  std::string out_dir;
  CategoricalMap map = CategoricalMap::kHash;
  uint64_t min_count = 1;       ///< vocabulary: fewer occurrences map to 0
  double test_fraction = 0.1;   ///< the last lines of the stream (this fraction of them) are the test split
  bool skip_malformed = false;  ///< count and skip bad lines instead of stopping at the first
  int threads = 0;              ///< parsing threads (0: all hardware threads)
  uint64_t shard_size = 262144;
};

struct CriteoImportResult {
  Metadata meta;
  uint64_t lines = 0;          ///< lines read
  uint64_t skipped = 0;        ///< malformed lines skipped (skip_malformed)
  uint64_t clamped = 0;        ///< dense values clamped to kMaxDenseCount
  uint64_t bytes = 0;          ///< text bytes parsed (after decompression)
  double parse_seconds = 0.0;  ///< wall time spent parsing (the threads' part)
  double seconds = 0.0;        ///< wall time of the whole import
  int threads = 1;
  /// bytes / (parse_seconds x threads) / 1e6: the parser's speed per thread.
  double mb_per_s_per_thread = 0.0;
};

/// Imports the inputs into out_dir (shards and meta.json, as `ddplab data gen` writes them; the
/// teacher fields are 0: imported data has no known teacher). meta.json is removed first and
/// written last, so an interrupted import never looks complete. Throws DataError naming the file
/// and line of the first malformed line (unless skip_malformed), or of any unreadable input.
CriteoImportResult import_criteo(const CriteoImportOptions& opts);

/// Writes `split` of the data set in `dir` to `out_path` in Criteo's layout, atomically (a
/// temporary, then rename; the file's folder is made if it does not exist). limit > 0 writes only the first `limit`
/// samples. Returns the lines.
uint64_t export_tsv(const std::string& dir, Split split, const std::string& out_path, uint64_t limit = 0);

}  // namespace ddplab::data

// The versioned per-rank run report (design.md, "Run report"): everything the grader needs to
// check a run without trusting the lab's own conclusions. Schema: docs/concepts/metrics.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "ddplab/timer.h"

namespace ddplab {

inline constexpr const char* kReportSchema = "ddplab.run-report";
inline constexpr int kReportVersion = 1;

/// Order-independent and order-dependent digests of the sample indices one rank saw in one
/// epoch. The set digest is a sum of hashes, so the grader can add the ranks' digests and compare
/// with the digest of [0, N) it computes itself: equal (with overwhelming probability) exactly
/// when every sample was seen once. The order digest changes when the visiting order changes.
class SampleLedger {
 public:
  void add(uint64_t index);
  void add(const std::vector<uint64_t>& indices);
  uint64_t count() const noexcept { return count_; }
  uint64_t set_digest() const noexcept { return set_; }
  uint64_t order_digest() const noexcept { return order_; }
  /// The first indices seen (up to 16), for a readable diagnosis.
  const std::vector<uint64_t>& head() const noexcept { return head_; }
  /// Which indices were seen, as a bitmap (bit i%64 of word i/64), while every index is below
  /// kSeenCap (2^24: 2 MiB); empty with seen_complete() false past it. The grader ORs the ranks'
  /// bitmaps to count the distinct samples of an epoch exactly, where the digests only tell
  /// "each once" or "every rank the same".
  const std::vector<uint64_t>& seen() const noexcept { return seen_; }
  bool seen_complete() const noexcept { return seen_complete_; }
  static constexpr uint64_t kSeenCap = uint64_t{1} << 24;
  /// Set digest of the index range [first, first + n), as the ledger of a complete pass computes it.
  static uint64_t range_set_digest(uint64_t first, uint64_t n);
  static uint64_t hash(uint64_t index);

 private:
  uint64_t count_ = 0, set_ = 0, order_ = 0xcbf29ce484222325ULL;
  std::vector<uint64_t> head_;
  std::vector<uint64_t> seen_;
  bool seen_complete_ = true;
};

/// The report's form of a SampleLedger bitmap (base64 of its little-endian 64-bit words), and
/// back; decode_seen throws ddplab::Error naming `what` for anything that is not such a string.
std::string encode_seen(const std::vector<uint64_t>& words);
std::vector<uint64_t> decode_seen(const std::string& text, const std::string& what);
/// Appends an epoch entry's `seen` bitmap (RunReport::add_epoch) to `out`, if the entry has one;
/// a malformed one throws as decode_seen, naming `what`. epoch_unique_samples uses the bitmaps only
/// when every rank's is there.
void append_seen(const nlohmann::json& epoch, const std::string& what, std::vector<std::vector<uint64_t>>& out);

/// Distinct samples of one epoch of a job, from its ranks' set digests and sample counts for that
/// epoch (SampleLedger) over a training set of n samples. With every rank's `seen` bitmap (one
/// per rank, as the reports carry them below SampleLedger::kSeenCap samples): the indices below n
/// in their union, exactly. Without: n when the digests add up to [0, n)'s (each sample once),
/// one rank's count when every rank saw the same set (no sampler: N copies of one rank's work),
/// else the samples processed, capped at n (`exact` false: the digests tell no more). The
/// grader's scaling check and `ddplab price` count with it.
struct EpochUnique {
  uint64_t unique = 0;
  bool exact = true;
  bool replicated = false;  ///< every rank saw the same samples
};
EpochUnique epoch_unique_samples(const std::vector<uint64_t>& set_digests, const std::vector<uint64_t>& samples,
                                 uint64_t n, const std::vector<std::vector<uint64_t>>& seen = {});

/// FNV-1a digest over the bytes of every parameter and buffer, in registration order, as
/// 16 hex digits. Two ranks hold bit-identical models exactly when the digests agree (modulo
/// collisions); computed on a CPU copy, so the device does not matter.
std::string parameter_digest(const torch::nn::Module& module);
/// One digest per named parameter and buffer ("mlp.0.weight": "..."): which tensor differs when two
/// ranks' parameter_digest differ (the report's params.final_by_name).
nlohmann::json parameter_digests_by_name(const torch::nn::Module& module);

/// Formats a 64-bit digest as 16 lower-case hex digits.
std::string hex64(uint64_t v);
/// The digest hex64 wrote; ddplab::Error "what: 's' is not a hex digest" for anything else.
uint64_t parse_hex64(const std::string& s, const std::string& what);

/// Builder for one rank's report; every section is optional until write().
class RunReport {
 public:
  RunReport(std::string lab, int rank, int world_size);

  nlohmann::json& json() noexcept { return j_; }
  const nlohmann::json& json() const noexcept { return j_; }

  void set_config(const nlohmann::json& config);
  void set_device(const std::string& device, int threads);
  /// status: "ok", "not_attempted" (exercise ids listed) or "error" (with the message).
  void set_status(const std::string& status, const std::string& message = "");
  void add_not_attempted(const std::string& exercise);
  const std::vector<std::string>& not_attempted() const noexcept { return not_attempted_; }
  void add_step(int64_t epoch, double loss);
  void add_epoch(int64_t epoch, int64_t steps, const SampleLedger& ledger, double seconds);
  void set_phases(const StepTimer& timer);
  void set_samples(uint64_t processed, uint64_t unique);
  void set_params(const std::string& initial_digest, const std::string& final_digest, int64_t count);
  void set_eval(double auc, double logloss, uint64_t samples, double teacher_auc, double teacher_logloss);
  /// Peak RSS and CUDA peak, read now.
  void capture_memory();

  /// One fact the lab established, recorded once and said once: writes
  /// `verdicts.<id> = {"ok": ok, "said": said, "figures": figures}` and prints `said` (rank 0:
  /// info when ok, a warning when not; `every_rank`: each rank prints its own). The grader's
  /// `verdict` check reads the record, so rewording `said` never moves a grade. An id is one word
  /// of [a-z0-9_]; a second verdict with the same id replaces the first (ddplab::Error otherwise
  /// for a bad id).
  void verdict(const std::string& id, bool ok, const std::string& said,
               const nlohmann::json& figures = nlohmann::json::object(), bool every_rank = false);

  /// Writes the report to `path` atomically (temporary file + rename); creates parent folders.
  void write(const std::string& path) const;
  /// Reads and checks the schema name and version; throws ddplab::Error naming the file.
  static nlohmann::json load(const std::string& path);

 private:
  nlohmann::json j_;
  std::vector<std::string> not_attempted_;
};

/// Writes `text` to `path` via a temporary file in the same folder and rename(2), so a reader
/// never sees a half-written file. Throws ddplab::Error naming the path.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace ddplab

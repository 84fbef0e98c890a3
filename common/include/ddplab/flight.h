// The flight recorder's record of collectives and what the kit does with it (lab 11): a rank's
// last collectives, dumped to a file when a collective times out, and the merge of every rank's
// dump into one table that says which rank waits in which collective for whom (`ddplab flight`).
// The ring that keeps the entries is the student's (lab 11, 11.2); the entry, the dump's format
// and the merge are here so that the tool reads any lab's dumps. PyTorch's counterpart is the NCCL
// flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE, dumped on the watchdog's timeout): same idea, its
// own format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddplab/dist/communicator.h"

namespace ddplab::flight {

/// Where a collective is: enqueued (the program asked for it, the transport may not have it
/// yet), completed on this rank, or failed (its wait threw: a timeout, a closed connection).
enum class State { kEnqueued = 0, kCompleted, kFailed };
const char* state_name(State s);

/// One collective as this rank issued it.
struct Entry {
  int64_t seq = 0;  ///< the rank's collective number: 0 for its first
  dist::Op op = dist::Op::kCount;
  std::vector<int64_t> shape;  ///< of the tensor this rank gave it
  std::string dtype;           ///< "float", "long", ...
  double enqueued_s = 0;       ///< seconds since the recorder started
  double ended_s = -1;         ///< when it completed or failed; -1 while enqueued
  State state = State::kEnqueued;
  bool operator==(const Entry& o) const {
    return seq == o.seq && op == o.op && shape == o.shape && dtype == o.dtype && state == o.state;
  }
};
/// "allreduce float[4096]".
std::string describe(const Entry& e);

/// One rank's dump: its entries, oldest first, and why it was written.
struct Dump {
  int rank = 0;
  int world = 1;
  std::string reason;   ///< "collective #12 timed out", "asked by rank 0"
  double dumped_s = 0;  ///< when, on the recorder's clock
  std::vector<Entry> entries;
};
nlohmann::json to_json(const Dump& d);
/// Throws ddplab::Error naming `where` (a file) and the field on a malformed dump.
Dump from_json(const nlohmann::json& j, const std::string& where);
/// rank<R>.json in `dir`, written to a temporary name and renamed.
std::string dump_path(const std::string& dir, int rank);
void write_dump(const std::string& dir, const Dump& d);
/// Every rank<R>.json of `dir` for R in [0, world): a rank without a file is nullopt. `world` 0:
/// the world of the first dump found. Throws ddplab::Error if there is none at all.
std::vector<std::optional<Dump>> read_dumps(const std::string& dir, int world = 0);

/// What the merged dumps say about a job that stopped making progress.
struct Stall {
  /// The first collective some rank did not complete, or that the ranks issued differently; -1
  /// when every dumped rank completed everything it recorded and none disagrees.
  int64_t seq = -1;
  /// Why: "mismatch" (ranks issued different collectives as #seq), "not entered" (ranks waited in
  /// #seq that others never reached) or "no dump" (the ranks holding it up left no dump: dead or
  /// frozen), "" when seq is -1.
  std::string cause;
  std::vector<int> waiting;  ///< ranks inside #seq (enqueued or failed there)
  std::vector<int> holding;  ///< ranks the waiting ones wait for: not at #seq, or issuing another one
  std::string said;          ///< one sentence naming all of it
};
/// Merges the dumps (index = rank; nullopt = no dump) into the stall. A rank's position is its
/// first entry that is not completed, else one past its last entry: the stall is at the lowest
/// position of any rank, unless two ranks recorded collective k differently for an earlier k, which is then
/// the stall and a mismatch.
Stall diagnose(const std::vector<std::optional<Dump>>& dumps);
/// The table `ddplab flight` prints: a row per collective number around the stall (the last
/// `rows` of them), a column per rank, then the diagnosis.
std::string table(const std::vector<std::optional<Dump>>& dumps, const Stall& stall, int rows = 8);

}  // namespace ddplab::flight

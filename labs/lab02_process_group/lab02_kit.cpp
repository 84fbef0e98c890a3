// Lab 02's apparatus (see lab02_kit.h). Not edited by students.
#include "lab02_kit.h"

#include <algorithm>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "ddplab/dist/agree.h"
#include "ddplab/log.h"

namespace lab02 {

std::pair<std::shared_ptr<ddplab::dist::ProcessGroup>, bool> join_with_student_environment(ddplab::LabRun& run) {
  try {
    const ddplab::dist::Environment env = environment_from_launcher();
    if (!run.environment().same_job(env)) {
      throw ddplab::ConfigError(fmt::format("environment_from_launcher() says {}, the launcher says {}", env.describe(),
                                            run.environment().describe()));
    }
    return {run.join(env), true};
  } catch (const ddplab::NotImplemented& e) {
    run.not_attempted(e);
    if (run.world_size() > 1) {
      ddplab::log::warn("rank {} trains alone: without 02.1 the {} processes never talk", run.rank(), run.world_size());
    }
    return {run.join(ddplab::dist::Environment{}), false};
  }
}

Bill bill_of(const std::vector<std::vector<uint64_t>>& all, int64_t epoch, double seconds) {
  Bill b;
  b.epoch = epoch;
  b.seconds = std::max(seconds, 1e-9);
  b.ranks = static_cast<int>(all.size());
  std::set<uint64_t> sets;
  for (size_t r = 0; r < all.size(); ++r) {
    b.processed += all[r].at(0);
    if (sets.insert(all[r].at(1)).second) b.unique += all[r][0];
    if (r > 0 && all[r][1] == all[0][1] && all[r][0] > 0) ++b.repeated;
  }
  b.distinct_sets = sets.size();
  return b;
}

nlohmann::json Bill::json() const {
  return {{"epoch", epoch},
          {"seconds", seconds},
          {"processed_all_ranks", processed},
          {"unique", unique},
          {"distinct_sample_sets", distinct_sets},
          {"ranks_repeating_rank0", repeated},
          {"processed_per_s", processed / seconds},
          {"unique_per_s", unique / seconds}};
}

std::string Bill::describe() const {
  return fmt::format(
      "epoch {}: {} rank(s) processed {} samples, {} of them unique ({} distinct sample set(s))\n"
      "epoch {}: {:.1f} s; processed {:.0f} samples/s, unique {:.0f} samples/s\n"
      "epoch {}: {} of {} processes repeated rank 0's work ({:.1f}x the work for the unique samples)",
      epoch, ranks, processed, unique, distinct_sets, epoch, seconds, processed / seconds, unique / seconds, epoch,
      repeated, ranks, unique > 0 ? static_cast<double>(processed) / static_cast<double>(unique) : 0.0);
}

Bill epoch_bill(ddplab::LabRun& run, ddplab::dist::Communicator& comm, const ddplab::EpochSummary& done) {
  const Bill b = bill_of(ddplab::dist::allgather_u64(comm, {done.samples.count(), done.samples.set_digest()}),
                         done.epoch, done.seconds);
  std::stringstream lines(b.describe());
  std::string first;
  std::getline(lines, first);
  run.report().verdict("work_counted", true, first, b.json());  // printed once: the first line
  run.report().json()["lab02"]["epochs"].push_back(b.json());
  for (std::string line; std::getline(lines, line);) ddplab::log::info0("{}", line);
  return b;
}

void record_job(ddplab::LabRun& run, bool joined, bool averaging) {
  run.report().json()["lab02"]["joined"] = joined;
  run.report().json()["lab02"]["averaging"] = averaging;
}

}  // namespace lab02

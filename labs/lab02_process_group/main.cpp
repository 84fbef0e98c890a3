// Lab 02 driver: N processes started by a launcher. Each rank builds its own model (seeded with
// --seed + rank, like the incident's script), joins the job with the student's environment,
// starts from rank 0's weights and averages gradients — and, with no sampler yet, every rank
// trains on the WHOLE training set, so the run ends by putting a number on that waste.
// Not edited by students.
#include <algorithm>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "lab02.h"

#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"
#include "ddplab/train.h"

namespace {

using namespace ddplab;

/// 02.1: joins the job with the student's reading of the environment, which must agree with the
/// launcher's. Until it exists every process is a world of its own (an in-memory group of 1):
/// N independent trainers. Returns the group and whether the job was joined.
std::pair<std::shared_ptr<dist::ProcessGroup>, bool> join_with_student_environment(LabRun& run) {
  try {
    const dist::Environment env = lab02::environment_from_launcher();
    if (!run.environment().same_job(env)) {
      throw ConfigError(fmt::format("environment_from_launcher() says {}, the launcher says {}", env.describe(),
                                    run.environment().describe()));
    }
    return {run.join(env), true};
  } catch (const NotImplemented& e) {
    run.not_attempted(e);
    if (run.world_size() > 1)
      log::warn("rank {} trains alone: without 02.1 the {} processes never talk", run.rank(), run.world_size());
    return {run.join(dist::Environment{}), false};
  }
}

/// The bill of one epoch: samples processed by all ranks vs distinct samples. Ranks' sample sets
/// are either identical (no sampler) or disjoint (a sampler), so the unique count is the sum of
/// the counts of the distinct set digests. Collective.
nlohmann::json epoch_bill(dist::Communicator& comm, const EpochSummary& done) {
  const auto all = dist::allgather_u64(comm, {done.samples.count(), done.samples.set_digest()});
  uint64_t processed = 0, unique = 0;
  std::set<uint64_t> sets;
  int repeated = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    processed += all[r][0];
    if (sets.insert(all[r][1]).second) unique += all[r][0];
    if (r > 0 && all[r][1] == all[0][1] && all[r][0] > 0) ++repeated;
  }
  const double secs = std::max(done.seconds, 1e-9), p_rate = processed / secs, u_rate = unique / secs;
  const int64_t epoch = done.epoch;
  log::info0("epoch {}: {} rank(s) processed {} samples, {} of them unique ({} distinct sample set(s))", epoch,
             all.size(), processed, unique, sets.size());
  log::info0("epoch {}: {:.1f} s; processed {:.0f} samples/s, unique {:.0f} samples/s", epoch, secs, p_rate, u_rate);
  log::info0("epoch {}: {} of {} processes repeated rank 0's work ({:.1f}x the work for the unique samples)", epoch,
             repeated, all.size(), unique > 0 ? static_cast<double>(processed) / static_cast<double>(unique) : 0.0);
  return {{"epoch", epoch},
          {"seconds", secs},
          {"processed_all_ranks", processed},
          {"unique", unique},
          {"distinct_sample_sets", sets.size()},
          {"ranks_repeating_rank0", repeated},
          {"processed_per_s", p_rate},
          {"unique_per_s", u_rate}};
}

}  // namespace

int main(int argc, char** argv) {
  LabProgram program;
  bool own_batches = false;
  program.name = DDPLAB_LAB_NAME;
  // A grading flag: with every rank on the same batches, a sync that leaves some gradient out (or
  // none at all) still ends with equal replicas. With their own batches they stay equal only if
  // 02.3 averages every gradient.
  program.add_flags = [&](LabFlags& f) {
    f.flag("--own-batches", own_batches,
           "Each rank shuffles with --seed + rank, so ranks see different batches (the grader's test of 02.3)");
  };
  program.description = "Lab 02: a process group — same start, averaged gradients, and (no sampler yet) N x the work";
  program.body = [&own_batches](LabRun& run) {
    const int world = run.world_size();
    // Not a structured binding: lambdas below capture `comm`, which C++17 allows only for variables.
    const auto joined_group = join_with_student_environment(run);
    const std::shared_ptr<dist::ProcessGroup> comm = joined_group.first;
    const bool talking = joined_group.second || world == 1;

    // The incident's initialisation: each process seeds its own model differently.
    torch::manual_seed(run.options().seed + static_cast<uint64_t>(run.rank()));
    DeepFM model;
    model->to(run.device());

    // 02.2: everyone starts from rank 0's weights.
    run.attempt([&] { lab02::broadcast_parameters(*comm, *model); });
    // Whether every rank holds the same parameters, printed and recorded: only ranks that talk can tell.
    nlohmann::json summary;
    auto compare_params = [&](const char* when) {
      std::string digest;
      const auto agree = dist::compare_parameters(*comm, *model, &digest);
      log::info0("parameters at the {}: {} (rank 0: {})", when, agree.describe(), digest);
      summary[fmt::format("{}_params_identical", when)] = agree.same();
    };
    if (talking) compare_params("start");

    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    // 02.3 as the step's gradient sync. Until it exists each rank keeps its own gradients.
    bool averaging = true;
    auto sync = dist::make_function_sync(*comm, model->parameters(), [&] {
      averaging = averaging && run.attempt([&] { lab02::average_gradients(*comm, *model); });
    });
    const uint64_t n = run.train_size();
    run.start_training(model.ptr(), run.steps_per_epoch(n));
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      // No sampler: every rank walks the WHOLE training set, in the same shuffled order (each in its
      // own with --own-batches).
      const uint64_t seed = run.options().seed + (own_batches ? static_cast<uint64_t>(run.rank()) : 0);
      data::BatchLoader loader(run.train(), data::shuffled_order(n, seed, static_cast<uint64_t>(epoch)), run.batch(),
                               run.device());
      const EpochSummary& done = run.run_epoch(epoch, loader, [&](const data::Batch& b) {
        return train_step(model, optimizer, b, run.timer(), sync.get());
      });
      if (talking) summary["epochs"].push_back(epoch_bill(*comm, done));
    }

    if (talking) {
      compare_params("end");
    } else {
      log::info0(
          "how many of the {} ranks' samples were unique, and whether their parameters agree, cannot be known: "
          "the ranks never talk (02.1); compare params.final_digest in the ranks' reports",
          world);
    }
    summary["joined"] = joined_group.second;
    summary["averaging"] = averaging;
    run.report().json()["lab02"] = summary;

    // Rank 0's model speaks for the job (which is only right when all ranks hold the same one).
    if (talking) {
      run.evaluate_on_rank0(model, *comm);
      return;
    }
    // N independent trainers: every rank evaluates its own model, to show that they differ.
    const EvalResult own = evaluate_model(model, run.test(), run.eval_size(), run.batch(), run.device());
    log::info("test AUC of rank {}'s own model: {:.4f} (log-loss {:.4f})", run.rank(), own.auc, own.logloss);
    if (run.rank() == 0) run.set_eval(own);
    run.finish_together();
  };
  return run_lab(program, argc, argv);
}

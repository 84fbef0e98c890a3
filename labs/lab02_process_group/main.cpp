// Lab 02 driver: N processes started by a launcher. Each rank builds its own model (seeded with
// --seed + rank, like the incident's script), joins the job with the student's environment,
// starts from rank 0's weights and averages gradients — and, with no sampler yet, every rank
// trains on the WHOLE training set, so the run ends by putting a number on that waste.
// Not edited by students.
#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "lab02.h"

#include "ddplab/dist/process_group.h"
#include "ddplab/evaluate.h"
#include "ddplab/log.h"
#include "ddplab/train.h"

namespace {

using ddplab::dist::Communicator;

/// Every rank's `mine` (same length on every rank), in rank order.
std::vector<std::vector<uint64_t>> gather_u64(Communicator& comm, const std::vector<uint64_t>& mine) {
  const auto n = static_cast<int64_t>(mine.size());
  torch::Tensor in = torch::empty({n}, torch::kInt64);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int64_t>(mine[static_cast<size_t>(i)]);
  std::vector<torch::Tensor> out(static_cast<size_t>(comm.size()));
  for (auto& o : out) o = torch::empty({n}, torch::kInt64);
  comm.allgather(out, in);
  std::vector<std::vector<uint64_t>> all;
  for (const auto& o : out) {
    std::vector<uint64_t> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<uint64_t>(o[i].item<int64_t>()));
    all.push_back(std::move(v));
  }
  return all;
}

/// Whether every rank holds the same parameters: compares the ranks' parameter digests.
bool params_identical(Communicator& comm, const torch::nn::Module& model, std::string* digest) {
  *digest = ddplab::parameter_digest(model);
  const auto all = gather_u64(comm, {std::stoull(*digest, nullptr, 16)});
  for (const auto& d : all) {
    if (d[0] != all[0][0]) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddplab;
  LabProgram program;
  program.name = "lab02";
  program.description = "Lab 02: a process group — same start, averaged gradients, and (no sampler yet) N x the work";
  program.body = [](LabRun& run) {
    const int world = run.world_size();
    const int rank = run.rank();
    dist::ProcessGroupOptions po;
    po.timeout = std::chrono::milliseconds(static_cast<int64_t>(run.options().comm_timeout * 1000));

    // 02.1: join the job with the student's reading of the environment. Until it exists every
    // process is a world of its own (an in-memory group of 1): N independent trainers.
    std::shared_ptr<dist::ProcessGroup> comm;
    bool joined = false;
    try {
      const dist::Environment env = lab02::environment_from_launcher();
      const dist::Environment& launcher = run.environment();
      if (env.rank != launcher.rank || env.world_size != launcher.world_size ||
          (launcher.distributed() && (env.master_addr != launcher.master_addr || env.master_port != launcher.master_port))) {
        throw ConfigError(fmt::format("environment_from_launcher() says {}, the launcher says {}", env.describe(),
                                      launcher.describe()));
      }
      comm = dist::ProcessGroup::join(env, run.device(), po);
      joined = true;
    } catch (const NotImplemented& e) {
      run.not_attempted(e);
      comm = dist::ProcessGroup::join(dist::Environment{}, run.device(), po);
      if (world > 1) log::warn("rank {} trains alone: without 02.1 the {} processes never talk", rank, world);
    }
    run.set_communicator(comm);
    const bool talking = joined || world == 1;

    // The incident's initialisation: each process seeds its own model differently.
    torch::manual_seed(run.options().seed + static_cast<uint64_t>(rank));
    DeepFM model;
    model->to(run.device());

    // 02.2: everyone starts from rank 0's weights.
    try {
      lab02::broadcast_parameters(*comm, *model);
    } catch (const NotImplemented& e) {
      run.not_attempted(e);
    }
    std::string digest;
    nlohmann::json summary;
    if (talking) {
      const bool same = params_identical(*comm, *model, &digest);
      summary["start_params_identical"] = same;
      log::info0("parameters at the start: {} on all {} rank(s)", same ? "identical" : "DIFFERENT", world);
    }

    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(run.lr()));
    const int64_t batch = run.options().batch;
    const uint64_t n = run.train_size();
    const int64_t steps_per_epoch = (static_cast<int64_t>(n) + batch - 1) / batch;
    run.start_training(model.ptr(), steps_per_epoch);

    bool averaging = true;
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      run.begin_epoch(epoch);
      SampleLedger ledger;  // what this rank saw this epoch, to compare across ranks below
      // No sampler: every rank walks the WHOLE training set, in the same shuffled order.
      data::BatchLoader loader(run.train(), data::shuffled_order(n, run.options().seed, static_cast<uint64_t>(epoch)),
                               batch, run.device());
      data::Batch b;
      while (run.next_batch(loader, b)) {
        auto& timer = run.timer();
        optimizer.zero_grad();
        torch::Tensor loss;
        {
          auto s = timer.scope(Phase::kForward);
          loss = torch::binary_cross_entropy_with_logits(model->forward(b.dense, b.rows), b.labels);
        }
        {
          auto s = timer.scope(Phase::kBackward);
          loss.backward();
        }
        if (averaging) {
          auto s = timer.scope(Phase::kComm);
          try {
            lab02::average_gradients(*comm, *model);  // 02.3
          } catch (const NotImplemented& e) {
            run.not_attempted(e);
            averaging = false;  // each rank keeps its own gradients from now on
          }
        }
        {
          auto s = timer.scope(Phase::kOptimizer);
          optimizer.step();
        }
        ledger.add(b.indices);
        run.end_step(b, loss.item<double>());
      }
      run.end_epoch();

      // The bill: samples processed by all ranks vs distinct samples. Ranks' sample sets are
      // either identical (no sampler) or disjoint (a sampler), so the unique count is the sum of
      // the counts of the distinct set digests.
      const double secs = run.report().json()["epochs"].back()["seconds"].get<double>();
      nlohmann::json ej = {{"epoch", epoch}, {"seconds", secs}, {"samples_this_rank", ledger.count()}};
      if (talking) {
        const auto all = gather_u64(*comm, {ledger.count(), ledger.set_digest()});
        uint64_t processed = 0, unique = 0;
        std::set<uint64_t> sets;
        int repeated = 0;
        for (size_t r = 0; r < all.size(); ++r) {
          processed += all[r][0];
          if (sets.insert(all[r][1]).second) unique += all[r][0];
          if (r > 0 && all[r][1] == all[0][1] && all[r][0] > 0) ++repeated;
        }
        const double p_rate = secs > 0 ? static_cast<double>(processed) / secs : 0.0;
        const double u_rate = secs > 0 ? static_cast<double>(unique) / secs : 0.0;
        ej.update({{"processed_all_ranks", processed},
                   {"unique", unique},
                   {"distinct_sample_sets", sets.size()},
                   {"ranks_repeating_rank0", repeated},
                   {"processed_per_s", p_rate},
                   {"unique_per_s", u_rate}});
        log::info0("epoch {}: {} rank(s) processed {} samples, {} of them unique ({} distinct sample set(s))", epoch,
                   world, processed, unique, sets.size());
        log::info0("epoch {}: {:.1f} s; processed {:.0f} samples/s, unique {:.0f} samples/s", epoch, secs, p_rate, u_rate);
        log::info0("epoch {}: {} of {} processes repeated rank 0's work ({:.1f}x the work for the unique samples)", epoch,
                   repeated, world, unique > 0 ? static_cast<double>(processed) / static_cast<double>(unique) : 0.0);
      } else {
        log::info0("epoch {}: rank 0 processed {} samples in {:.1f} s; how many of the {} ranks' samples were unique "
                   "cannot be known: the ranks never talk (02.1)",
                   epoch, ledger.count(), secs, world);
      }
      summary["epochs"].push_back(ej);
    }

    if (talking) {
      const bool same = params_identical(*comm, *model, &digest);
      summary["end_params_identical"] = same;
      log::info0("parameters at the end: {} on all {} rank(s) (rank 0: {})", same ? "identical" : "DIFFERENT", world,
                 digest);
    } else {
      log::info0("parameters at the end cannot be compared from inside the job: the ranks never talk; compare "
                 "params.final_digest in the ranks' reports");
    }
    summary["joined"] = joined;
    summary["averaging"] = averaging;
    run.report().json()["lab02"] = summary;

    // Rank 0's model speaks for the job (which is only right when all ranks hold the same one).
    if (talking) {
      if (rank == 0) run.set_eval(evaluate_model(model, run.test(), run.eval_size(), batch, run.device()));
    } else {
      // N independent trainers: every rank evaluates its own model, to show that they differ.
      const EvalResult own = evaluate_model(model, run.test(), run.eval_size(), batch, run.device());
      log::info("test AUC of rank {}'s own model: {:.4f} (log-loss {:.4f})", rank, own.auc, own.logloss);
      if (rank == 0) run.set_eval(own);
    }
    if (joined) {
      comm->barrier();
    } else if (world > 1) {
      // Finish together through the launcher's rendezvous, used for nothing else: `ddplab launch`
      // stops every rank as soon as one exits with a non-zero status (3: not attempted), and a
      // rank still evaluating would lose its report.
      dist::ProcessGroup::join(run.environment(), run.device(), po)->barrier();
    }
  };
  return run_lab(program, argc, argv);
}

// Lab 06 driver: data-parallel DeepFM at large global batches. The global batch is the student's
// derive_global_batch (06.3) of the launcher's world size, --batch per rank and --accumulate k
// micro-batches per optimizer step, taken by the student's Accumulator under no_sync (06.2). The
// optimizer has two parameter groups, {embeddings, dense layers}, whose learning rates follow the
// student's schedules (06.1): --lr at --base-batch, scaled by --lr-rule (dense) and
// --embedding-rule, with --warmup-steps of linear warm-up. The run prints the global batch, the
// rules and the learning rates, and checks what it can see from outside: the groups of
// micro-steps and the divisor of each loss, one gradient sync per optimizer step, and a schedule
// that counts optimizer steps. Not edited by students.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "lab06.h"

#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"

namespace {

using namespace ddplab;

/// Which exercises the submission has, each tried once on something tiny (so that a skeleton run
/// lists every missing one, and a stub met mid-training cannot stop the run): 06.1 on a
/// two-group optimizer, 06.2 on a one-micro-step epoch of a tiny model (one small all-reduce on
/// every rank), 06.3 on a world of one. A failure other than a stub is reported and met again.
struct Present {
  bool schedule = false, accumulator = false, global_batch = false;
};

Present probe_exercises(LabRun& run, dist::Communicator& comm) {
  Present p;
  p.schedule = run.probe("the schedule (06.1)", [] {
    torch::nn::Linear a(1, 1), b(1, 1);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(a->parameters(), std::make_unique<torch::optim::SGDOptions>(1.0));
    groups.emplace_back(b->parameters(), std::make_unique<torch::optim::SGDOptions>(1.0));
    torch::optim::SGD sgd(std::move(groups), torch::optim::SGDOptions(1.0));
    lab06::Schedule s;
    (void)lab06::target_lr(s);
    (void)lab06::lr_at(s, 0);
    lab06::apply_schedules(sgd, {s, s}, 0);
  });
  p.accumulator = run.probe("the accumulator (06.2)", [&comm] {
    torch::nn::Linear lin(2, 1);
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kPerParam, comm, lin->parameters());
    lab06::Accumulator acc(*sync, 1);
    lab06::MicroStepFns fns;
    fns.forward = [&] { return lin->forward(torch::ones({1, 2})).sum(); };
    fns.backward = [&](const torch::Tensor& loss) {
      sync->before_backward(loss);
      loss.backward();
    };
    fns.finish = [&] { sync->finish(); };
    fns.step = [](int64_t) {};
    fns.zero_grad = [&] { lin->zero_grad(); };
    acc.begin_epoch(1);
    acc.micro_step(fns);
  });
  p.global_batch = run.probe("the global batch (06.3)", [] {
    (void)lab06::make_schedules(lab06::derive_global_batch(dist::Environment{}, 1, 1), lab06::LrFlags{});
  });
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t accumulate = 1, base_batch = 512, warmup_steps = 0;
  std::string rule_name = "linear", embedding_rule_name = "same", optimizer_name = "adam";
  LabProgram program;
  program.name = DDPLAB_LAB_NAME;
  program.description = "Lab 06: large global batches — learning-rate rules, warm-up, gradient accumulation";
  program.lr_scaling_flag = false;  // --lr-rule and the student's schedules set the rate
  program.add_flags = [&](LabFlags& f) {
    f.option("--accumulate", accumulate, "Micro-batches of --batch per optimizer step (gradient accumulation)")
        ->check(CLI::PositiveNumber);
    f.option("--lr-rule", rule_name, "How the dense layers' learning rate follows the global batch: none, linear, sqrt")
        ->check(CLI::IsMember({"none", "linear", "sqrt"}));
    f.option("--embedding-rule", embedding_rule_name, "The embeddings' rule: same (as --lr-rule), none, linear, sqrt")
        ->check(CLI::IsMember({"same", "none", "linear", "sqrt"}));
    f.option("--base-batch", base_batch, "The global batch --lr was tuned at")->check(CLI::PositiveNumber);
    f.option("--warmup-steps", warmup_steps, "Optimizer steps of linear warm-up from --lr to the scaled rate")
        ->check(CLI::NonNegativeNumber);
    f.option("--optimizer", optimizer_name,
             "adam (the kit's) or sgd (plain; every gradient error shows in the weights)")
        ->check(CLI::IsMember({"adam", "sgd"}));
  };
  program.body = [&](LabRun& run) {
    auto comm = run.join();
    const Present have = probe_exercises(run, *comm);
    const int64_t B = run.batch();
    const int world = run.world_size();
    const bool rank0 = run.rank() == 0;

    // 06.3: the global batch and the schedules, from the job. Without 06.3 the driver makes them
    // itself, labelled as its own, so that 06.1 and 06.2 stay gradable.
    lab06::LrFlags flags;
    flags.base_lr = run.options().lr;
    flags.base_batch = base_batch;
    flags.rule = lab06::parse_rule(rule_name);
    flags.embedding_rule = embedding_rule_name == "same" ? flags.rule : lab06::parse_rule(embedding_rule_name);
    flags.warmup_steps = warmup_steps;
    lab06::GlobalBatch gb{world, B, accumulate, world * B * accumulate};
    std::vector<lab06::Schedule> schedules;
    if (have.global_batch) {
      gb = lab06::derive_global_batch(run.environment(), B, accumulate);
      schedules = lab06::make_schedules(gb, flags);
    } else {
      lab06::Schedule s;
      s.base_lr = flags.base_lr;
      s.base_batch = base_batch;
      s.global_batch = gb.global_batch;
      s.warmup_steps = warmup_steps;
      schedules = {s, s};
      schedules[0].rule = flags.embedding_rule;
      schedules[1].rule = flags.rule;
    }
    if (schedules.size() != 2) {
      throw Error(
          fmt::format("make_schedules returned {} schedule(s); the optimizer has 2 parameter groups "
                      "(embeddings, dense)",
                      schedules.size()));
    }
    std::array<double, 2> target{};
    if (have.schedule) {
      for (size_t g = 0; g < 2; ++g) target[g] = lab06::target_lr(schedules[g]);
    }
    const char* names[2] = {"embeddings", "dense"};
    log::info0("global batch {} = {} rank(s) x {} per rank x {} micro-batch(es), {}", gb.global_batch, gb.world_size,
               gb.per_rank_batch, gb.accumulation,
               have.global_batch ? "derived from the job" : "the driver's (06.3 not attempted)");
    for (size_t g = 0; g < 2; ++g) {
      const auto& s = schedules[g];
      log::info0("learning rate of the {}{}: {} rule, {:g} at batch {} -> {} at batch {}, warm-up {} optimizer step(s)",
                 names[g], have.global_batch ? "" : " (the driver's schedule)", lab06::rule_name(s.rule), s.base_lr,
                 s.base_batch, have.schedule ? fmt::format("{:g}", target[g]) : "? (06.1 not attempted)",
                 s.global_batch, s.warmup_steps);
    }
    if (!have.schedule && rank0) log::warn("06.1 not attempted: every step at --lr, unscaled");
    if (!have.accumulator && rank0)
      log::warn("06.2 not attempted: one micro-batch per optimizer step, no accumulation");

    DeepFM model;
    model->to(run.device());
    dist::broadcast_module(*comm, *model, 0);
    std::vector<torch::Tensor> embeddings, dense;
    for (const auto& item : model->named_parameters()) {
      const bool emb = item.key().rfind("embedding.", 0) == 0 || item.key().rfind("first_order.", 0) == 0;
      (emb ? embeddings : dense).push_back(item.value());
    }
    // Two groups at --lr; the schedule sets each group's rate before every step.
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    std::vector<torch::optim::OptimizerParamGroup> groups;
    if (optimizer_name == "adam") {
      for (auto* p : {&embeddings, &dense})
        groups.emplace_back(*p, std::make_unique<torch::optim::AdamOptions>(flags.base_lr));
      optimizer = std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(flags.base_lr));
    } else {
      for (auto* p : {&embeddings, &dense})
        groups.emplace_back(*p, std::make_unique<torch::optim::SGDOptions>(flags.base_lr));
      optimizer = std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(flags.base_lr));
    }
    const std::vector<torch::Tensor> params = model->parameters();
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kBucketed, *comm, params);

    // Micro-steps: whole micro-batches of world x B (the runtime's global batch, k not counted);
    // every rank takes the same number.
    const int64_t micro_steps = run.whole_global_batches();
    run.start_training(model.ptr(), micro_steps);

    const int64_t k_used = have.accumulator ? accumulate : 1;
    std::unique_ptr<lab06::Accumulator> acc;
    if (have.accumulator) acc = std::make_unique<lab06::Accumulator>(*sync, accumulate);
    const auto stats0 = comm->stats();
    // What the driver sees of the accumulator from outside: the step index it passes, each
    // micro-step's divisor (the forward's loss over the loss given to backward) and the groups.
    std::vector<std::array<double, 2>> lrs;  // per optimizer step, as applied
    std::vector<int64_t> group_sizes;
    int64_t steps_seen = 0, bad_step_index = -1, bad_step_at = -1, samples = 0, micro_taken = 0, in_group = 0;
    int64_t bad_divisor_group = -1;
    double bad_divisor = 0, forward_loss = 0;
    std::vector<double> divisors;  // of the open group
    StepTimer& timer = run.timer();
    const data::Batch* current = nullptr;
    lab06::MicroStepFns fns;
    fns.forward = [&] {
      auto scope = timer.scope(Phase::kForward);
      torch::Tensor loss =
          torch::binary_cross_entropy_with_logits(model->forward(current->dense, current->rows), current->labels);
      forward_loss = loss.item<double>();
      return loss;
    };
    fns.backward = [&](const torch::Tensor& loss) {
      const double given = loss.item<double>();
      divisors.push_back(given != 0 ? forward_loss / given : 0);
      ++in_group;
      sync->before_backward(loss);
      auto scope = timer.scope(Phase::kBackward);
      loss.backward();
    };
    fns.finish = [&] {
      auto scope = timer.scope(Phase::kComm);
      sync->finish();
    };
    fns.step = [&](int64_t t) {
      auto scope = timer.scope(Phase::kOptimizer);
      if (t != steps_seen && bad_step_index < 0) {
        bad_step_index = t;
        bad_step_at = steps_seen;
      }
      for (double d : divisors) {
        if (std::abs(d - static_cast<double>(in_group)) > 1e-3 * static_cast<double>(in_group) &&
            bad_divisor_group < 0) {
          bad_divisor_group = steps_seen;
          bad_divisor = d;
        }
      }
      group_sizes.push_back(in_group);
      divisors.clear();
      in_group = 0;
      if (have.schedule) lab06::apply_schedules(*optimizer, schedules, t);
      auto& g = optimizer->param_groups();
      lrs.push_back({g[0].options().get_lr(), g[1].options().get_lr()});
      optimizer->step();
      ++steps_seen;
    };
    fns.zero_grad = [&] {
      auto scope = timer.scope(Phase::kOptimizer);
      optimizer->zero_grad();
    };
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      auto loader = run.global_batch_loader(epoch, micro_steps);
      // --max-steps ends the run inside an epoch: the accumulator is told the micro-steps it gets.
      int64_t this_epoch = micro_steps;
      if (run.options().max_steps > 0)
        this_epoch = std::clamp(run.options().max_steps - micro_taken, int64_t{0}, micro_steps);
      if (this_epoch == 0) break;
      if (acc) acc->begin_epoch(this_epoch);
      run.run_epoch(epoch, *loader, [&](const data::Batch& batch) {
        current = &batch;
        samples += batch.labels.size(0);
        ++micro_taken;
        if (acc) return acc->micro_step(fns);
        // 06.2 not attempted: one micro-batch per optimizer step, so the rest stays gradable.
        fns.zero_grad();
        const torch::Tensor loss = fns.forward();
        fns.backward(loss);
        fns.finish();
        fns.step(steps_seen);
        return forward_loss;
      });
    }

    // What the run did, from the communicator's counters and the steps the driver saw.
    const auto stats1 = comm->stats();
    const int ar = static_cast<int>(dist::Op::kAllreduce);
    const int64_t collectives = stats1.ops[ar].calls - stats0.ops[ar].calls;
    const int64_t bytes = stats1.ops[ar].bytes - stats0.ops[ar].bytes;
    const int64_t per_sync = static_cast<int64_t>(sync->buckets().size());
    const double syncs = per_sync > 0 ? static_cast<double>(collectives) / static_cast<double>(per_sync) : 0;
    const bool one_sync_per_step = collectives == steps_seen * per_sync;
    const bool schedule_ok = bad_step_index < 0;
    const bool divisors_ok = bad_divisor_group < 0;
    std::string sizes;
    for (size_t i = 0; i < group_sizes.size(); ++i) {
      // The groups, shortened: "3 x 3, 1" for 3, 3, 3, 1.
      size_t j = i;
      while (j + 1 < group_sizes.size() && group_sizes[j + 1] == group_sizes[i]) ++j;
      sizes += fmt::format("{}{}", sizes.empty() ? "" : ", ",
                           j > i ? fmt::format("{} x {}", j - i + 1, group_sizes[i]) : std::to_string(group_sizes[i]));
      i = j;
    }
    log::info0(
        "accumulation: {} optimizer step(s) over {} micro-steps, in groups of {} micro-batch(es); {:g} gradient "
        "sync(s), {} all-reduce(s), {:.0f} bytes per sample on rank {}",
        steps_seen, micro_taken, sizes.empty() ? "none" : sizes, syncs, collectives,
        samples ? static_cast<double>(bytes) / static_cast<double>(samples) : 0.0, run.rank());
    if (divisors_ok) {
      log::info0("every micro-batch's loss was divided by its group's size");
    } else {
      log::warn(
          "rank {}: in optimizer step {} ({} micro-batch(es)) a loss was divided by {:.3g}: the accumulated "
          "gradient is not the group's mean",
          run.rank(), bad_divisor_group, group_sizes[static_cast<size_t>(bad_divisor_group)], bad_divisor);
    }
    if (one_sync_per_step) {
      log::info0("one gradient sync per optimizer step");
    } else {
      log::warn("rank {}: {:g} gradient syncs for {} optimizer steps: the accumulation is not under no_sync()",
                run.rank(), syncs, steps_seen);
    }
    if (schedule_ok) {
      log::info0("the learning-rate schedule advanced once per optimizer step");
    } else if (rank0) {
      log::warn("the schedule was given step {} at optimizer step {}: it must count optimizer steps, not micro-steps",
                bad_step_index, bad_step_at);
    }
    if (!lrs.empty()) {
      log::info0("learning rates (embeddings, dense): first step {:g}, {:g}; last step {:g}, {:g}", lrs.front()[0],
                 lrs.front()[1], lrs.back()[0], lrs.back()[1]);
    }

    nlohmann::json lj = {{"world_size", gb.world_size},
                         {"per_rank_batch", gb.per_rank_batch},
                         {"accumulation", k_used},
                         {"global_batch", gb.global_batch},
                         {"derived", have.global_batch},
                         {"rule", rule_name},
                         {"embedding_rule", lab06::rule_name(flags.embedding_rule)},
                         {"base_lr", flags.base_lr},
                         {"base_batch", base_batch},
                         {"warmup_steps", warmup_steps},
                         {"optimizer", optimizer_name},
                         {"micro_steps", micro_taken},
                         {"optimizer_steps", steps_seen},
                         {"group_sizes", group_sizes},
                         {"syncs", syncs},
                         {"collectives", collectives},
                         {"bytes", bytes},
                         {"bytes_per_sample",
                          samples ? static_cast<double>(bytes) / static_cast<double>(samples) : 0.0},
                         {"one_sync_per_step", one_sync_per_step},
                         {"losses_divided_by_group_size", divisors_ok},
                         {"schedule_counts_optimizer_steps", schedule_ok}};
    if (have.schedule) lj["target_lr"] = {{"embeddings", target[0]}, {"dense", target[1]}};
    for (const auto& l : lrs) lj["lrs"].push_back({l[0], l[1]});
    std::string digest;
    const auto same = dist::compare_parameters(*comm, *model, &digest);
    lj["params_identical"] = same.same();
    log::info0("parameters at the end: {} (rank 0: {})", same.describe(), digest);
    run.report().json()["large_batch"] = lj;
    run.evaluate_on_rank0(model, *comm);
  };
  return run_lab(program, argc, argv);
}

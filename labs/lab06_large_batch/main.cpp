// Lab 06 driver: data-parallel DeepFM at large global batches. The global batch is the student's
// derive_global_batch (06.3) of the launcher's world size, --batch per rank and --accumulate k
// micro-batches per optimizer step, taken by the student's Accumulator under no_sync (06.2). The
// optimizer has two parameter groups, {embeddings, dense layers}, whose learning rates follow the
// student's schedules (06.1): --lr at --base-batch, scaled by --lr-rule (dense) and
// --embedding-rule, with --warmup-steps of linear warm-up. The run prints the global batch, the
// rules and the learning rates, and checks what it can see from outside: one gradient sync per
// optimizer step, and a schedule that counts optimizer steps. Not edited by students.
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "lab06.h"

#include "ddplab/dist/agree.h"
#include "ddplab/dist/grad_sync.h"
#include "ddplab/lab.h"
#include "ddplab/log.h"

namespace {

using namespace ddplab;

/// Each exercise once, so that a skeleton run lists every missing one; a failure other than a
/// stub is reported and met again in training.
void probe_exercises(LabRun& run, dist::Communicator& comm) {
  auto attempt = [&run](const char* what, const std::function<void()>& fn) {
    try {
      run.attempt(fn);
    } catch (const std::exception& e) {
      log::warn("{} fails on a probe: {}", what, e.what());
    }
  };
  attempt("the schedule (06.1)", [] { (void)lab06::lr_at(lab06::Schedule{}, 0); });
  attempt("the accumulator (06.2)", [&comm] {
    torch::nn::Linear lin(2, 1);
    auto sync = dist::make_grad_sync(dist::SyncStrategy::kPerParam, comm, lin->parameters());
    lab06::Accumulator acc(*sync, 1);
    acc.begin_epoch(0);
  });
  attempt("the global batch (06.3)", [] { (void)lab06::derive_global_batch(dist::Environment{}, 1, 1); });
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
    probe_exercises(run, *comm);
    const int64_t B = run.batch();
    const int world = run.world_size();

    // 06.3: the global batch and the schedules, from the job (the driver's fallbacks keep the
    // other exercises gradable when 06.3 is not attempted).
    lab06::LrFlags flags;
    flags.base_lr = run.options().lr;
    flags.base_batch = base_batch;
    flags.rule = lab06::parse_rule(rule_name);
    flags.embedding_rule = embedding_rule_name == "same" ? flags.rule : lab06::parse_rule(embedding_rule_name);
    flags.warmup_steps = warmup_steps;
    lab06::GlobalBatch gb{world, B, accumulate, world * B * accumulate};
    std::vector<lab06::Schedule> schedules;
    const bool derived = run.attempt([&] {
      gb = lab06::derive_global_batch(run.environment(), B, accumulate);
      schedules = lab06::make_schedules(gb, flags);
    });
    if (!derived) {
      lab06::Schedule constant;
      constant.base_lr = flags.base_lr;
      constant.base_batch = constant.global_batch = base_batch;
      constant.rule = lab06::Rule::kNone;
      schedules = {constant, constant};
      if (run.rank() == 0)
        log::warn("06.3 not attempted: global batch {} from the driver, constant learning rate {}", gb.global_batch,
                  flags.base_lr);
    }
    if (schedules.size() != 2) {
      throw Error(
          fmt::format("make_schedules returned {} schedule(s); the optimizer has 2 parameter groups "
                      "(embeddings, dense)",
                      schedules.size()));
    }
    bool have_schedule = true;
    std::array<double, 2> target{};
    try {
      have_schedule = run.attempt([&] {
        for (size_t g = 0; g < 2; ++g) target[g] = lab06::target_lr(schedules[g]);
      });
    } catch (const std::exception& e) {
      throw ConfigError(fmt::format("the schedules: {}", e.what()));
    }
    const char* names[2] = {"embeddings", "dense"};
    log::info0("global batch {} = {} rank(s) x {} per rank x {} micro-batch(es){}", gb.global_batch, gb.world_size,
               gb.per_rank_batch, gb.accumulation, derived ? "" : " (the driver's)");
    for (size_t g = 0; g < 2; ++g) {
      const auto& s = schedules[g];
      if (have_schedule) {
        log::info0(
            "learning rate of the {}: {} rule, {:g} at batch {} -> {:g} at batch {}, warm-up {} optimizer step(s)",
            names[g], lab06::rule_name(s.rule), s.base_lr, s.base_batch, target[g], s.global_batch, s.warmup_steps);
      }
    }
    if (!have_schedule && run.rank() == 0)
      log::warn("06.1 not attempted: every step at the optimizer's initial learning rate");

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

    // Micro-steps: whole micro-batches of world x B; every rank takes the same number.
    const int64_t micro_global = static_cast<int64_t>(world) * B;
    const int64_t micro_steps = static_cast<int64_t>(run.train_size()) / micro_global;
    if (micro_steps == 0) {
      throw ConfigError(
          fmt::format("--train-samples {} is smaller than one micro-batch of {} x {}", run.train_size(), world, B));
    }
    run.start_training(model.ptr(), micro_steps);

    std::unique_ptr<lab06::Accumulator> acc;
    // The probe found out whether 06.2 is there; without it the driver steps on every micro-batch.
    run.attempt([&] {
      lab06::Accumulator probe(*sync, accumulate);
      probe.begin_epoch(0);
      acc = std::make_unique<lab06::Accumulator>(*sync, accumulate);
    });
    const auto stats0 = comm->stats();
    std::vector<std::array<double, 2>> lrs;  // per optimizer step, as applied
    int64_t steps_seen = 0, bad_step_index = -1, bad_step_at = -1, samples = 0;
    StepTimer& timer = run.timer();
    for (int64_t epoch = 0; epoch < run.options().epochs; ++epoch) {
      const auto order = data::shuffled_order(run.train_size(), run.options().seed, static_cast<uint64_t>(epoch));
      data::BatchLoader loader(run.train(), data::global_batch_slice(order, micro_steps, B, run.rank(), world), B,
                               run.device());
      if (acc) run.attempt([&] { acc->begin_epoch(micro_steps); });
      const data::Batch* current = nullptr;
      lab06::MicroStepFns fns;
      fns.forward = [&] {
        auto scope = timer.scope(Phase::kForward);
        return torch::binary_cross_entropy_with_logits(model->forward(current->dense, current->rows), current->labels);
      };
      fns.backward = [&](const torch::Tensor& loss) {
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
        if (have_schedule) lab06::apply_schedules(*optimizer, schedules, t);
        auto& g = optimizer->param_groups();
        lrs.push_back({g[0].options().get_lr(), g[1].options().get_lr()});
        optimizer->step();
        ++steps_seen;
      };
      fns.zero_grad = [&] {
        auto scope = timer.scope(Phase::kOptimizer);
        optimizer->zero_grad();
      };
      run.run_epoch(epoch, loader, [&](const data::Batch& batch) {
        current = &batch;
        samples += batch.labels.size(0);
        if (acc) return acc->micro_step(fns);
        // 06.2 not attempted: one micro-batch per optimizer step, so the rest stays gradable.
        fns.zero_grad();
        const torch::Tensor loss = fns.forward();
        fns.backward(loss);
        fns.finish();
        fns.step(steps_seen);
        return loss.item<double>();
      });
    }

    // What the run did, from the communicator's counters and the steps the driver saw.
    const auto stats1 = comm->stats();
    const int ar = static_cast<int>(dist::Op::kAllreduce);
    const int64_t collectives = stats1.ops[ar].calls - stats0.ops[ar].calls;
    const int64_t bytes = stats1.ops[ar].bytes - stats0.ops[ar].bytes;
    const int64_t per_sync = static_cast<int64_t>(sync->buckets().size());
    const double syncs = per_sync > 0 ? static_cast<double>(collectives) / static_cast<double>(per_sync) : 0;
    const int64_t epochs = run.options().epochs;
    const int64_t expect_steps = epochs * ((micro_steps + accumulate - 1) / accumulate);
    const int64_t tail = micro_steps % accumulate;
    const bool one_sync_per_step = world == 1 || (collectives == steps_seen * per_sync);
    const bool schedule_ok = bad_step_index < 0;
    log::info0(
        "accumulation: {} optimizer step(s) of {} micro-batch(es){} over {} micro-steps; {:g} gradient "
        "sync(s), {} all-reduce(s), {:.0f} bytes per sample on rank {}",
        steps_seen, accumulate, tail ? fmt::format(" (the last of each epoch: {})", tail) : "", micro_steps * epochs,
        syncs, collectives, samples ? static_cast<double>(bytes) / static_cast<double>(samples) : 0.0, run.rank());
    if (world > 1) {
      if (one_sync_per_step) {
        log::info0("one gradient sync per optimizer step");
      } else {
        log::warn(
            "rank {}: {:g} gradient syncs for {} optimizer steps of {} micro-batches: the accumulation is "
            "not under no_sync()",
            run.rank(), syncs, steps_seen, accumulate);
      }
    }
    if (schedule_ok && steps_seen == expect_steps) {
      log::info0("the learning-rate schedule advanced once per optimizer step");
    } else if (!schedule_ok) {
      log::warn("the schedule was given step {} at optimizer step {}: it must count optimizer steps, not micro-steps",
                bad_step_index, bad_step_at);
    } else {
      log::warn("{} optimizer steps for {} micro-steps of {} (expected {})", steps_seen, micro_steps * epochs,
                accumulate, expect_steps);
    }
    if (!lrs.empty()) {
      log::info0("learning rates (embeddings, dense): first step {:g}, {:g}; last step {:g}, {:g}", lrs.front()[0],
                 lrs.front()[1], lrs.back()[0], lrs.back()[1]);
    }

    nlohmann::json lj = {{"world_size", gb.world_size},
                         {"per_rank_batch", gb.per_rank_batch},
                         {"accumulation", gb.accumulation},
                         {"global_batch", gb.global_batch},
                         {"derived", derived},
                         {"rule", rule_name},
                         {"embedding_rule", lab06::rule_name(flags.embedding_rule)},
                         {"base_lr", flags.base_lr},
                         {"base_batch", base_batch},
                         {"warmup_steps", warmup_steps},
                         {"optimizer", optimizer_name},
                         {"micro_steps", micro_steps * epochs},
                         {"optimizer_steps", steps_seen},
                         {"tail", tail},
                         {"syncs", syncs},
                         {"collectives", collectives},
                         {"bytes", bytes},
                         {"bytes_per_sample",
                          samples ? static_cast<double>(bytes) / static_cast<double>(samples) : 0.0},
                         {"one_sync_per_step", one_sync_per_step},
                         {"schedule_counts_optimizer_steps", schedule_ok}};
    if (have_schedule) lj["target_lr"] = {{"embeddings", target[0]}, {"dense", target[1]}};
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

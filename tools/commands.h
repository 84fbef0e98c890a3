// Registration functions of the `ddplab` subcommands, one per file (tools/<name>.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace ddplab::tools {

void setup_data(CLI::App& app);       // data gen | verify | stats
void setup_doctor(CLI::App& app);     // doctor
void setup_bench(CLI::App& app);      // bench train | allreduce | scaling | grade
void setup_launch(CLI::App& app);     // launch -n N -- PROGRAM ARGS
void setup_grade(CLI::App& app);      // grade LAB... | --all [--submission P | --batch DIR]
void setup_trace(CLI::App& app);      // trace merge OUT IN...
void setup_flight(CLI::App& app);     // flight DIR
void setup_pack(CLI::App& app);       // pack LAB... [--out FILE]
void setup_preflight(CLI::App& app);  // preflight [options] -- PROGRAM-ARGS
void setup_forecast(CLI::App& app);   // forecast [options] -- PROGRAM-ARGS
void setup_price(CLI::App& app);      // price REPORT... [--instance NAME]
/// Registers `bench train` under the `bench` subcommand (tools/bench_train.cpp).
void setup_bench_train(CLI::App& bench);
/// Registers `bench allreduce` under the `bench` subcommand (tools/bench_allreduce.cpp).
void setup_bench_allreduce(CLI::App& bench);
/// Registers `bench scaling` (and its hidden per-rank worker) under `bench` (tools/bench_scaling.cpp).
void setup_bench_scaling(CLI::App& bench);
/// Registers `bench grade` under `bench` (tools/bench_grade.cpp).
void setup_bench_grade(CLI::App& bench);
/// Registers `bench pytorch` under `bench` (tools/bench_pytorch.cpp).
void setup_bench_pytorch(CLI::App& bench);

/// Exit status the process returns after a subcommand ran (a benchmark that missed its target: 1).
int& exit_status();
/// Parses and runs the subcommand; maps kit errors to exit codes (tools/cli_main.cpp).
int run_cli(CLI::App& app, int argc, char** argv);

}  // namespace ddplab::tools

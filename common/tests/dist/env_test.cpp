// The launch contract: torchrun, Open MPI and Slurm environments, precedence, and errors that
// name the variable and its value.
#include "ddplab/dist/env.h"

#include <map>

#include <gtest/gtest.h>

#include "ddplab/error.h"

namespace {

using ddplab::dist::detect_environment;
using Vars = std::map<std::string, std::string>;

ddplab::dist::EnvLookup lookup(const Vars& vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

void expect_config_error(const Vars& vars, const std::string& needle) {
  try {
    detect_environment(lookup(vars));
    FAIL() << "no error; expected one mentioning: " << needle;
  } catch (const ddplab::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Environment, NoLauncherIsASingleProcess) {
  const auto e = detect_environment(lookup({}));
  EXPECT_EQ(e.source, "single");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.distributed());
}

TEST(Environment, Torchrun) {
  const auto e = detect_environment(lookup({{"RANK", "3"},
                                            {"WORLD_SIZE", "4"},
                                            {"LOCAL_RANK", "1"},
                                            {"LOCAL_WORLD_SIZE", "2"},
                                            {"GROUP_RANK", "1"},
                                            {"MASTER_ADDR", "10.0.0.1"},
                                            {"MASTER_PORT", "29501"}}));
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29501);
  EXPECT_EQ(e.describe(), "rank 3/4 (local 1/2, node 1) via torchrun, rendezvous 10.0.0.1:29501");
  EXPECT_EQ(e.restart_count, 0);  // the first attempt
}

TEST(Environment, TorchrunSaysWhichAttemptOfAnElasticJobThisIs) {
  const auto e = detect_environment(lookup({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  EXPECT_EQ(e.restart_count, 2);
  expect_config_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "-1"}},
                      "TORCHELASTIC_RESTART_COUNT");
}

TEST(Environment, TorchrunWinsOverOuterLaunchers) {
  const auto e = detect_environment(lookup({{"RANK", "0"},
                                            {"WORLD_SIZE", "1"},
                                            {"OMPI_COMM_WORLD_RANK", "5"},
                                            {"OMPI_COMM_WORLD_SIZE", "8"},
                                            {"SLURM_PROCID", "2"}}));
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 0);
}

TEST(Environment, OpenMpiSingleNodeDefaultsToLoopback) {
  const auto e = detect_environment(lookup({{"OMPI_COMM_WORLD_RANK", "1"},
                                            {"OMPI_COMM_WORLD_SIZE", "2"},
                                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.node_rank, 0);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, ddplab::dist::kDefaultMasterPort);
}

TEST(Environment, OpenMpiTakesForwardedMasterAddr) {
  const auto e = detect_environment(lookup({{"OMPI_COMM_WORLD_RANK", "0"},
                                            {"OMPI_COMM_WORLD_SIZE", "4"},
                                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                            {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                            {"MASTER_ADDR", "node0"},
                                            {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_EQ(e.node_rank, 0);
  expect_config_error({{"OMPI_COMM_WORLD_RANK", "0"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}},
                      "spans several nodes but MASTER_ADDR is not set");
}

TEST(Environment, Slurm) {
  const auto e = detect_environment(lookup({{"SLURM_PROCID", "5"},
                                            {"SLURM_NTASKS", "8"},
                                            {"SLURM_LOCALID", "1"},
                                            {"SLURM_NODEID", "2"},
                                            {"SLURM_TASKS_PER_NODE", "2(x4)"},
                                            {"SLURM_LAUNCH_NODE_IPADDR", "192.0.2.7"}}));
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 2);
  EXPECT_EQ(e.master_addr, "192.0.2.7");
  expect_config_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}},
                      "neither MASTER_ADDR nor SLURM_LAUNCH_NODE_IPADDR");
}

TEST(Environment, MalformedValuesNameTheVariableAndValue) {
  expect_config_error({{"RANK", "one"}, {"WORLD_SIZE", "2"}}, "RANK='one' is not a non-negative integer");
  expect_config_error({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK='-1'");
  expect_config_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0' must be at least 1");
  expect_config_error({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}, "WORLD_SIZE='99999999999' is out of range");
  expect_config_error({{"WORLD_SIZE", "2"}}, "RANK is not set");
  expect_config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
                      "MASTER_PORT='70000' is not a TCP port");
}

TEST(Environment, InconsistentValuesAreErrors) {
  expect_config_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
                      "RANK=4 is not below WORLD_SIZE=4");
  expect_config_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}}, "WORLD_SIZE=2 but MASTER_ADDR is not set");
  expect_config_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT is not set");
  expect_config_error({{"RANK", "1"},
                       {"WORLD_SIZE", "2"},
                       {"LOCAL_RANK", "2"},
                       {"LOCAL_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "h"},
                       {"MASTER_PORT", "1"}},
                      "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
  expect_config_error({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
                      "OMPI_COMM_WORLD_RANK=2 is not below");
}

}  // namespace

# Whole-program tests of lab 10 (helpers: cmake/LabTests.cmake). 3,072 samples at a global batch of
# 768: 4 steps a run, each compared with a DDP + Adam copy of the model (--parity).
set(args --train-samples 3072 --eval-samples 1000 --log-every 0 --parity)
if(LAB_TREE STREQUAL "solutions")
  ddplab_lab_run(none_2 RANKS 2 ARGS ${args} --batch 384 --shard none
                 EQ status=ok sharding.mode=none verdicts.partition_exact.ok=ON verdicts.params_identical.ok=ON
                 GT sharding.traffic.allreduce.calls=0)
  ddplab_lab_run(zero1_2 RANKS 2 ARGS ${args} --batch 384 --shard zero1
                 EQ status=ok sharding.mode=zero1 verdicts.matches_ddp_adam.ok=ON verdicts.state_within_budget.ok=ON
                    verdicts.params_identical.ok=ON)
  # Three ranks: uneven shards; the shards saved by three ranks load at 1, 2 and 3.
  ddplab_lab_run(zero2_3 RANKS 3 ARGS ${args} --batch 256 --shard zero2 --checkpoint
                 EQ status=ok sharding.mode=zero2 verdicts.partition_exact.ok=ON verdicts.matches_ddp_adam.ok=ON
                    verdicts.state_within_budget.ok=ON verdicts.grads_within_budget.ok=ON
                    verdicts.comm_like_allreduce.ok=ON verdicts.reshard_identical.ok=ON verdicts.params_identical.ok=ON
                    sharding.traffic.allreduce.calls=0)
  # The same over the kit's MPI backend (Open MPI's shared memory; the reduce-scatter through its
  # all-to-all), ranks started by mpirun.
  find_program(DDPLAB_MPIRUN mpirun)
  if(DDPLAB_MPIRUN)
    ddplab_lab_run(zero2_mpi_2 RANKS 2 ARGS ${args} --batch 384 --shard zero2 --checkpoint --backend mpi
                   LAUNCHER ${DDPLAB_MPIRUN};--allow-run-as-root;--oversubscribe;-np;2;-x;MASTER_ADDR=127.0.0.1;-x;MASTER_PORT=29563
                   EQ status=ok backend=mpi verdicts.matches_ddp_adam.ok=ON verdicts.comm_like_allreduce.ok=ON
                      verdicts.reshard_identical.ok=ON verdicts.params_identical.ok=ON)
  endif()
else()
  # The skeleton lists every exercise and trains as DDP + Adam.
  ddplab_skeleton_run(skeleton_run RANKS 2 EXERCISES 10.1 10.2 10.3 10.4 ARGS ${args} --batch 384 --checkpoint
                      EXPECT "trains as --shard none" EQ phases.steps=4 sharding.mode=none)
endif()

# Whole-program tests of lab 02 (helpers: cmake/LabTests.cmake).
# 5,000 samples = 10 steps of 512 (the last one partial) per rank: every rank walks them all.
set(args --train-samples 5000 --eval-samples 1000 --log-every 5)
if(LAB_TREE STREQUAL "solutions")
  # With --no-lr-scaling the finished lab 02 at 2 ranks is one process's run done twice: the same
  # batches, the same (averaged) gradients, the same parameters — checked step by step below.
  ddplab_lab_run(run ARGS ${args} --no-lr-scaling
                 EXPECT "parameters at the start: identical on all 1 rank" "1 rank\\(s\\) processed 5000 samples, 5000 of them unique"
                        "0 of 1 processes repeated" "test AUC"
                 EQ status=ok world_size=1 phases.steps=10 verdicts.params_identical.ok=ON lab02.epochs.0.unique=5000)
  ddplab_lab_run(ranks_2 RANKS 2 ARGS ${args} --no-lr-scaling
                 EXPECT "parameters at the start: identical on all 2 rank" "2 rank\\(s\\) processed 10000 samples, 5000 of them unique"
                        "1 of 2 processes repeated rank 0's work \\(2.0x" "parameters at the end: identical on all 2"
                 EQ status=ok world_size=2 phases.steps=10 verdicts.start_params_identical.ok=ON verdicts.params_identical.ok=ON
                    lab02.epochs.0.ranks_repeating_rank0=1
                 GT comm.ops.allreduce.calls=0 comm.ops.broadcast.calls=0)
  ddplab_lab_parity(repeat_single SINGLE run RANKS ranks_2 TOL 1e-6)
else()
  # The skeleton runs: 1 rank lists every exercise; 2 ranks are two independent trainers that
  # cannot tell how much of their work was repeated.
  ddplab_skeleton_run(skeleton_run EXERCISES 02.1 02.2 02.3 ARGS ${args}
                      EXPECT "exercise 02.1 is not implemented yet" EQ phases.steps=10)
  ddplab_skeleton_run(skeleton_ranks_2 RANKS 2 EXERCISES 02.1 02.2 02.3 ARGS ${args}
                      EXPECT "\\[rank 1\\] .*rank 1 trains alone" "cannot be known: the ranks never talk"
                      EQ world_size=2 phases.steps=10)
endif()

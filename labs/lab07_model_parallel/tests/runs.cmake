# Whole-program tests of lab 07 (helpers: cmake/LabTests.cmake). 4,096 samples at a batch of 512:
# 8 steps a split run, 4 a data-parallel or sharded one on 2 ranks.
set(args --train-samples 4096 --eval-samples 1000 --log-every 0 --batch 512)
if(LAB_TREE STREQUAL "solutions")
  ddplab_lab_run(split_2 RANKS 2 ARGS ${args} --mode split
                 EXPECT "boundary traffic per step: rank 0 sent 880640 bytes, rank 1 sent 880640 bytes; .* matches the formula"
                 EQ status=ok phases.steps=8 verdicts.boundary_traffic.ok=ON verdicts.params_identical.ok=ON)
  ddplab_lab_run(pipeline_2 RANKS 2 ARGS ${args} --mode pipeline --micro-batches 4
                 EXPECT "pipeline schedule: GPipe" "formula \\(W - 1\\) / \\(m \\+ W - 1\\) = 0.200"
                 EQ status=ok verdicts.gpipe_schedule.ok=ON verdicts.params_identical.ok=ON)
  ddplab_lab_run(sharded_2 RANKS 2 ARGS ${args} --mode sharded
                 EXPECT "all-to-all per step: 452608 bytes each direction per rank .* matches the formula"
                 EQ status=ok phases.steps=4 verdicts.all_to_all_traffic.ok=ON verdicts.params_identical.ok=ON)
  ddplab_lab_run(sharded_3 RANKS 3 ARGS --train-samples 4096 --eval-samples 1000 --log-every 0 --batch 256 --mode sharded
                 EXPECT "all-to-all per step: .* matches the formula"
                 EQ status=ok verdicts.params_identical.ok=ON)
  ddplab_lab_run(recompute_1 ARGS ${args} --recompute
                 EXPECT "recomputation: the MLP keeps 0 B between forward and backward at batch 512 .*: less"
                 EQ status=ok model_parallel.recompute=ON verdicts.recompute_saves_memory.ok=ON)
  # The budget names the rank, the step and what the memory holds.
  ddplab_lab_run(dp_over_budget ARGS ${args} --device-memory-mb 40 RC 1
                 EXPECT "out of device memory on rank 0 in step 0: the step peaked at .* over --device-memory-mb 40 \\(parameters")
  ddplab_lab_run(split_needs_2 ARGS ${args} --mode split RC 2 EXPECT "launch 2 ranks, not 1")
else()
  ddplab_skeleton_run(skeleton_run RANKS 2 EXERCISES 07.1 07.2 07.3 07.4 ARGS ${args} EQ phases.steps=4)
endif()

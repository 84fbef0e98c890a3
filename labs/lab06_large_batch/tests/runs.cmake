# Whole-program tests of lab 06 (helpers: cmake/LabTests.cmake). 4,096 samples: at 2 ranks x 256
# per rank, 8 micro-steps a run.
set(args --train-samples 4096 --eval-samples 1000 --log-every 0 --batch 256)
if(LAB_TREE STREQUAL "solutions")
  # k = 4: 2 optimizer steps, 2 gradient syncs of DeepFM's 2 buckets; the global batch is derived.
  ddplab_lab_run(accum_2 RANKS 2 ARGS ${args} --accumulate 4 --warmup-steps 1
                 EXPECT "global batch 2048 = 2 rank\\(s\\) x 256 per rank x 4 micro-batch\\(es\\)"
                        "one gradient sync per optimizer step" "the learning-rate schedule advanced once per optimizer step"
                        "every micro-batch's loss was divided by its group's size"
                 EQ status=ok large_batch.global_batch=2048 large_batch.optimizer_steps=2 large_batch.syncs=2.0
                    large_batch.collectives=4 verdicts.one_sync_per_step.ok=ON
                    verdicts.schedule_counts_optimizer_steps.ok=ON verdicts.params_identical.ok=ON
                    large_batch.lrs.0.1=0.001
                 GT large_batch.lrs.1.1=0.0039)
  # The tail: 8 micro-steps at k = 3 are groups of 3, 3 and 2.
  ddplab_lab_run(tail_2 RANKS 2 ARGS ${args} --accumulate 3
                 EXPECT "3 optimizer step\\(s\\) over 8 micro-steps, in groups of 2 x 3, 2 micro-batch\\(es\\)"
                 EQ status=ok large_batch.optimizer_steps=3 large_batch.group_sizes.2=2 large_batch.syncs=3.0
                    verdicts.losses_divided_by_group_size.ok=ON)
  # 4 ranks: the batch and the dense rate follow the world size; the embeddings keep theirs.
  ddplab_lab_run(world_4 RANKS 4 ARGS --train-samples 4096 --eval-samples 1000 --log-every 0 --batch 128
                 --accumulate 2 --embedding-rule none
                 EQ status=ok large_batch.global_batch=1024 large_batch.target_lr.dense=0.002
                    large_batch.target_lr.embeddings=0.001 verdicts.params_identical.ok=ON)
  ddplab_lab_run(no_lr_scaling ARGS ${args} --no-lr-scaling RC 2 NO_REPORT EXPECT "--no-lr-scaling does not apply")
else()
  ddplab_skeleton_run(skeleton_run RANKS 2 EXERCISES 06.1 06.2 06.3 ARGS ${args} EQ phases.steps=8)
endif()

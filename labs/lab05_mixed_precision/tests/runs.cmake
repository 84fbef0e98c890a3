# Whole-program tests of lab 05 (helpers: cmake/LabTests.cmake). 4,096 samples at a global batch of
# 512: 8 steps a run.
set(args --train-samples 4096 --eval-samples 1000 --log-every 0 --batch 256)
if(LAB_TREE STREQUAL "solutions")
  ddplab_lab_run(fp32_2 RANKS 2 ARGS ${args} EQ status=ok amp.autocast=OFF verdicts.params_identical.ok=ON)
  ddplab_lab_run(bf16_2 RANKS 2 ARGS ${args} --autocast EXPECT "forward in BFloat16"
                 EQ status=ok amp.dtype=BFloat16 verdicts.params_identical.ok=ON)
  # Overflows injected into one rank's local gradient at steps 2 and 5: every rank skips exactly
  # those steps (05.3), the scale backs off twice, and the replicas stay identical.
  ddplab_lab_run(overflow_2 RANKS 2 ARGS ${args} --loss-scaling --inject-overflow 3
                 EXPECT "every injected overflow skipped its step, and nothing else"
                 EQ status=ok amp.skipped_steps.0=2 amp.skipped_steps.1=5 verdicts.skips_match_injected.ok=ON
                    amp.scaler.scale=16384.0 verdicts.params_identical.ok=ON)
  # fp16 gradient storage (emulated): scaling by 2^16 keeps gradients that fp16 flushes at scale 1.
  ddplab_lab_run(underflow_1 ARGS ${args} --emulate-fp16-grads --loss-scaling
                 EXPECT "underflow falls with loss scaling" EQ status=ok verdicts.underflow_falls.ok=ON GT amp.fraction_unscaled=0.001)
else()
  ddplab_skeleton_run(skeleton_run RANKS 2 EXERCISES 05.1 05.2 05.3 ARGS ${args} EQ phases.steps=8)
endif()

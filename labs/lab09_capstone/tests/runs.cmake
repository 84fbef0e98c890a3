# Whole-program tests of lab 09 (helpers: cmake/LabTests.cmake): the template config, a job
# killed and restarted by torchrun --max-restarts ending bit-identical to one run straight (with
# dropout on the dense features: every step draws random numbers, so the checkpoint's generator
# state must come back), and a config file's mistakes named with file and line.
set(args --train-samples 4096 --eval-samples 1000 --log-every 0 --batch 256 --epochs 2 --checkpoint-every 2
         --input-dropout 0.1)
if(LAB_TREE STREQUAL "solutions")
  # The shipped template, some of it overridden on the command line (which wins over the file).
  ddplab_lab_run(template_config RANKS 2
                 ARGS --config ${PROJECT_SOURCE_DIR}/labs/lab09_capstone/template.toml --train-samples 4096
                      --eval-samples 1000 --log-every 4 --batch 128 --warmup-steps 4 --checkpoint-every 8
                 EXPECT "global batch 256; 16 optimizer steps an epoch" "cost: \\$[0-9.]+ so far"
                 EQ status=ok config.sync=sparse config.adam=fused config.precision=bf16 config.batch=128 config.warmup_steps=4
                    config.instance=c6i.large cost.metered=ON checkpoint.written=3)
  set(bad ${CMAKE_CURRENT_BINARY_DIR}/lab09_bad_config.toml)
  file(WRITE ${bad} "[train]\nbatch = 256\ncolour = \"blue\"\n")
  ddplab_lab_run(config_unknown_key ARGS --config ${bad} RC 2 NO_REPORT
                 EXPECT "lab09_bad_config\\.toml:3: \\[train\\] colour: no flag --colour")
  ddplab_lab_run(straight_2 RANKS 2 ARGS ${args})
  # fp16 autocast needs CUDA (LibTorch 1.13's CPU autocast is bf16 only): refused by name on a CPU.
  ddplab_lab_run(fp16_needs_cuda ARGS ${args} --precision fp16 RC 2 EQ status=error
                 EXPECT "--precision fp16: LibTorch's CPU autocast runs bfloat16 only")
  find_program(DDPLAB_TORCHRUN torchrun)
  if(DDPLAB_TORCHRUN)
    # Rank 0 dies after step 11 (its last checkpoint: step 10); torchrun restarts both ranks, which
    # resume (--resume) from the checkpoint folder next to their reports.
    ddplab_lab_run(torchrun_restart RANKS 2 ARGS ${args} --resume --kill-at-step 11
                   LAUNCHER ${DDPLAB_TORCHRUN};--standalone;--nproc_per_node;2;--max_restarts;1;--no_python;--redirects;1;--tee;1
                   EXPECT "kills itself" "resumed from .*step-00000010\\.pt: step 10"
                   EQ status=ok config.launcher=torchrun checkpoint.resumed_at.step=10 TIMEOUT 180)
    # torchrun --standalone always rendezvouses at localhost:29400: one such job at a time.
    set_tests_properties(${LAB_TARGET}.torchrun_restart PROPERTIES RESOURCE_LOCK torchrun_29400)
    ddplab_lab_same_params(ORACLE straight_2 RUNS torchrun_restart)
  else()
    message(WARNING "torchrun not found (Debian: python3-torch, installed by tools/setup-debian.sh): "
                    "lab 09's restart test under torchrun --max-restarts is not registered")
  endif()
else()
  ddplab_skeleton_run(skeleton_run RANKS 2 EXERCISES 09.1 09.2 09.3 ARGS ${args}
                      EXPECT "09.1 not attempted: no checkpoints are written" EQ phases.steps=16 cost.metered=OFF)
endif()

# Whole-program tests of lab 04 (helpers: cmake/LabTests.cmake). 4,096 samples at a global batch
# of 512: 8 steps a run.
set(args --train-samples 4096 --eval-samples 1000 --log-every 0)
if(LAB_TREE STREQUAL "solutions")
  # Every rung trains the model one process trains at the global batch: the oracle (one allreduce
  # per tensor), the student's buckets after backward, and the student's buckets during backward.
  ddplab_lab_run(single_512 ARGS ${args} --batch 512 --sync per-param EQ status=ok phases.steps=8)
  ddplab_lab_run(per_param_2 RANKS 2 ARGS ${args} --batch 256 --sync per-param REPORT 1
                 EQ status=ok sync.steps.collectives.min=12 sync.steps.collectives.max=12
                    sync.steps.order_in_layout=ON verdicts.params_identical.ok=ON)
  # DDP's layout of DeepFM: the MLP's last six tensors (1,284,804 bytes) first, the rest second.
  ddplab_lab_run(bucketed_2 RANKS 2 ARGS ${args} --batch 256 --sync student-bucketed
                 EXPECT "student-bucketed: 2 bucket\\(s\\), 2-2 collective\\(s\\) and 13.36 MB per step"
                 EQ status=ok sync.buckets.0.bytes=1284804 sync.buckets.1.bytes=12070848
                    sync.steps.collectives.min=2 sync.steps.order_in_layout=ON verdicts.order_same_across_ranks.ok=ON
                    verdicts.params_identical.ok=ON)
  ddplab_lab_run(overlap_2 RANKS 2 ARGS ${args} --batch 256 --sync student-overlap
                 EXPECT "the same sequence of collectives on every rank"
                 EQ status=ok sync.steps.collectives.max=2 sync.steps.order_in_layout=ON verdicts.params_identical.ok=ON
                 GT sync.steps.launched_in_backward_median=0.5)
  ddplab_lab_run(overlap_4 RANKS 4 ARGS ${args} --batch 128 --sync student-overlap --bucket-cap-mb 1
                 EQ status=ok sync.buckets.2.bytes=10713216 sync.steps.collectives.min=3 verdicts.params_identical.ok=ON)
  ddplab_lab_parity(match_single SINGLE single_512 RANKS per_param_2 bucketed_2 overlap_2 overlap_4 TOL 1e-4)
  # The overlapped rung under the other launchers (the rank from OMPI_COMM_WORLD_* or torchrun's
  # variables; mpirun gets the rendezvous with -x).
  set(overlap_runs overlap_2)
  find_program(DDPLAB_MPIRUN mpirun)
  if(DDPLAB_MPIRUN)
    ddplab_lab_run(overlap_mpirun_2 RANKS 2 ARGS ${args} --batch 256 --sync student-overlap
                   LAUNCHER ${DDPLAB_MPIRUN};--allow-run-as-root;--oversubscribe;-np;2;-x;MASTER_ADDR=127.0.0.1;-x;MASTER_PORT=29541
                   EQ status=ok config.launcher=openmpi sync.steps.order_in_layout=ON)
    list(APPEND overlap_runs overlap_mpirun_2)
  endif()
  find_program(DDPLAB_TORCHRUN torchrun)
  if(DDPLAB_TORCHRUN)
    ddplab_lab_run(overlap_torchrun_2 RANKS 2 ARGS ${args} --batch 256 --sync student-overlap
                   LAUNCHER ${DDPLAB_TORCHRUN};--standalone;--nproc_per_node;2;--no_python;--redirects;1;--tee;1
                   EQ status=ok config.launcher=torchrun sync.steps.order_in_layout=ON)
    # torchrun --standalone always rendezvouses at localhost:29400: one such job at a time.
    set_tests_properties(${LAB_TARGET}.overlap_torchrun_2 PROPERTIES RESOURCE_LOCK torchrun_29400)
    list(APPEND overlap_runs overlap_torchrun_2)
  endif()
  # At 2 ranks a sum over ranks rounds once however the gradients are packed: the same bits.
  ddplab_lab_same_params(ORACLE per_param_2 RUNS bucketed_2 ${overlap_runs})

  # 04.3: a branch rank r skips at the steps s with (s + r) % 2 == 0. Marked unused, it trains like
  # the oracle; unhandled, the rank that skipped names the bucket and the job stops (no hang).
  set(branch ${args} --batch 256 --unused-branch 2)
  ddplab_lab_run(unused_oracle RANKS 2 ARGS ${branch} --sync per-param EQ status=ok verdicts.params_identical.ok=ON)
  ddplab_lab_run(unused_found RANKS 2 ARGS ${branch} --sync student-overlap --find-unused
                 EXPECT "branch skipped on 4 of 8 steps"
                 EQ status=ok verdicts.params_identical.ok=ON sync.steps.order_in_layout=ON sync.steps.unused_marked=16)
  ddplab_lab_same_params(ORACLE unused_oracle RUNS unused_found)
  ddplab_lab_run(unused_unhandled RANKS 2 ARGS ${branch} --sync student-overlap --comm-timeout 20 RC 1 NO_REPORT
                 EXPECT "\\[rank 0\\] bucket 0 of 2 \\([0-9]+ bytes\\) was never launched" "exercise 04.3")
else()
  # The skeleton lists every exercise and trains on the oracle.
  ddplab_skeleton_run(skeleton_run RANKS 2 EXERCISES 04.1 04.2 04.3 ARGS ${args} --batch 256
                      EXPECT "not written yet: per-param instead" EQ phases.steps=8 sync.written=OFF)
endif()

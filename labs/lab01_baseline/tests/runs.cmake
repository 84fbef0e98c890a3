# Whole-program tests of lab 01 (helpers: cmake/LabTests.cmake).
if(LAB_TREE STREQUAL "solutions")
  # 20,000 samples = 40 steps of 512; the progress line, the summary and the report must all appear.
  ddplab_lab_run(run ARGS --log-every 10 --save-model ${LAB_RUNS}/run/model.pt
                 EXPECT "step 10/40.*samples/s.*loss.*rss.*ETA" "test AUC" "teacher"
                 EQ status=ok world_size=1 phases.steps=40 epochs.0.samples=20000
                 GT eval.auc=0.6 phases.forward=0 phases.backward=0 phases.optimizer=0)

  # A bad flag or value: exit status 2 and a message naming the flag (docs/concepts/metrics.md).
  ddplab_lab_run(bad_value ARGS --batch abc RC 2 EXPECT "--batch" NO_REPORT)
  ddplab_lab_run(unknown_flag ARGS --no-such-flag RC 2 EXPECT "--no-such-flag" NO_REPORT)

  # The same binary under other launchers: each rank finds its rank and world size in the
  # environment (ddplab launch sets torchrun's variables; mpirun sets OMPI_COMM_WORLD_*). Lab 01
  # never talks across ranks, so these are two independent trainers — lab 02's starting point.
  # Rank 1 must say where it sits and write a report naming the launcher the detection found;
  # `prefix` is a regex its line starts with (ddplab launch adds "[rank 1] ").
  function(lab_launch_test name source launcher prefix)
    ddplab_lab_run(under_${name} LAUNCHER ${launcher} RANKS 2
                   ARGS --max-steps 3 --log-every 0 --eval-samples 1000
                   EXPECT "${prefix}rank 1/2 \\(local 1/2, node 0\\) via ${source}"
                   EQ rank=1 world_size=2 config.launcher=${source} status=ok)
  endfunction()
  lab_launch_test(ddplab_launch torchrun "$<TARGET_FILE:ddplab_front>;launch;-n;2;--" "\\[rank 1\\] ")
  # Debian 12's torchrun (PyTorch 1.13) spells --no_python and needs --redirects 1 --tee 1.
  find_program(DDPLAB_TORCHRUN torchrun)
  if(DDPLAB_TORCHRUN)
    lab_launch_test(torchrun torchrun "${DDPLAB_TORCHRUN};--standalone;--nproc_per_node;2;--no_python;--redirects;1;--tee;1" "")
    # torchrun --standalone always rendezvouses at localhost:29400: one such job at a time.
    set_tests_properties(${LAB_TARGET}.under_torchrun PROPERTIES RESOURCE_LOCK torchrun_29400)
  else()
    message(WARNING "torchrun not found (Debian: python3-torch, installed by tools/setup-debian.sh): "
                    "the test of labs under torchrun is not registered")
  endif()
  find_program(DDPLAB_MPIRUN mpirun)
  if(DDPLAB_MPIRUN)
    lab_launch_test(mpirun openmpi "${DDPLAB_MPIRUN};--allow-run-as-root;--oversubscribe;-np;2" "")
  else()
    message(WARNING "mpirun not found (Debian: openmpi-bin, installed by tools/setup-debian.sh): "
                    "the test of labs under mpirun is not registered")
  endif()
else()
  # The skeleton runs, trains nothing, and names every exercise still to do.
  ddplab_skeleton_run(skeleton_run EXERCISES 01.1 01.2 ARGS --log-every 10
                      EXPECT "exercise 01.1 is not implemented yet" "exercise 01.2 is not implemented yet")
endif()

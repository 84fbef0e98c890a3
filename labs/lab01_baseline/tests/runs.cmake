# Whole-program tests of lab 01, included by labs/CMakeLists.txt once per built tree with
# LAB_TARGET (the program target), LAB_TREE (labs|solutions) and LAB_RUNS (a scratch folder).
set(cmd $<TARGET_FILE:${LAB_TARGET}>;--data;${DDPLAB_TINY_DATA};--report;${LAB_RUNS}/rank{rank}.json;--log-every;10)
if(LAB_TREE STREQUAL "solutions")
  # 20,000 samples = 40 steps of 512; the progress line, the summary and the report must all appear.
  add_test(NAME ${LAB_TARGET}.run
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS} "-DCMD=${cmd};--save-model;${LAB_RUNS}/model.pt"
                   "-DEXPECT_REGEX=step 10/40.*samples/s.*loss.*rss.*ETA;test AUC;teacher"
                   -DJSON=${LAB_RUNS}/rank0.json "-DJSON_EQ=status=ok;world_size=1;phases.steps=40;epochs.0.samples=20000"
                   "-DJSON_GT=eval.auc=0.6;phases.forward=0;phases.backward=0;phases.optimizer=0"
                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckRun.cmake)
  set_tests_properties(${LAB_TARGET}.run PROPERTIES FIXTURES_REQUIRED tiny_data LABELS lab)
else()
  # The skeleton runs, trains nothing, and names every exercise still to do.
  add_test(NAME ${LAB_TARGET}.skeleton_run
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS} "-DCMD=${cmd}" -DEXPECT_RC=3
                   "-DEXPECT_REGEX=exercise 01.1 is not implemented yet;exercise 01.2 is not implemented yet;not attempted yet: exercise\\(s\\) 01.1, 01.2"
                   -DJSON=${LAB_RUNS}/rank0.json "-DJSON_EQ=status=not_attempted;not_attempted.0=01.1;not_attempted.1=01.2"
                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckRun.cmake)
  set_tests_properties(${LAB_TARGET}.skeleton_run PROPERTIES FIXTURES_REQUIRED tiny_data LABELS "lab;skeleton")
endif()

if(LAB_TREE STREQUAL "solutions")
  # The same binary under other launchers: each rank finds its rank and world size in the
  # environment (ddplab launch sets torchrun's variables; mpirun sets OMPI_COMM_WORLD_*). Lab 01
  # never talks across ranks, so these are two independent trainers — lab 02's starting point.
  set(short $<TARGET_FILE:${LAB_TARGET}>;--data;${DDPLAB_TINY_DATA};--max-steps;3;--log-every;0;--eval-samples;1000)
  # Registers <target>.under_<name>: the launcher command runs 2 ranks, rank 1 must say where it
  # sits and write a report naming `source` (the launcher the environment detection found).
  # `prefix` is a regex the line must start with (ddplab launch adds "[rank 1] ").
  function(lab_launch_test name source launcher prefix)
    add_test(NAME ${LAB_TARGET}.under_${name}
             COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}_${name}
                     "-DCMD=${launcher};${short};--report;${LAB_RUNS}_${name}/rank{rank}.json"
                     "-DEXPECT_REGEX=${prefix}rank 1/2 \\(local 1/2, node 0\\) via ${source}"
                     -DJSON=${LAB_RUNS}_${name}/rank1.json "-DJSON_EQ=rank=1;world_size=2;config.launcher=${source};status=ok"
                     -P ${PROJECT_SOURCE_DIR}/cmake/CheckRun.cmake)
    set_tests_properties(${LAB_TARGET}.under_${name} PROPERTIES FIXTURES_REQUIRED tiny_data LABELS "lab;launch")
  endfunction()
  lab_launch_test(ddplab_launch torchrun "$<TARGET_FILE:ddplab>;launch;-n;2;--" "\\[rank 1\\] ")
  # Debian 12's torchrun (PyTorch 1.13) spells --no_python and needs --redirects 1 --tee 1.
  find_program(DDPLAB_TORCHRUN torchrun)
  if(DDPLAB_TORCHRUN)
    lab_launch_test(torchrun torchrun "${DDPLAB_TORCHRUN};--standalone;--nproc_per_node;2;--no_python;--redirects;1;--tee;1" "")
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
endif()

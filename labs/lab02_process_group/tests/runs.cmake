# Whole-program tests of lab 02, included by labs/CMakeLists.txt once per built tree with
# LAB_TARGET (the program target), LAB_TREE (labs|solutions) and LAB_RUNS (a scratch folder).
# 5,000 samples = 10 steps of 512 (the last one partial) per rank: every rank walks them all.
set(args --data;${DDPLAB_TINY_DATA};--train-samples;5000;--eval-samples;1000;--log-every;5)
set(launch2 $<TARGET_FILE:ddplab>;launch;-n;2;--)
if(LAB_TREE STREQUAL "solutions")
  # With --no-lr-scaling the finished lab 02 at 2 ranks is one process's run done twice: the same
  # batches, the same (averaged) gradients, the same parameters — checked step by step below.
  add_test(NAME ${LAB_TARGET}.run
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/single
                   "-DCMD=$<TARGET_FILE:${LAB_TARGET}>;${args};--no-lr-scaling;--report;${LAB_RUNS}/single/rank{rank}.json"
                   "-DEXPECT_REGEX=parameters at the start: identical on all 1 rank;1 rank\\(s\\) processed 5000 samples, 5000 of them unique;0 of 1 processes repeated;test AUC"
                   -DJSON=${LAB_RUNS}/single/rank0.json
                   "-DJSON_EQ=status=ok;world_size=1;phases.steps=10;lab02.end_params_identical=ON;lab02.epochs.0.unique=5000"
                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckRun.cmake)
  set_tests_properties(${LAB_TARGET}.run PROPERTIES FIXTURES_REQUIRED tiny_data FIXTURES_SETUP ${LAB_TARGET}_single
                       LABELS lab)
  add_test(NAME ${LAB_TARGET}.ranks_2
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/ranks2
                   "-DCMD=${launch2};$<TARGET_FILE:${LAB_TARGET}>;${args};--no-lr-scaling;--report;${LAB_RUNS}/ranks2/rank{rank}.json"
                   "-DEXPECT_REGEX=parameters at the start: identical on all 2 rank;2 rank\\(s\\) processed 10000 samples, 5000 of them unique;1 of 2 processes repeated rank 0's work \\(2.0x;parameters at the end: identical on all 2"
                   -DJSON=${LAB_RUNS}/ranks2/rank1.json
                   "-DJSON_EQ=status=ok;world_size=2;phases.steps=10;lab02.start_params_identical=ON;lab02.end_params_identical=ON;lab02.epochs.0.ranks_repeating_rank0=1"
                   "-DJSON_GT=comm.ops.allreduce.calls=0;comm.ops.broadcast.calls=0"
                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckRun.cmake)
  set_tests_properties(${LAB_TARGET}.ranks_2 PROPERTIES FIXTURES_REQUIRED tiny_data FIXTURES_SETUP ${LAB_TARGET}_ranks2
                       LABELS "lab;launch" TIMEOUT 120)
  add_test(NAME ${LAB_TARGET}.ranks_2_repeat_single
           COMMAND ${CMAKE_COMMAND} -DSINGLE=${LAB_RUNS}/single/rank0.json
                   "-DRANKS=${LAB_RUNS}/ranks2/rank0.json;${LAB_RUNS}/ranks2/rank1.json" -DTOL=1e-6
                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckParity.cmake)
  set_tests_properties(${LAB_TARGET}.ranks_2_repeat_single PROPERTIES
                       FIXTURES_REQUIRED "${LAB_TARGET}_single;${LAB_TARGET}_ranks2" LABELS lab)
else()
  # The skeleton runs: 1 rank lists every exercise; 2 ranks are two independent trainers that
  # cannot tell how much of their work was repeated.
  add_test(NAME ${LAB_TARGET}.skeleton_run
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/skeleton
                   "-DCMD=$<TARGET_FILE:${LAB_TARGET}>;${args};--report;${LAB_RUNS}/skeleton/rank{rank}.json" -DEXPECT_RC=3
                   "-DEXPECT_REGEX=exercise 02.1 is not implemented yet;not attempted yet: exercise\\(s\\) 02.1, 02.2, 02.3"
                   -DJSON=${LAB_RUNS}/skeleton/rank0.json
                   "-DJSON_EQ=status=not_attempted;not_attempted.0=02.1;not_attempted.1=02.2;not_attempted.2=02.3;phases.steps=10"
                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckRun.cmake)
  set_tests_properties(${LAB_TARGET}.skeleton_run PROPERTIES FIXTURES_REQUIRED tiny_data LABELS "lab;skeleton")
  add_test(NAME ${LAB_TARGET}.skeleton_ranks_2
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/skeleton2
                   "-DCMD=${launch2};$<TARGET_FILE:${LAB_TARGET}>;${args};--report;${LAB_RUNS}/skeleton2/rank{rank}.json"
                   -DEXPECT_RC=3
                   "-DEXPECT_REGEX=\\[rank 1\\] .*rank 1 trains alone;cannot be known: the ranks never talk;not attempted yet: exercise\\(s\\) 02.1, 02.2, 02.3"
                   -DJSON=${LAB_RUNS}/skeleton2/rank0.json "-DJSON_EQ=status=not_attempted;world_size=2;phases.steps=10"
                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckRun.cmake)
  set_tests_properties(${LAB_TARGET}.skeleton_ranks_2 PROPERTIES FIXTURES_REQUIRED tiny_data LABELS "lab;skeleton;launch"
                       TIMEOUT 120)
endif()

# Whole-program tests of lab 03, included by labs/CMakeLists.txt once per built tree with
# LAB_TARGET (the program target), LAB_TREE (labs|solutions) and LAB_RUNS (a scratch folder).
set(args --data;${DDPLAB_TINY_DATA};--eval-samples;2000;--log-every;0)
set(check -P ${PROJECT_SOURCE_DIR}/cmake/CheckRun.cmake)
if(LAB_TREE STREQUAL "solutions")
  # Parity: 2 and 4 ranks with the sampler's strided shards match one process at the same global
  # batch (1024 = 2 x 512 = 4 x 256) step by step. 8,192 samples = 8 steps.
  add_test(NAME ${LAB_TARGET}.single_1024
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/r1
                   "-DCMD=$<TARGET_FILE:${LAB_TARGET}>;${args};--train-samples;8192;--batch;1024;--report;${LAB_RUNS}/r1/rank{rank}.json"
                   "-DEXPECT_REGEX=every sample exactly once across 1 rank;test AUC"
                   -DJSON=${LAB_RUNS}/r1/rank0.json
                   "-DJSON_EQ=status=ok;phases.steps=8;sampler.shard=strided;sampler.padded=0;sampler.epochs.0.covered=ON"
                   ${check})
  set_tests_properties(${LAB_TARGET}.single_1024 PROPERTIES FIXTURES_REQUIRED tiny_data
                       FIXTURES_SETUP ${LAB_TARGET}_r1 LABELS lab)
  foreach(n 2 4)
    math(EXPR per "1024 / ${n}")
    math(EXPR each "8192 / ${n}")
    add_test(NAME ${LAB_TARGET}.ranks_${n}
             COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/r${n}
                     "-DCMD=$<TARGET_FILE:ddplab>;launch;-n;${n};--;$<TARGET_FILE:${LAB_TARGET}>;${args};--train-samples;8192;--batch;${per};--report;${LAB_RUNS}/r${n}/rank{rank}.json"
                     "-DEXPECT_REGEX=every sample exactly once across ${n} rank;parameters at the end: identical on all ${n}"
                     -DJSON=${LAB_RUNS}/r${n}/rank1.json
                     "-DJSON_EQ=status=ok;world_size=${n};phases.steps=8;sampler.num_samples=${each};sampler.epochs.0.covered=ON;sampler.params_identical=ON"
                     ${check})
    set(reports)
    math(EXPR last "${n} - 1")
    foreach(r RANGE ${last})
      list(APPEND reports ${LAB_RUNS}/r${n}/rank${r}.json)
    endforeach()
    add_test(NAME ${LAB_TARGET}.ranks_${n}_match_single
             COMMAND ${CMAKE_COMMAND} -DSINGLE=${LAB_RUNS}/r1/rank0.json "-DRANKS=${reports}" -DTOL=1e-4
                     -P ${PROJECT_SOURCE_DIR}/cmake/CheckParity.cmake)
    set_tests_properties(${LAB_TARGET}.ranks_${n} PROPERTIES FIXTURES_REQUIRED tiny_data
                         FIXTURES_SETUP ${LAB_TARGET}_r${n} LABELS "lab;launch" TIMEOUT 120)
    set_tests_properties(${LAB_TARGET}.ranks_${n}_match_single PROPERTIES
                         FIXTURES_REQUIRED "${LAB_TARGET}_r1;${LAB_TARGET}_r${n}" LABELS lab)
  endforeach()

  # An odd training set: padding gives both ranks 2,501 samples (one sample seen twice), and the
  # ranks' sample digests still add up to every sample once plus the padded one.
  add_test(NAME ${LAB_TARGET}.tail_pad
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/pad
                   "-DCMD=$<TARGET_FILE:ddplab>;launch;-n;2;--;$<TARGET_FILE:${LAB_TARGET}>;${args};--train-samples;5001;--report;${LAB_RUNS}/pad/rank{rank}.json"
                   "-DEXPECT_REGEX=tail pad \\(1 padded, 0 dropped\\);every sample exactly once across 2 rank\\(s\\) \\(1 padded"
                   -DJSON=${LAB_RUNS}/pad/rank0.json
                   "-DJSON_EQ=status=ok;phases.steps=5;sampler.num_samples=2501;sampler.padded=1;sampler.epochs.0.covered=ON"
                   ${check})
  set_tests_properties(${LAB_TARGET}.tail_pad PROPERTIES FIXTURES_REQUIRED tiny_data LABELS "lab;launch" TIMEOUT 120)

  # Click logs grouped by outcome, split in blocks: rank 0 gets no click at all; stratified, each
  # rank gets a quarter of clicks (and --tail drop leaves out the odd sample).
  set(sorted_args ${args};--train-samples;4097;--order;label-sorted;--no-shuffle;--shard;contiguous;--max-steps;2)
  add_test(NAME ${LAB_TARGET}.label_sorted
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/sorted
                   "-DCMD=$<TARGET_FILE:ddplab>;launch;-n;2;--;$<TARGET_FILE:${LAB_TARGET}>;${sorted_args};--report;${LAB_RUNS}/sorted/rank{rank}.json"
                   -DJSON=${LAB_RUNS}/sorted/rank0.json
                   "-DJSON_EQ=status=ok;sampler.padded=1;sampler.per_rank.0.positives=0;sampler.order=label-sorted"
                   "-DJSON_GT=sampler.per_rank.1.positives=800"
                   ${check})
  add_test(NAME ${LAB_TARGET}.label_sorted_stratified
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/strat
                   "-DCMD=$<TARGET_FILE:ddplab>;launch;-n;2;--;$<TARGET_FILE:${LAB_TARGET}>;${sorted_args};--stratify;--tail;drop;--report;${LAB_RUNS}/strat/rank{rank}.json"
                   -DJSON=${LAB_RUNS}/strat/rank0.json
                   "-DJSON_EQ=status=ok;sampler.dropped=1;sampler.num_samples=2048;sampler.stratify=ON"
                   "-DJSON_GT=sampler.per_rank.0.positives=400;sampler.per_rank.1.positives=400"
                   ${check})
  set_tests_properties(${LAB_TARGET}.label_sorted ${LAB_TARGET}.label_sorted_stratified PROPERTIES
                       FIXTURES_REQUIRED tiny_data LABELS "lab;launch" TIMEOUT 120)
else()
  # The skeleton runs on fallbacks and lists every exercise; at 2 ranks every rank takes the whole
  # order (lab 02's behaviour) and the coverage check says so.
  set(skel_args ${args};--train-samples;4096)
  add_test(NAME ${LAB_TARGET}.skeleton_run
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/skeleton
                   "-DCMD=$<TARGET_FILE:${LAB_TARGET}>;${skel_args};--report;${LAB_RUNS}/skeleton/rank{rank}.json" -DEXPECT_RC=3
                   "-DEXPECT_REGEX=exercise 03.1 is not implemented yet;not attempted yet: exercise\\(s\\) 03.1, 03.2, 03.3, 03.4"
                   -DJSON=${LAB_RUNS}/skeleton/rank0.json
                   "-DJSON_EQ=status=not_attempted;not_attempted.0=03.1;not_attempted.3=03.4;phases.steps=8"
                   ${check})
  set_tests_properties(${LAB_TARGET}.skeleton_run PROPERTIES FIXTURES_REQUIRED tiny_data LABELS "lab;skeleton")
  add_test(NAME ${LAB_TARGET}.skeleton_ranks_2
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${LAB_RUNS}/skeleton2
                   "-DCMD=$<TARGET_FILE:ddplab>;launch;-n;2;--;$<TARGET_FILE:${LAB_TARGET}>;${skel_args};--report;${LAB_RUNS}/skeleton2/rank{rank}.json"
                   -DEXPECT_RC=3
                   "-DEXPECT_REGEX=do NOT cover the training set exactly once: 8192 processed for 4096;not attempted yet: exercise\\(s\\) 03.1, 03.2, 03.3, 03.4"
                   -DJSON=${LAB_RUNS}/skeleton2/rank0.json "-DJSON_EQ=status=not_attempted;world_size=2;sampler.epochs.0.covered=OFF"
                   ${check})
  set_tests_properties(${LAB_TARGET}.skeleton_ranks_2 PROPERTIES FIXTURES_REQUIRED tiny_data
                       LABELS "lab;skeleton;launch" TIMEOUT 120)
endif()

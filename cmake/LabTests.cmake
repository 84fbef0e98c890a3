# Declarative whole-program tests of a lab, for labs/<lab>/tests/runs.cmake. labs/CMakeLists.txt
# includes that file once per built tree with LAB_TARGET (the program target), LAB_TREE
# (labs|solutions) and LAB_RUNS (a scratch folder) in scope; every helper below reads them.
# Each run writes its reports to ${LAB_RUNS}/<name>/rank<R>.json and is checked by
# cmake/CheckRun.cmake; every test needs the tiny data set (the tiny_data fixture).

# ddplab_lab_run(<name> ARGS <args...> [RANKS n] [LAUNCHER <cmd...>] [RC n] [EXPECT <regex...>]
#                [REJECT <regex...>] [REPORT rank] [EQ <path=value...>] [GT <path=value...>]
#                [REQUIRES <fixtures...>] [LABELS <labels...>] [TIMEOUT s] [NO_REPORT])
# Test ${LAB_TARGET}.<name>: runs the lab with --data (the tiny set) and --report filled in, on
# RANKS ranks through `ddplab launch` (with `--backend ${LAB_LAUNCH_BACKEND}` when the lab's runs.cmake
# sets it; or the given LAUNCHER command, which must start 2 or more
# ranks itself), and checks the exit status (RC, default 0), the output (EXPECT/REJECT) and fields
# of rank REPORT's report (default: the last rank; NO_REPORT: a run that must write none). It sets up the fixture ${LAB_TARGET}_<name>
# for tests that read its reports (ddplab_lab_parity).
function(ddplab_lab_run name)
  cmake_parse_arguments(R "NO_REPORT" "RANKS;RC;REPORT;TIMEOUT" "ARGS;LAUNCHER;EXPECT;REJECT;EQ;GT;REQUIRES;LABELS" ${ARGN})
  if(NOT R_RANKS)
    set(R_RANKS 1)
  endif()
  if(NOT DEFINED R_RC)
    set(R_RC 0)
  endif()
  if(NOT DEFINED R_REPORT)
    math(EXPR R_REPORT "${R_RANKS} - 1")
  endif()
  set(dir ${LAB_RUNS}/${name})
  set(cmd $<TARGET_FILE:${LAB_TARGET}>;--data;${DDPLAB_TINY_DATA};${R_ARGS};--report;${dir}/rank{rank}.json)
  set(labels lab ${R_LABELS})
  if(R_LAUNCHER)
    set(cmd ${R_LAUNCHER};${cmd})
    list(APPEND labels launch)
  elseif(R_RANKS GREATER 1)
    # The launcher's default transport (`--backend auto`: Open MPI where the kit has it), unless
    # the lab's runs.cmake pins one (LAB_LAUNCH_BACKEND, as its grade.toml's [lab] backend does).
    set(pin)
    if(LAB_LAUNCH_BACKEND)
      set(pin --backend;${LAB_LAUNCH_BACKEND})
    endif()
    set(cmd $<TARGET_FILE:ddplab_front>;launch;-n;${R_RANKS};${pin};--;${cmd})
    list(APPEND labels launch)
  endif()
  list(REMOVE_DUPLICATES labels)
  set(test ${LAB_TARGET}.${name})
  set(json -DJSON=${dir}/rank${R_REPORT}.json)
  if(R_NO_REPORT)
    set(json)  # a run that stops before it starts (a bad flag) writes no report
  endif()
  add_test(NAME ${test}
           COMMAND ${CMAKE_COMMAND} -DCLEAN=${dir} "-DCMD=${cmd}" -DEXPECT_RC=${R_RC}
                   "-DEXPECT_REGEX=${R_EXPECT}" "-DREJECT_REGEX=${R_REJECT}" ${json}
                   "-DJSON_EQ=${R_EQ}" "-DJSON_GT=${R_GT}" -P ${PROJECT_SOURCE_DIR}/cmake/CheckRun.cmake)
  if(NOT R_TIMEOUT)
    set(R_TIMEOUT 120)
  endif()
  set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED "tiny_data;${R_REQUIRES}" FIXTURES_SETUP ${LAB_TARGET}_${name}
                       LABELS "${labels}" TIMEOUT ${R_TIMEOUT})
  # For ddplab_lab_parity: which reports this run leaves behind.
  set_property(GLOBAL PROPERTY DDPLAB_RUN_RANKS_${LAB_TARGET}_${name} ${R_RANKS})
endfunction()

# ddplab_lab_parity(<name> SINGLE <run> RANKS <run...> TOL t)
# Test ${LAB_TARGET}.<run>_<name> per multi-rank run: the mean loss over its ranks equals the single
# process's loss at every step within TOL (cmake/CheckParity.cmake), the proof that N ranks at
# batch B follow one process at batch N x B. The runs are ddplab_lab_run names of this lab.
function(ddplab_lab_parity name)
  cmake_parse_arguments(P "" "SINGLE;TOL" "RANKS" ${ARGN})
  foreach(run IN LISTS P_RANKS)
    get_property(ranks GLOBAL PROPERTY DDPLAB_RUN_RANKS_${LAB_TARGET}_${run})
    if(NOT ranks)
      message(FATAL_ERROR "ddplab_lab_parity(${name}): ${run} is not a ddplab_lab_run of ${LAB_TARGET}")
    endif()
    set(reports)
    math(EXPR last "${ranks} - 1")
    foreach(r RANGE ${last})
      list(APPEND reports ${LAB_RUNS}/${run}/rank${r}.json)
    endforeach()
    set(test ${LAB_TARGET}.${run}_${name})
    add_test(NAME ${test}
             COMMAND ${CMAKE_COMMAND} -DSINGLE=${LAB_RUNS}/${P_SINGLE}/rank0.json "-DRANKS=${reports}" -DTOL=${P_TOL}
                     -P ${PROJECT_SOURCE_DIR}/cmake/CheckParity.cmake)
    set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED "${LAB_TARGET}_${P_SINGLE};${LAB_TARGET}_${run}" LABELS lab)
  endforeach()
endfunction()

# ddplab_skeleton_run(<name> EXERCISES <ids...> ARGS <args...> [RANKS n] [EXPECT ...] [EQ ...] ...)
# A ddplab_lab_run of the skeleton that must end "not attempted" (exit status 3) and list every
# exercise, in order, both in its output and in its report; other options as ddplab_lab_run.
function(ddplab_skeleton_run name)
  cmake_parse_arguments(S "" "RANKS;TIMEOUT" "EXERCISES;ARGS;LAUNCHER;EXPECT;REJECT;EQ;GT;REQUIRES;LABELS" ${ARGN})
  string(REPLACE ";" ", " ids "${S_EXERCISES}")
  set(eq status=not_attempted)
  set(i 0)
  foreach(id IN LISTS S_EXERCISES)
    list(APPEND eq not_attempted.${i}=${id})
    math(EXPR i "${i} + 1")
  endforeach()
  set(more)
  foreach(key RANKS TIMEOUT)
    if(S_${key})
      list(APPEND more ${key} ${S_${key}})
    endif()
  endforeach()
  foreach(key LAUNCHER REJECT GT REQUIRES)
    if(S_${key})
      list(APPEND more ${key} ${S_${key}})
    endif()
  endforeach()
  ddplab_lab_run(${name} ARGS ${S_ARGS} ${more} RC 3 REPORT 0
                 EXPECT ${S_EXPECT} "not attempted yet: exercise\\(s\\) ${ids}"
                 EQ ${eq} ${S_EQ} LABELS skeleton ${S_LABELS})
endfunction()

# ddplab_lab_same_params(ORACLE <run> RUNS <run...>)
# Test ${LAB_TARGET}.<run>_same_params_as_<oracle> per run: its final parameter digest (rank 0's
# report, params.final_digest) equals the oracle run's, bit for bit. For rungs that must compute
# exactly what the oracle computes (at 2 ranks a sum over ranks has one rounding whatever the
# packing, so gradient sync strategies agree to the last bit).
function(ddplab_lab_same_params)
  cmake_parse_arguments(P "" "ORACLE" "RUNS" ${ARGN})
  foreach(run IN LISTS P_RUNS)
    set(test ${LAB_TARGET}.${run}_same_params_as_${P_ORACLE})
    add_test(NAME ${test}
             COMMAND ${CMAKE_COMMAND} -DORACLE=${LAB_RUNS}/${P_ORACLE}/rank0.json -DRUN=${LAB_RUNS}/${run}/rank0.json
                     -P ${PROJECT_SOURCE_DIR}/cmake/CheckSameParams.cmake)
    set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED "${LAB_TARGET}_${P_ORACLE};${LAB_TARGET}_${run}" LABELS lab)
  endforeach()
endfunction()

cmake_policy(VERSION 3.22)
# A new lab is its folders plus one list entry: copies the kit's sources, adds a throw-away lab
# (labs/lab99_demo/ and solutions/lab99_demo/, with a runs.cmake and a planted bug) and the one
# line `ddplab_add_lab(lab99_demo)`, configures the copy, and checks that everything the kit
# derives from the folder is there: the program, its tests and both trees' targets, the
# submission slot, the grader's target map, the whole-program, flags-table and planted-bug tests.
# Only configured (compiling the copy would rebuild the whole kit); the real labs are compiled
# from the same ddplab_add_lab().
#   -DSRC=<kit source>  -DWORK=<scratch folder>  -DCONFIGURE=<-Dvar=value|...> (the calling build's
#   LibTorch and compiler, '|'-separated)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(kit ${WORK}/kit)
file(COPY ${SRC}/ DESTINATION ${kit}
     REGEX "^${SRC}/(build|data|runs|grade-results|\\.git)(/|$)" EXCLUDE)

set(lab ${kit}/labs/lab99_demo)
file(WRITE ${lab}/README.md "# Lab 99 — a throw-away lab\n\n- **99.1 double** — `twice(x)`: return 2x.\n")
file(WRITE ${lab}/lab99.h "// Lab 99 (throw-away): the student's function.\n#pragma once\nnamespace lab99 {\n/// Exercise 99.1: returns 2 * x.\nint twice(int x);\n}  // namespace lab99\n")
set(skeleton "// Lab 99: exercise 99.1.\n#include \"lab99.h\"\n#include \"ddplab/error.h\"\nnamespace lab99 {\nint twice(int x) {\n  // BEGIN STUDENT CODE (99.1: double)\n  @BODY@\n  // END STUDENT CODE\n}\n}  // namespace lab99\n")
string(REPLACE "@BODY@" "(void)x;\n  throw ddplab::NotImplemented(\"99.1\", \"return 2 * x\");" text "${skeleton}")
file(WRITE ${lab}/lab99_student.cpp "${text}")
string(REPLACE "@BODY@" "return 2 * x;" text "${skeleton}")
file(WRITE ${kit}/solutions/lab99_demo/lab99_student.cpp "${text}")
file(WRITE ${lab}/main.cpp "// Lab 99 driver.\n#include \"lab99.h\"\n#include \"ddplab/lab.h\"\nint main(int argc, char** argv) {\n  ddplab::LabProgram p;\n  p.name = DDPLAB_LAB_NAME;\n  p.body = [](ddplab::LabRun& run) { run.attempt([] { (void)lab99::twice(1); }); };\n  return ddplab::run_lab(p, argc, argv);\n}\n")
file(WRITE ${lab}/tests/lab99_test.cpp "#include <gtest/gtest.h>\n#include \"lab99.h\"\nTEST(Lab99, Twice) { EXPECT_EQ(lab99::twice(3), 6); }\n")
file(WRITE ${lab}/tests/runs.cmake "if(LAB_TREE STREQUAL \"solutions\")\n  ddplab_lab_run(run ARGS --max-steps 1 EQ status=ok)\nelse()\n  ddplab_skeleton_run(skeleton_run EXERCISES 99.1 ARGS --max-steps 1)\nendif()\n")
file(WRITE ${lab}/grade.toml "[lab]\ntitle = \"Lab 99 — a throw-away lab\"\n\n[[check]]\nid = \"twice\"\nkind = \"unit_tests\"\nname = \"twice doubles\"\nexercise = \"99.1\"\npoints = 100\nfilter = \"Lab99.*\"\n")
file(WRITE ${lab}/planted/halves/find.txt "return 2 * x;")
file(WRITE ${lab}/planted/halves/replace.txt "return x / 2;")
file(WRITE ${lab}/planted/halves/expect.toml "file = \"lab99_student.cpp\"\ncheck = \"twice\"\ndiagnosis = \"twice\"\n")
# The one line.
file(APPEND ${kit}/labs/CMakeLists.txt "ddplab_add_lab(lab99_demo)\n")

string(REPLACE "|" ";" configure "${CONFIGURE}")
string(REPLACE "<semicolon>" "\\;" configure "${configure}")  # a value's own list, one argument still
execute_process(COMMAND ${CMAKE_COMMAND} -S ${kit} -B ${WORK}/build -G Ninja -DCMAKE_BUILD_TYPE=Release
                        -DDDPLAB_BUILD_BOTH_TREES=ON -DDDPLAB_PCH=OFF ${configure}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the kit with a new lab failed:\n${out}${err}")
endif()

execute_process(COMMAND ninja -C ${WORK}/build -t targets all OUTPUT_VARIABLE targets RESULT_VARIABLE rc)
foreach(t lab99_demo lab99_demo_tests lab99_demo_labs lab99_demo_tests_labs lab99_demo_submission)
  if(NOT targets MATCHES "(^|\n)${t}: ")
    message(SEND_ERROR "no target ${t} for the new lab")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} -N WORKING_DIRECTORY ${WORK}/build OUTPUT_VARIABLE tests)
foreach(t lab99_demo.run lab99_demo_labs.skeleton_run lab99_demo_tests lab99_demo_tests_labs.skeleton_not_attempted
          docs.flags_table_lab99_demo grade.planted.lab99_demo.halves)
  string(REPLACE "." "\\." re "${t}")
  if(NOT tests MATCHES ": ${re}\n")
    message(SEND_ERROR "no test ${t} for the new lab; ctest -N lists:\n${tests}")
  endif()
endforeach()
file(READ ${WORK}/build/grader/targets.json map)
if(NOT map MATCHES "\"lab99_demo/solutions\"" OR NOT map MATCHES "\"lab99_demo/submission\"")
  message(SEND_ERROR "grader/targets.json does not map the new lab:\n${map}")
endif()
message(STATUS "a new lab from one folder and one line: targets, tests and the grader's map are all there")

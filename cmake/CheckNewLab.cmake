cmake_policy(VERSION 3.22)
# A new lab is its folders plus one list entry, as docs/concepts/adding-a-lab.md walks through it:
# copies the kit's sources, writes every block of that page marked `<!-- new-lab: PATH -->` to
# PATH in the copy (`new-lab-append` appends: the one line of labs/CMakeLists.txt), configures the
# copy and checks that everything the kit derives from the folder is there: the program, its tests
# and both trees' targets, the submission slot, the grader's target map, the whole-program,
# flags-table, driver-budget and planted-bug tests. Then it compiles the lab's own sources (both
# trees' student files, kit, driver, public and kit tests) against the kit's headers and runs the
# driver-budget test. Not linked or run: that would rebuild the whole kit in the copy; the real
# labs are built, run and graded from the same ddplab_add_lab().
#   -DSRC=<kit source>  -DWORK=<scratch folder>  -DCONFIGURE=<-Dvar=value|...> (the calling build's
#   LibTorch and compiler, '|'-separated)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(kit ${WORK}/kit)
file(COPY ${SRC}/ DESTINATION ${kit}
     REGEX "^${SRC}/(build|data|runs|grade-results|\\.git)(/|$)" EXCLUDE)

# The page's blocks. Its text stays one string (never a CMake list: C++ has semicolons).
set(page ${SRC}/docs/concepts/adding-a-lab.md)
file(READ ${page} doc)
set(written "")
while(TRUE)
  string(FIND "${doc}" "<!-- new-lab" at)
  if(at EQUAL -1)
    break()
  endif()
  string(SUBSTRING "${doc}" ${at} -1 doc)
  string(FIND "${doc}" "-->" end)
  string(SUBSTRING "${doc}" 0 ${end} marker)
  if(NOT marker MATCHES "^<!-- new-lab(-append)?: ([^ ]+) *$")
    message(FATAL_ERROR "${page}: a malformed marker '${marker}-->' (<!-- new-lab: PATH --> or <!-- new-lab-append: PATH -->)")
  endif()
  set(append "${CMAKE_MATCH_1}")
  set(path "${CMAKE_MATCH_2}")
  # The fenced block after the marker: from the line after its opening fence to its closing one.
  string(FIND "${doc}" "\n```" open)
  math(EXPR open "${open} + 4")
  string(SUBSTRING "${doc}" ${open} -1 doc)
  string(FIND "${doc}" "\n" eol)
  math(EXPR eol "${eol} + 1")
  string(SUBSTRING "${doc}" ${eol} -1 doc)
  string(FIND "${doc}" "\n```" close)
  if(close EQUAL -1)
    message(FATAL_ERROR "${page}: the block of ${path} is not closed")
  endif()
  math(EXPR close "${close} + 1")
  string(SUBSTRING "${doc}" 0 ${close} body)
  string(SUBSTRING "${doc}" ${close} -1 doc)
  if(append)
    file(APPEND ${kit}/${path} "${body}")
  else()
    file(WRITE ${kit}/${path} "${body}")
  endif()
  list(APPEND written ${path})
endwhile()
foreach(p labs/lab99_demo/main.cpp labs/lab99_demo/grade.toml solutions/lab99_demo/lab99_student.cpp labs/CMakeLists.txt)
  if(NOT p IN_LIST written)
    message(FATAL_ERROR "${page} gives no block for ${p} (written: ${written})")
  endif()
endforeach()

string(REPLACE "|" ";" configure "${CONFIGURE}")
string(REPLACE "<semicolon>" "\\;" configure "${configure}")  # a value's own list, one argument still
execute_process(COMMAND ${CMAKE_COMMAND} -S ${kit} -B ${WORK}/build -G Ninja -DCMAKE_BUILD_TYPE=Release
                        -DDDPLAB_BUILD_BOTH_TREES=ON -DDDPLAB_PCH=OFF ${configure}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the kit with a new lab failed:\n${out}${err}")
endif()

execute_process(COMMAND ninja -C ${WORK}/build -t targets all OUTPUT_VARIABLE targets RESULT_VARIABLE rc)
foreach(t lab99_demo lab99_demo_tests lab99_demo_labs lab99_demo_tests_labs lab99_demo_submission lab99_demo_kit_tests)
  if(NOT targets MATCHES "(^|\n)${t}: ")
    message(SEND_ERROR "no target ${t} for the new lab")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} -N WORKING_DIRECTORY ${WORK}/build OUTPUT_VARIABLE tests)
foreach(t lab99_demo.ranks_2 lab99_demo_labs.skeleton_run lab99_demo_tests lab99_demo_tests_labs.skeleton_not_attempted
          lab99_demo_kit_tests docs.flags_table_lab99_demo kit.driver_is_the_lesson_lab99_demo
          grade.planted.lab99_demo.ignores_world)
  string(REPLACE "." "\\." re "${t}")
  if(NOT tests MATCHES ": ${re}\n")
    message(SEND_ERROR "no test ${t} for the new lab; ctest -N lists:\n${tests}")
  endif()
endforeach()
file(READ ${WORK}/build/grader/targets.json map)
if(NOT map MATCHES "\"lab99_demo/solutions\"" OR NOT map MATCHES "\"lab99_demo/submission\"")
  message(SEND_ERROR "grader/targets.json does not map the new lab:\n${map}")
endif()

# The lab's own code compiles against the kit's headers: its object files only, not its targets
# (a library or program would wait for the kit's libraries, rebuilt in the copy).
string(REGEX MATCHALL "[^\n]*/lab99_demo_(student|student_labs|kit|driver|test_objects|kit_tests)\\.dir/[^\n]*\\.o: "
       objects "${targets}")
list(TRANSFORM objects REPLACE ": $" "")
list(LENGTH objects n)
if(n LESS 6)  # both trees' student files (not the submission slot's), kit, driver, public and kit tests
  message(SEND_ERROR "expected the objects of the lab's student files, kit, driver and tests; found ${n}: ${objects}")
endif()
execute_process(COMMAND ninja -C ${WORK}/build ${objects} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the walk-through's lab does not compile (${page}):\n${out}${err}")
endif()
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} -R "^kit\\.driver_is_the_lesson_lab99_demo$" --output-on-failure
                WORKING_DIRECTORY ${WORK}/build RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the walk-through's driver breaks the driver budget:\n${out}${err}")
endif()
message(STATUS "a new lab from one folder and one line, as ${page} has it: targets, tests and the grader's map are "
               "all there, its code compiles and its driver keeps the budget")

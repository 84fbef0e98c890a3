cmake_policy(VERSION 3.22)
# A lab's driver is its lesson (docs/concepts/adding-a-lab.md, "The driver"): main.cpp says what
# happens and in what order, within a line budget, and leaves measuring, formatting and probing to
# common/ and the lab's kit files. Fails naming the file, its size and each line that does the
# kit's work.
#   -DDRIVER=labs/<lab>/main.cpp  -DBUDGET=<lines>
file(STRINGS ${DRIVER} lines)
list(LENGTH lines n)
set(problems "")
if(n GREATER BUDGET)
  string(APPEND problems "\n  ${n} lines, over the budget of ${BUDGET}: move apparatus into the lab's kit file")
endif()
# What belongs in a kit file, not in the story: JSON building, clock reads, timer scopes, probe
# structs and hand-joined lists.
set(forbidden "nlohmann::json" "Clock::now" "timer.scope(" "timer().scope(" "struct Present" "fmt::join")
set(number 0)
foreach(line IN LISTS lines)
  math(EXPR number "${number} + 1")
  foreach(word IN LISTS forbidden)
    string(FIND "${line}" "${word}" at)
    if(NOT at EQUAL -1)
      string(STRIP "${line}" shown)
      string(APPEND problems "\n  line ${number} has '${word}': ${shown}")
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "${DRIVER} is not the lesson alone:${problems}")
endif()
message(STATUS "${DRIVER}: ${n} lines (budget ${BUDGET}), no apparatus")

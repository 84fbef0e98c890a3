cmake_policy(VERSION 3.22)
# The final parameters of a run equal an oracle run's, bit for bit:
#   -DORACLE=<rank0.json of the oracle run>  -DRUN=<rank0.json of the run>
foreach(var ORACLE RUN)
  if(NOT EXISTS ${${var}})
    message(FATAL_ERROR "${${var}} is missing: the run did not write its report")
  endif()
  file(READ ${${var}} doc)
  string(JSON ${var}_digest GET "${doc}" params final_digest)
endforeach()
if(NOT ORACLE_digest STREQUAL RUN_digest)
  message(FATAL_ERROR "final parameters differ from the oracle's: ${RUN} has ${RUN_digest}, ${ORACLE} has ${ORACLE_digest}")
endif()
message(STATUS "final parameters equal the oracle's (${RUN_digest})")

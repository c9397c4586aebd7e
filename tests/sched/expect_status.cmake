# Runs CMD with ARGS (separated by '|') and fails unless its exit status is EXPECT
# and, when MATCH is given, its output (stdout and stderr) matches that regex.
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND ${CMD} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT)
  message(FATAL_ERROR "expected exit status ${EXPECT}, got ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
if(DEFINED MATCH AND NOT "${out}${err}" MATCHES "${MATCH}")
  message(FATAL_ERROR "output does not match '${MATCH}'\nstdout: ${out}\nstderr: ${err}")
endif()
message(STATUS "exit status ${rc} as expected; stderr: ${err}")

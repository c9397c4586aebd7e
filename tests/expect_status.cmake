# Runs CMD with ARGS and fails unless its exit status is EXPECT.
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT)
  message(FATAL_ERROR "expected exit status ${EXPECT}, got ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
message(STATUS "exit status ${rc} as expected; stderr: ${err}")

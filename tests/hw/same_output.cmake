# Runs CMD with ARGS and A, then with ARGS and B, and fails unless both give the same exit
# status and, byte for byte, the same stdout (less what matches DROP, if given: a figure that
# varies from run to run, such as the host time). With EXPECT, the exit status must be that;
# with MATCH, the output must match that regex. Checks that `dtsim run -j N` prints what the
# sweep run one combination after another (-j 1) prints.
execute_process(COMMAND ${CMD} ${ARGS} ${A} RESULT_VARIABLE rc_a OUTPUT_VARIABLE out_a ERROR_VARIABLE err_a)
execute_process(COMMAND ${CMD} ${ARGS} ${B} RESULT_VARIABLE rc_b OUTPUT_VARIABLE out_b ERROR_VARIABLE err_b)
if(DEFINED DROP)
  string(REGEX REPLACE "${DROP}" "" out_a "${out_a}")
  string(REGEX REPLACE "${DROP}" "" out_b "${out_b}")
endif()
if(NOT rc_a STREQUAL rc_b)
  message(FATAL_ERROR "exit status ${rc_a} with '${A}', ${rc_b} with '${B}'\nstderr:\n${err_a}\n${err_b}")
endif()
if(DEFINED EXPECT AND NOT rc_a EQUAL EXPECT)
  message(FATAL_ERROR "expected exit status ${EXPECT}, got ${rc_a}\nstdout: ${out_a}\nstderr: ${err_a}")
endif()
if(NOT out_a STREQUAL out_b)
  message(FATAL_ERROR "the output differs\n--- with '${A}':\n${out_a}\n--- with '${B}':\n${out_b}")
endif()
if(DEFINED MATCH AND NOT "${out_a}" MATCHES "${MATCH}")
  message(FATAL_ERROR "output does not match '${MATCH}'\nstdout: ${out_a}")
endif()
string(LENGTH "${out_a}" bytes)
message(STATUS "the same ${bytes} bytes and exit status ${rc_a} with '${A}' and with '${B}'")

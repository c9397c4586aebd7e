# Runs CMD with ARGS and fails unless its exit status is EXPECT; with MATCH, unless its
# output (stdout, then stderr) matches that regex too; with ONE_LINE, unless stderr is
# exactly one line (a usage error's whole message); with FILES (absolute paths, removed
# before the run), unless the run wrote each of them. EMPTY_LAST adds an empty argument
# after ARGS (a list cannot carry one).
if(DEFINED FILES)
  file(REMOVE ${FILES})
endif()
if(EMPTY_LAST)
  execute_process(COMMAND ${CMD} ${ARGS} "" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
else()
  execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
endif()
if(NOT rc EQUAL EXPECT)
  message(FATAL_ERROR "expected exit status ${EXPECT}, got ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
if(DEFINED MATCH AND NOT "${out}${err}" MATCHES "${MATCH}")
  message(FATAL_ERROR "output does not match '${MATCH}'\nstdout: ${out}\nstderr: ${err}")
endif()
if(ONE_LINE AND NOT err MATCHES "^[^\n]+\n$")
  message(FATAL_ERROR "stderr is not one line\nstderr: ${err}")
endif()
foreach(f IN LISTS FILES)
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "the run did not write ${f}\nstdout: ${out}\nstderr: ${err}")
  endif()
endforeach()
message(STATUS "exit status ${rc} as expected; stderr: ${err}")

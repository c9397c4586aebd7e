# A writer that fails midway: runs CMD with ARGS with the size of the files it may write limited to
# LIMIT blocks (sh's `ulimit -f`, with SIGXFSZ ignored, so that a write past it fails with "File too
# large"), after putting "old" in FILE. Fails unless the run exits with status 1 naming FILE and the
# reason, FILE still holds "old" (the file under its final name is never half-written) and nothing
# is left under a temporary name (.NAME.tmp.PID) in FILE's folder.
get_filename_component(dir "${FILE}" DIRECTORY)
file(MAKE_DIRECTORY "${dir}")
file(GLOB stale "${dir}/.*.tmp.*")
if(stale)
  file(REMOVE ${stale})
endif()
file(WRITE "${FILE}" "old\n")
execute_process(COMMAND sh -c "trap '' XFSZ; ulimit -f ${LIMIT} && exec \"$@\"" sh ${CMD} ${ARGS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit status 1, got ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
string(REGEX REPLACE "([][+.*()^$?|\\\\])" "\\\\\\1" file_re "${FILE}")
if(NOT err MATCHES "${file_re}: write failed: File too large")
  message(FATAL_ERROR "the error does not name ${FILE} and the reason\nstderr: ${err}")
endif()
file(READ "${FILE}" now)
if(NOT now STREQUAL "old\n")
  string(LENGTH "${now}" size)
  message(FATAL_ERROR "${FILE} was changed: it holds ${size} bytes, not the \"old\" it held before the run")
endif()
file(GLOB left "${dir}/.*.tmp.*")
if(left)
  message(FATAL_ERROR "temporary files left behind: ${left}")
endif()
message(STATUS "exit status 1, ${FILE} unchanged, no temporary file; stderr: ${err}")

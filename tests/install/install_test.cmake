# ctest -P script (tests/install/CMakeLists.txt): installs the dtsim build
# BUILD_DIR into WORK_DIR/prefix (removed first, so every run starts fresh),
# then configures, builds and runs SOURCE_DIR/consumer and EXAMPLE_DIR (the
# user's strategy of examples/, whose output must equal its expected_output.txt)
# against that prefix with the same generator, compiler and flags, and
# configures SOURCE_DIR/no_cairo with pkg-config finding nothing. Fails on the
# first step that fails.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/empty-pkgconfig)
set(prefix ${WORK_DIR}/prefix)

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc})\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${CONFIG})

# The dtsim build's own CMAKE_PREFIX_PATH (where its dependencies may be) goes
# through the environment: a ';' list would not survive step()'s ARGN.
if(PREFIX_PATH)
  cmake_path(CONVERT "${PREFIX_PATH}" TO_NATIVE_PATH_LIST native)
  set(ENV{CMAKE_PREFIX_PATH} "${native}")
endif()
set(common -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix})
if(MAKE_PROGRAM)
  list(APPEND common -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
step("configuring the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/consumer -B ${WORK_DIR}/consumer ${common}
     -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
step("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer --config ${CONFIG})
foreach(exe consumer_puzzles consumer_render)
  step("running ${exe}" ${WORK_DIR}/consumer/bin/${exe})
  message(STATUS "${exe}:\n${out}")
endforeach()

# The example: a strategy of the user's own, as examples/strategy/CMakeLists.txt says to build it.
step("configuring the example" ${CMAKE_COMMAND} -S ${EXAMPLE_DIR} -B ${WORK_DIR}/example ${common}
     -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
     -DCMAKE_RUNTIME_OUTPUT_DIRECTORY=${WORK_DIR}/example/bin)
step("building the example" ${CMAKE_COMMAND} --build ${WORK_DIR}/example --config ${CONFIG})
step("running the example" ${WORK_DIR}/example/bin/example_strategy ${WORK_DIR}/example/timeline.svg)
file(READ ${EXAMPLE_DIR}/expected_output.txt expected)
if(NOT out STREQUAL expected)
  message(FATAL_ERROR "the example's output differs from ${EXAMPLE_DIR}/expected_output.txt\n"
                      "expected:\n${expected}\ngot:\n${out}")
endif()
if(NOT EXISTS ${WORK_DIR}/example/timeline.svg)
  message(FATAL_ERROR "the example drew no timeline")
endif()
message(STATUS "example_strategy: output as expected, timeline drawn")

# Without cairo.pc, find_package(dtsim) still gives core, puzzles and the rest,
# and only COMPONENTS render fails (checked by no_cairo/CMakeLists.txt).
unset(ENV{PKG_CONFIG_PATH})
set(ENV{PKG_CONFIG_LIBDIR} ${WORK_DIR}/empty-pkgconfig)
step("configuring no_cairo (pkg-config finding nothing)" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/no_cairo
     -B ${WORK_DIR}/no_cairo ${common} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DPKG_CONFIG_USE_CMAKE_PREFIX_PATH=OFF)
message(STATUS "no_cairo: dtsim::core without Cairo, COMPONENTS render not found, as expected")

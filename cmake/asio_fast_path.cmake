# Whether the engine takes its fast path through Asio's coroutine internals
# (include/dtsim/detail/task_frame.hpp, parked_thread.hpp): compiled, not
# assumed from a Boost release. cmake/checks/asio_fast_path.cpp uses exactly
# what the fast path needs from Asio; where it compiles and runs, AUTO turns the
# fast path on. The answer goes into a generated header that is installed with
# the others (code built against dtsim must see the same choice).
set(_dtsim_check_dir ${PROJECT_SOURCE_DIR}/cmake/checks)
set(_dtsim_fast OFF)
if(NOT DTSIM_ASIO_FAST_PATH STREQUAL "OFF")
  try_run(_dtsim_fast_run _dtsim_fast_compiles
          SOURCES ${_dtsim_check_dir}/asio_fast_path.cpp
          CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${_dtsim_check_dir}/stub;${PROJECT_SOURCE_DIR}/include"
          COMPILE_DEFINITIONS ${DTSIM_ASIO_CO_AWAIT_DEFINITION}
          LINK_LIBRARIES Boost::headers
          CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON
          COMPILE_OUTPUT_VARIABLE _dtsim_fast_log)
  if(_dtsim_fast_compiles AND _dtsim_fast_run EQUAL 0)
    set(_dtsim_fast ON)
  elseif(DTSIM_ASIO_FAST_PATH STREQUAL "ON")
    message(FATAL_ERROR "dtsim: DTSIM_ASIO_FAST_PATH=ON, but this Boost.Asio lacks what the fast path needs "
                        "(cmake/checks/asio_fast_path.cpp):\n${_dtsim_fast_log}")
  endif()
endif()
if(_dtsim_fast)
  set(DTSIM_FRAMELESS_AWAIT_VALUE 1)
  message(STATUS "dtsim: the engine's Asio fast path is on (Boost ${Boost_VERSION})")
else()
  set(DTSIM_FRAMELESS_AWAIT_VALUE 0)
  message(STATUS "dtsim: the engine's Asio fast path is off (Boost ${Boost_VERSION}; DTSIM_ASIO_FAST_PATH=${DTSIM_ASIO_FAST_PATH})")
endif()
# BOOST_VERSION as boost/version.hpp spells it: 1.74.0 is 107400.
set(DTSIM_CHECKED_BOOST_VERSION ${Boost_VERSION_MACRO})
if(NOT DTSIM_CHECKED_BOOST_VERSION)
  math(EXPR DTSIM_CHECKED_BOOST_VERSION "${Boost_VERSION_MAJOR} * 100000 + ${Boost_VERSION_MINOR} * 100 + ${Boost_VERSION_PATCH}")
endif()
set(DTSIM_GENERATED_INCLUDE_DIR ${PROJECT_BINARY_DIR}/include)
configure_file(${PROJECT_SOURCE_DIR}/cmake/asio_fast_path.hpp.in
               ${DTSIM_GENERATED_INCLUDE_DIR}/dtsim/detail/asio_fast_path.hpp @ONLY)

# cmake --install: the libraries and their headers (find_package(dtsim), see
# cmake/dtsimConfig.cmake.in; tests/install and examples/ check it), the dtsim
# command, and the data it reads by default (the shipped configs and
# measurements, in share/dtsim: see sim/cli/data_dir.cpp).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(_dtsim_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/dtsim)
install(TARGETS dtsim_core dtsim_puzzles dtsim_sched dtsim_hw EXPORT dtsimTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS dtsim_render EXPORT dtsimRenderTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS dtsim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/dtsim ${DTSIM_GENERATED_INCLUDE_DIR}/dtsim DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY configs DESTINATION ${CMAKE_INSTALL_DATADIR}/dtsim)
install(DIRECTORY calibration/data DESTINATION ${CMAKE_INSTALL_DATADIR}/dtsim/calibration)
install(EXPORT dtsimTargets NAMESPACE dtsim:: DESTINATION ${_dtsim_cmake_dir})
install(EXPORT dtsimRenderTargets NAMESPACE dtsim:: DESTINATION ${_dtsim_cmake_dir})
configure_package_config_file(cmake/dtsimConfig.cmake.in ${PROJECT_BINARY_DIR}/dtsimConfig.cmake
                              INSTALL_DESTINATION ${_dtsim_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtsimConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtsimConfig.cmake ${PROJECT_BINARY_DIR}/dtsimConfigVersion.cmake
        DESTINATION ${_dtsim_cmake_dir})

# dtsim_warnings: the warnings (and, with DTSIM_SANITIZE, the sanitizers; with DTSIM_FUZZ,
# libFuzzer's coverage) every dtsim target compiles with, linked PRIVATE so that they do not leak
# to users.
add_library(dtsim_warnings INTERFACE)
# g++ only: -Wno-stringop-overread: g++ 12 misreads boost::container::small_vector's copy
# of a spilled buffer as a read past its inline storage (a false positive).
# -Wno-restrict: g++ 12 warns on `"literal" + std::string&&` (GCC bug 105329).
# -Wno-subobject-linkage, g++ in a unity build only: there the .cpp files are
# #included into one file, so g++ takes each for a header and warns that a
# coroutine's frame (a type of its own, local to the function) has a field of a
# type from an anonymous namespace or a lambda's type; the frame is never
# named in another file, and the same sources compile clean one by one.
target_compile_options(dtsim_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                       $<$<CXX_COMPILER_ID:GNU>:-Wno-stringop-overread> $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
                       $<$<AND:$<CXX_COMPILER_ID:GNU>,$<BOOL:${CMAKE_UNITY_BUILD}>>:-Wno-subobject-linkage>
                       $<$<BOOL:${DTSIM_WERROR}>:-Werror>)
# With clang, UBSan's check of calls through function pointers is off: clang 14 fails on
# coroutines with it and debug information ("error: Cannot represent a difference across
# sections", sim/engine/engine.cpp).
if(DTSIM_SANITIZE)
  target_compile_options(dtsim_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined $<$<CXX_COMPILER_ID:Clang>:-fno-sanitize=function>)
  target_link_options(dtsim_warnings INTERFACE -fsanitize=address,undefined)
endif()
# DTSIM_FUZZ: the libraries' sources carry libFuzzer's coverage (the fuzz targets in tests/fuzz link
# libFuzzer itself; the other programs run with it unused); a driver's own code does not (below).
if(DTSIM_FUZZ)
  target_compile_options(dtsim_warnings INTERFACE
                         $<$<NOT:$<BOOL:$<TARGET_PROPERTY:DTSIM_DRIVER_CODE>>>:-fsanitize=fuzzer-no-link>)
endif()

# A program that drives the libraries, a test or a benchmark: under the sanitizers its own code
# compiles at -O0 and without libFuzzer's coverage, where the libraries keep the build type's
# optimisation and the coverage (what a fuzzer explores). ASan and UBSan check both alike. Such code
# is most of what the sanitizer build compiles, and clang compiles it at -O0 in about a third of the
# time -O1 takes. The price: of the templates and inline functions a driver shares with a library
# (the standard library's, fmt's, JSON's), the linker keeps the copy it meets first, the driver's
# -O0 one, and the libraries run that copy too.
function(dtsim_driver_code target)
  if(DTSIM_SANITIZE)
    target_compile_options(${target} PRIVATE -O0)
    set_target_properties(${target} PROPERTIES DTSIM_DRIVER_CODE ON)
  endif()
endfunction()

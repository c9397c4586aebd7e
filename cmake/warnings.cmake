# dtsim_warnings: the warnings (and, with DTSIM_SANITIZE, the sanitizers) every
# dtsim target compiles with, linked PRIVATE so that they do not leak to users.
add_library(dtsim_warnings INTERFACE)
# -Wno-stringop-overread: g++ 12 misreads boost::container::small_vector's copy
# of a spilled buffer as a read past its inline storage (a false positive).
# -Wno-restrict: g++ 12 warns on `"literal" + std::string&&` (GCC bug 105329).
# -Wno-subobject-linkage, g++ in a unity build only: there the .cpp files are
# #included into one file, so g++ takes each for a header and warns that a
# coroutine's frame (a type of its own, local to the function) has a field of a
# type from an anonymous namespace or a lambda's type; the frame is never
# named in another file, and the same sources compile clean one by one.
target_compile_options(dtsim_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wno-stringop-overread -Wno-restrict
                       $<$<AND:$<CXX_COMPILER_ID:GNU>,$<BOOL:${CMAKE_UNITY_BUILD}>>:-Wno-subobject-linkage>
                       $<$<BOOL:${DTSIM_WERROR}>:-Werror>)
if(DTSIM_SANITIZE)
  target_compile_options(dtsim_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
  target_link_options(dtsim_warnings INTERFACE -fsanitize=address,undefined)
endif()

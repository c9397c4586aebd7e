// The executable that compiles the test programs' precompiled headers with their flags; doctest's
// main (dtsim_test_main) is its main (tests/CMakeLists.txt).

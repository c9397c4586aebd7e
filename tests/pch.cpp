// The object that holds the test programs' precompiled headers (tests/CMakeLists.txt).

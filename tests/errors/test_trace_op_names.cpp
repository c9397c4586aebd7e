// Regression (fuzz_trace_reader): operation names are interned in one table per
// process, of at most 65535 names; a trace with more distinct names made the
// reader throw std::length_error, which named no place. It is now a
// TraceFormatError at the JSON path of the first name that does not fit.
// (A test executable of its own: it fills the process's table.)
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>

TEST_CASE("a trace with more distinct operation names than the table holds is rejected at the op") {
    std::string text = R"({"format": "dtsim-trace", "version": 1, "ranks": [{"rank": 0, "events": [)";
    for (int i = 0; i < 70000; ++i)
        text += (i ? "," : "") + std::string(R"({"op": "op)") + std::to_string(i) +
                R"(", "start": 0, "duration": 0, "memory": 0})";
    text += "]}]}";
    std::istringstream in(text);
    try {
        (void)dtsim::read_trace_json(in, "many.json");
        FAIL("no error");
    } catch (const dtsim::TraceFormatError& e) {
        const std::string msg = e.what();
        CAPTURE(msg);
        // The table starts with the 8 puzzle operations, so event 65527 is the 65536th name.
        CHECK(msg.rfind("many.json: at $.ranks[0].events[65527].op: too many distinct operation names (at most 65535 "
                        "in one process), found \"op65527\"",
                        0) == 0);
    }
}

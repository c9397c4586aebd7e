// libFuzzer target: the trace reader must accept a trace or reject it with a
// TraceFormatError, never crash or throw anything else; an accepted trace must
// write out and read back to the same bytes.
#include "dtsim/trace_io.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    dtsim::Trace t;
    try {
        t = dtsim::read_trace_json(in, "fuzz");
    } catch (const dtsim::TraceFormatError&) {
        return 0;
    }
    std::ostringstream a;
    dtsim::write_trace_json(t, a);
    std::istringstream again(a.str());
    dtsim::Trace t2 = dtsim::read_trace_json(again, "roundtrip");
    std::ostringstream b;
    dtsim::write_trace_json(t2, b);
    if (a.str() != b.str()) std::abort();
    return 0;
}

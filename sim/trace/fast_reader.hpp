// The trace reader's two parts (private to dtsim; not installed). read_trace_json reads a
// seekable stream with read_trace_fast first: a scanner of the trace format as dtsim writes it,
// a strict subset of JSON read in large blocks. At anything it does not handle (a syntax error, a
// bad value, a string with an escape or a byte outside printable ASCII, a key given twice, ...)
// it gives up, and the stream is read again from its start by read_trace_sax, the checking reader
// of docs/trace-format.md: every message and every rule of the format are that reader's.
#pragma once

#include "dtsim/trace.hpp"
#include "dtsim/trace_io.hpp"

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace dtsim::detail {

// The most memory kinds a trace may name (docs/trace-format.md); both readers hold to it.
inline constexpr std::size_t kMaxMemoryKinds = 64;

// Reads a trace from `in`'s current position to its end into `out` (a default Trace) and returns
// true, or returns false where the input is not in the subset it reads (then `out` and the
// stream's position are unspecified). A trace it reads is the one read_trace_sax reads. Input of
// more than `max_bytes` is not in the subset. Throws Interrupted where an interrupt is requested
// (checked at each block).
bool read_trace_fast(std::istream& in, Trace& out, std::uint64_t max_bytes, const RankHook& hook = {});

// The checking reader alone: every value checked as nlohmann's SAX parser hands it over.
Trace read_trace_sax(std::istream& in, const std::string& source, const RankHook& hook = {});

}  // namespace dtsim::detail

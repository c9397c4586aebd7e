// Reading and writing the trace JSON (docs/trace-format.md).
#pragma once

#include "dtsim/errors.hpp"
#include "dtsim/trace.hpp"

#include <iosfwd>
#include <stdexcept>
#include <string>

namespace dtsim {

// A malformed trace: what() names the source, the JSON path, what was expected
// and what was found ("t.json: at $.ranks[0].events[1].duration: expected >= 0, found -1").
class TraceFormatError : public std::runtime_error, public InputError {
public:
    using std::runtime_error::runtime_error;
};

// Writes the trace as JSON. Numbers use the shortest round-trip form, so the same
// trace always gives the same bytes.
void write_trace_json(const Trace& trace, std::ostream& out);
void write_trace_file(const Trace& trace, const std::string& path);

// `source` names the input in error messages (a file name, "<stdin>"). Fields the
// format does not define are ignored (a later version may add some).
Trace read_trace_json(std::istream& in, const std::string& source);
Trace read_trace_file(const std::string& path);

}  // namespace dtsim

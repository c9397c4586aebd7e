// Reading and writing the trace JSON (docs/trace-format.md).
#pragma once

#include "dtsim/errors.hpp"
#include "dtsim/trace.hpp"

#include <functional>
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

// Called with each rank as soon as it is read whole (its events checked; its memory samples checked
// but for their width against memory_kinds, which is checked at the end of the document), and
// with the trace read so far (what came before the ranks: meta, memory_kinds...); it may drop some
// of the rank's events and samples before the next rank is read. The summary is worked out from
// what it keeps. A reader that starts again from the beginning calls it again for every rank.
using RankHook = std::function<void(const Trace& so_far, RankTrace& rank)>;

// `source` names the input in error messages (a file name, "<stdin>"). Fields the
// format does not define are ignored (a later version may add some).
Trace read_trace_json(std::istream& in, const std::string& source, const RankHook& hook = {});
Trace read_trace_file(const std::string& path, const RankHook& hook = {});

}  // namespace dtsim

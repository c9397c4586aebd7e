#include "dtsim/trace_io.hpp"

#include "dtsim/detail/output_file.hpp"
#include "json/reader.hpp"

#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <ostream>
#include <stdexcept>

namespace dtsim {
namespace {

using nlohmann::json;

// Shortest representation that reads back to the same double (as Python's repr).
void put_number(std::string& out, double v) {
    if (std::fabs(v) < 1e15 && v == std::trunc(v))
        fmt::format_to(std::back_inserter(out), "{}", static_cast<long long>(v));
    else
        fmt::format_to(std::back_inserter(out), "{}", v);
}

// A string that is not UTF-8 is written with U+FFFD in its place (nlohmann would throw).
void put_string(std::string& out, std::string_view s) {
    out += json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string_view stream_name(Stream s) { return s == Stream::comm ? "comm" : "compute"; }

void put_event(std::string& out, const Event& e, bool hardware) {
    out += "{\"op\": ";
    put_string(out, e.op.name());
    out += ", \"layer\": ";
    if (e.layer == kNoLayer)
        out += "null";
    else
        fmt::format_to(std::back_inserter(out), "{}", e.layer);
    out += ", \"start\": ";
    put_number(out, e.start);
    out += ", \"duration\": ";
    put_number(out, e.duration);
    out += ", \"memory\": ";
    put_number(out, e.memory);
    // A puzzle's forward and backward list their batches even when there are none
    // (a run of 0 batches), as the reference's log does; other events only when they have some.
    if (!e.batches.empty() || (!hardware && (e.op == ops::forward || e.op == ops::backward))) {
        out += ", \"batches\": [";
        bool first = true;
        e.batches.for_each([&](std::int64_t b) {
            if (!first) out += ", ";
            first = false;
            fmt::format_to(std::back_inserter(out), "{}", b);
        });
        out += ']';
    }
    if (hardware) {
        out += ", \"stream\": \"";
        out += stream_name(e.stream);
        out += '"';
        if (e.bytes > 0) {
            out += ", \"bytes\": ";
            put_number(out, e.bytes);
        }
        if (e.flops > 0) {
            out += ", \"flops\": ";
            put_number(out, e.flops);
        }
    } else if (e.stream == Stream::comm) {
        // A step trace says which events ran on the comm stream (a pipeline schedule's sends and
        // receives); the puzzle world's run on the compute stream alone and read back without it.
        out += ", \"stream\": \"comm\"";
    }
    out += '}';
}

// What a trace's numbers may be: finite, and not negative (a time, a duration, memory, bytes
// and FLOPs), in the trace's own units; an event's end (start + duration) finite too.
constexpr Range kTime{"a time", "", 0, std::numeric_limits<double>::max()};
constexpr Range kMemory{"an amount of memory", "", 0, std::numeric_limits<double>::max()};
constexpr Range kAmount{"an amount", "", 0, std::numeric_limits<double>::max()};

// Trace errors read "FILE: at $.ranks[0].events[1].duration: expected >= 0, found -1".
const json_reader::Dialect kTraceDialect{
    .raise = [](const std::string& file, const std::string& path, const std::string& message) {
        throw TraceFormatError(fmt::format("{}: at {}: {}", file, path, message));
    },
    .member = "field"};

}  // namespace

void write_trace_json(const Trace& trace, std::ostream& os) {
    const bool hardware = trace.time_unit != "step";
    std::string out;
    out.reserve(256 + trace.event_count() * 110);
    out += "{\n\"format\": \"dtsim-trace\",\n\"version\": 1,\n\"time_unit\": ";
    put_string(out, trace.time_unit);
    out += ",\n\"memory_unit\": ";
    put_string(out, trace.memory_unit);
    out += ",\n\"meta\": ";
    // A string that is not UTF-8 (a file name in the meta) is written with U+FFFD in its place.
    out += trace.meta.dump(-1, ' ', false, json::error_handler_t::replace);
    if (trace.memory_capacity) {
        out += ",\n\"memory_capacity\": ";
        put_number(out, *trace.memory_capacity);
    }
    const auto& s = trace.summary;
    out += ",\n\"summary\": {\"timesteps\": ";
    put_number(out, s.timesteps);
    out += ", \"makespan\": ";
    put_number(out, s.makespan);
    out += ", \"max_memory\": ";
    put_number(out, s.max_memory);
    fmt::format_to(std::back_inserter(out), ", \"max_memory_rank\": {}", s.max_memory_rank);
    out += ", \"max_memory_time\": ";
    put_number(out, s.max_memory_time);
    if (s.correct) out += *s.correct ? ", \"correct\": true" : ", \"correct\": false";
    out += "},\n\"ranks\": [";
    for (std::size_t i = 0; i < trace.ranks.size(); ++i) {
        const auto& r = trace.ranks[i];
        fmt::format_to(std::back_inserter(out), "{}\n{{\"rank\": {}, \"events\": [", i ? "," : "",
                       r.rank);
        for (std::size_t j = 0; j < r.events.size(); ++j) {
            out += j ? ",\n  " : "\n  ";
            put_event(out, r.events[j], hardware);
            // Out in pieces of 4 MiB; a stream that failed (or a file whose writing was interrupted,
            // detail/output_file.hpp) ends the writing.
            if (out.size() > (1u << 22)) {
                os << out;
                out.clear();
                if (!os) return;
            }
        }
        out += "]}";
    }
    out += "]\n}\n";
    os << out;
}

void write_trace_file(const Trace& trace, const std::string& path) {
    detail::write_output_file(path, [&trace](std::ostream& os) { write_trace_json(trace, os); });
}

Trace read_trace_json(std::istream& in, const std::string& source) {
    using json_reader::Value;
    Trace t;
    {
        // The document (as large as the trace's text, many times its events) is gone before the trace is returned.
        const json_reader::Document doc = json_reader::Document::read(in, source, kTraceDialect);
        const Value root = doc.root();
        (void)root["format"].choice({"dtsim-trace"});
        if (const Value version = root["version"]; version.json() != 1) version.expected("1");
        if (const auto unit = root.find("time_unit")) t.time_unit = unit->choice({"step", "s"});
        if (const auto unit = root.find("memory_unit")) t.memory_unit = unit->choice({"unit", "byte"});
        if (const auto meta = root.find("meta")) t.meta = meta->json();
        if (const auto capacity = root.find("memory_capacity")) t.memory_capacity = capacity->real(kMemory);
        const Value ranks = root["ranks"];
        t.ranks.reserve(ranks.size());
        for (std::size_t i = 0; i < ranks.size(); ++i) {
            const Value r = ranks.at(i);
            RankTrace rt;
            const Value rank = r["rank"];
            if (const std::int64_t n = rank.int64(); n != static_cast<std::int64_t>(i))
                rank.fail(fmt::format("ranks must be listed in order: expected {}, found {}", i, n));
            rt.rank = static_cast<int>(i);
            const Value events = r["events"];
            rt.events.reserve(events.size());
            for (std::size_t k = 0; k < events.size(); ++k) {
                const Value ev = events.at(k);
                Event e;
                const Value op = ev["op"];
                if (!op.json().is_string() || op.string().empty()) op.expected("an operation name");
                try {
                    e.op = OpCode::of(op.string());
                } catch (const std::length_error&) {  // the process-wide table of names is full
                    op.fail(fmt::format("too many distinct operation names (at most 65535 in one process), found \"{}\"",
                                        json_reader::shorten(op.string())));
                }
                if (const auto layer = ev.find("layer"); layer && !layer->json().is_null()) {
                    const std::int64_t l = layer->int64();
                    if (l < 0 || l > 1'000'000'000)
                        layer->fail(fmt::format("expected a layer index >= 0, found {}", l));
                    e.layer = static_cast<std::int32_t>(l);
                }
                e.start = ev["start"].real(kTime);
                const Value duration = ev["duration"];
                if (!duration.json().is_number()) duration.expected("a number");
                e.duration = duration.json().get<double>();
                if (e.duration < 0) duration.fail(fmt::format("expected >= 0, found {}", e.duration));
                if (!std::isfinite(e.start + e.duration))
                    duration.fail(fmt::format("the event ends beyond the largest time a trace can hold (start {} + "
                                              "duration {})",
                                              e.start, e.duration));
                e.memory = ev["memory"].real(kMemory);
                if (const auto batches = ev.find("batches")) {
                    if (!batches->is_array()) batches->expected("an array of ids");
                    for (std::size_t b = 0; b < batches->size(); ++b) {
                        const Value id = batches->at(b);
                        const std::int64_t n = id.int64();
                        if (n < 0) id.fail(fmt::format("expected an id >= 0, found {}", n));
                        e.batches.insert(n);
                    }
                }
                if (const auto stream = ev.find("stream"))
                    e.stream = stream->choice({"compute", "comm"}) == "comm" ? Stream::comm : Stream::compute;
                if (const auto bytes = ev.find("bytes")) e.bytes = bytes->real(kAmount);
                if (const auto flops = ev.find("flops")) e.flops = flops->real(kAmount);
                rt.events.push_back(std::move(e));
            }
            t.ranks.push_back(std::move(rt));
        }
        summarize(t);
        // The written summary is recomputed above; only the correctness of the run is kept, where it is given.
        if (const auto summary = root.find("summary"))
            if (const auto correct = summary->find("correct"); correct && correct->json().is_boolean())
                t.summary.correct = correct->boolean();
    }
    return t;
}

Trace read_trace_file(const std::string& path) {
    std::ifstream f = json_reader::open_input(path, path, kTraceDialect, json_reader::kMaxTraceBytes);
    return read_trace_json(f, path);
}

}  // namespace dtsim

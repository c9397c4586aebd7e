#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
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

void put_string(std::string& out, std::string_view s) { out += json(s).dump(); }

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
    }
    out += '}';
}

[[noreturn]] void fail(const std::string& source, const std::string& path, const std::string& what) {
    throw TraceFormatError(fmt::format("{}: at {}: {}", source, path, what));
}

const json& need(const json& obj, const char* key, const std::string& source,
                 const std::string& path) {
    auto it = obj.find(key);
    if (it == obj.end()) fail(source, path, fmt::format("missing field \"{}\"", key));
    return *it;
}

double need_number(const json& v, const std::string& source, const std::string& path) {
    if (!v.is_number()) fail(source, path, fmt::format("expected a number, found {}", v.dump()));
    return v.get<double>();
}

std::int64_t need_int(const json& v, const std::string& source, const std::string& path) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
        fail(source, path, fmt::format("expected an integer, found {}", v.dump()));
    return v.get<std::int64_t>();
}

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
    out += trace.meta.dump();
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
        }
        out += "]}";
        if (out.size() > (1u << 22)) {
            os << out;
            out.clear();
        }
    }
    out += "]\n}\n";
    os << out;
}

void write_trace_file(const Trace& trace, const std::string& path) {
    std::ofstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(fmt::format("{}: cannot open for writing", path));
    write_trace_json(trace, f);
    if (!f) throw std::runtime_error(fmt::format("{}: write failed", path));
}

Trace read_trace_json(std::istream& in, const std::string& source) {
    json j;
    try {
        j = json::parse(in);
    } catch (const json::exception& e) {  // parse errors, and numbers too large for a double
        throw TraceFormatError(fmt::format("{}: not valid JSON: {}", source, e.what()));
    }
    if (!j.is_object()) fail(source, "$", "expected a JSON object");
    const auto& format = need(j, "format", source, "$");
    if (format != "dtsim-trace")
        fail(source, "$.format", fmt::format("expected \"dtsim-trace\", found {}", format.dump()));
    const auto& version = need(j, "version", source, "$");
    if (version != 1)
        fail(source, "$.version", fmt::format("expected 1, found {}", version.dump()));
    Trace t;
    if (auto it = j.find("time_unit"); it != j.end()) {
        if (!it->is_string() || (*it != "step" && *it != "s"))
            fail(source, "$.time_unit", fmt::format("expected \"step\" or \"s\", found {}", it->dump()));
        t.time_unit = it->get<std::string>();
    }
    if (auto it = j.find("memory_unit"); it != j.end()) {
        if (!it->is_string() || (*it != "unit" && *it != "byte"))
            fail(source, "$.memory_unit",
                 fmt::format("expected \"unit\" or \"byte\", found {}", it->dump()));
        t.memory_unit = it->get<std::string>();
    }
    if (auto it = j.find("meta"); it != j.end()) t.meta = *it;
    if (auto it = j.find("memory_capacity"); it != j.end())
        t.memory_capacity = need_number(*it, source, "$.memory_capacity");
    const auto& ranks = need(j, "ranks", source, "$");
    if (!ranks.is_array()) fail(source, "$.ranks", "expected an array");
    t.ranks.reserve(ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        const std::string rp = fmt::format("$.ranks[{}]", i);
        const auto& r = ranks[i];
        if (!r.is_object()) fail(source, rp, "expected an object");
        RankTrace rt;
        const auto rank = need_int(need(r, "rank", source, rp), source, rp + ".rank");
        if (rank != static_cast<std::int64_t>(i))
            fail(source, rp + ".rank", fmt::format("ranks must be listed in order: expected {}, found {}", i, rank));
        rt.rank = static_cast<int>(i);
        const auto& evs = need(r, "events", source, rp);
        if (!evs.is_array()) fail(source, rp + ".events", "expected an array");
        rt.events.reserve(evs.size());
        for (std::size_t k = 0; k < evs.size(); ++k) {
            const std::string ep = fmt::format("{}.events[{}]", rp, k);
            const auto& ej = evs[k];
            if (!ej.is_object()) fail(source, ep, "expected an object");
            Event e;
            const auto& op = need(ej, "op", source, ep);
            if (!op.is_string() || op.get_ref<const std::string&>().empty())
                fail(source, ep + ".op", fmt::format("expected an operation name, found {}", op.dump()));
            try {
                e.op = OpCode::of(op.get_ref<const std::string&>());
            } catch (const std::length_error&) {  // the process-wide table of names is full
                fail(source, ep + ".op", fmt::format("too many distinct operation names (at most 65535 in one process), "
                                                     "found {}", op.dump()));
            }
            if (auto it = ej.find("layer"); it != ej.end() && !it->is_null()) {
                auto l = need_int(*it, source, ep + ".layer");
                if (l < 0 || l > 1'000'000'000)
                    fail(source, ep + ".layer", fmt::format("expected a layer index >= 0, found {}", l));
                e.layer = static_cast<std::int32_t>(l);
            }
            e.start = need_number(need(ej, "start", source, ep), source, ep + ".start");
            e.duration = need_number(need(ej, "duration", source, ep), source, ep + ".duration");
            if (e.duration < 0)
                fail(source, ep + ".duration", fmt::format("expected >= 0, found {}", e.duration));
            e.memory = need_number(need(ej, "memory", source, ep), source, ep + ".memory");
            if (auto it = ej.find("batches"); it != ej.end()) {
                if (!it->is_array()) fail(source, ep + ".batches", "expected an array of ids");
                for (std::size_t b = 0; b < it->size(); ++b) {
                    auto id = need_int((*it)[b], source, fmt::format("{}.batches[{}]", ep, b));
                    if (id < 0)
                        fail(source, fmt::format("{}.batches[{}]", ep, b),
                             fmt::format("expected an id >= 0, found {}", id));
                    e.batches.insert(id);
                }
            }
            if (auto it = ej.find("stream"); it != ej.end()) {
                if (*it == "compute")
                    e.stream = Stream::compute;
                else if (*it == "comm")
                    e.stream = Stream::comm;
                else
                    fail(source, ep + ".stream",
                         fmt::format("expected \"compute\" or \"comm\", found {}", it->dump()));
            }
            if (auto it = ej.find("bytes"); it != ej.end())
                e.bytes = need_number(*it, source, ep + ".bytes");
            if (auto it = ej.find("flops"); it != ej.end())
                e.flops = need_number(*it, source, ep + ".flops");
            rt.events.push_back(std::move(e));
        }
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    if (auto it = j.find("summary"); it != j.end() && it->is_object()) {
        if (auto c = it->find("correct"); c != it->end() && c->is_boolean())
            t.summary.correct = c->get<bool>();
    }
    return t;
}

Trace read_trace_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw TraceFormatError(fmt::format("{}: cannot open for reading", path));
    return read_trace_json(f, path);
}

}  // namespace dtsim

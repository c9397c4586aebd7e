#include "dtsim/render.hpp"

#include "dtsim/detail/output_file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <numeric>
#include <ostream>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <vector>

namespace dtsim::render {
namespace {

std::string_view kind_name(OpKind k) {
    switch (k) {
        case OpKind::compute: return "compute";
        case OpKind::update: return "update";
        case OpKind::collective: return "collective";
        case OpKind::p2p: return "p2p";
        case OpKind::other: break;
    }
    return "other";
}

// The event's name on its track: the pass letters of the pipeline figures for the passes (F, B, I, W),
// the operation's name for the rest, then its microbatches and layer, e.g. "F mb3 L12", "all_reduce L7",
// "send mb0 L19". A puzzle's batches read "b", a schedule's layers (its stages) "S".
std::string event_name(const Event& e, bool puzzle, bool layer_is_stage) {
    const std::string_view op = e.op.name();
    std::string name = op == "forward"           ? "F"
                       : op == "backward"        ? "B"
                       : op == "backward_input"  ? "I"
                       : op == "backward_weight" ? "W"
                                                 : std::string(op);
    if (!e.batches.empty()) {
        const std::string ids = e.batches.str();  // "{0-3,7}"
        name += fmt::format(" {}{}", puzzle ? "b" : "mb", ids.size() >= 2 ? ids.substr(1, ids.size() - 2) : ids);
    }
    if (e.layer != kNoLayer) name += fmt::format(" {}{}", layer_is_stage ? "S" : "L", e.layer);
    return name;
}

// Which receive each send hands its tensor to, for the flow arrows: the receive on another rank with
// the same start, duration, microbatches and bytes (a transfer is one rendezvous in every world),
// on the grid the nearest pipeline rank with the same tp, cp and dp coordinates. Per rank, per event:
// the (rank index, event index) of the matching receive, or none.
struct Flow {
    std::size_t send_rank, send_event, recv_rank, recv_event;
};

std::vector<Flow> match_passes(const Trace& trace, const RankGrid& grid) {
    const OpCode send = OpCode::of("send"), recv = OpCode::of("recv");
    struct Key {
        double start, duration, bytes;
        std::string batches;
        auto operator<=>(const Key&) const = default;
    };
    std::map<Key, std::vector<std::pair<std::size_t, std::size_t>>> receives;
    for (std::size_t r = 0; r < trace.ranks.size(); ++r)
        for (std::size_t i = 0; i < trace.ranks[r].events.size(); ++i) {
            const Event& e = trace.ranks[r].events[i];
            if (e.op == recv) receives[{e.start, e.duration, e.bytes, e.batches.str()}].emplace_back(r, i);
        }
    std::vector<Flow> flows;
    if (receives.empty()) return flows;
    const bool on_grid = grid.known && grid.size() == static_cast<int>(trace.ranks.size());
    for (std::size_t r = 0; r < trace.ranks.size(); ++r)
        for (std::size_t i = 0; i < trace.ranks[r].events.size(); ++i) {
            const Event& e = trace.ranks[r].events[i];
            if (e.op != send) continue;
            auto it = receives.find({e.start, e.duration, e.bytes, e.batches.str()});
            if (it == receives.end()) continue;
            auto& candidates = it->second;
            const int from = trace.ranks[r].rank;
            auto best = candidates.end();
            int best_distance = 0;
            for (auto c = candidates.begin(); c != candidates.end(); ++c) {
                const int to = trace.ranks[c->first].rank;
                if (to == from) continue;
                int distance = 1;
                if (on_grid) {
                    const auto a = grid.coords(from), b = grid.coords(to);
                    if (a.tp != b.tp || a.cp != b.cp || a.dp != b.dp) continue;
                    distance = std::abs(a.pp - b.pp);
                }
                if (best == candidates.end() || distance < best_distance) {
                    best = c;
                    best_distance = distance;
                }
            }
            if (best == candidates.end()) continue;
            flows.push_back({r, i, best->first, best->second});
            candidates.erase(best);
        }
    return flows;
}

// Shortest form that reads back to the same double (check_numbers() has made sure it is finite).
void put_number(std::string& out, double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15)
        fmt::format_to(std::back_inserter(out), "{}", static_cast<long long>(v));
    else
        fmt::format_to(std::back_inserter(out), "{}", v);
}

void put_string(std::string& out, std::string_view s) { out += nlohmann::json(s).dump(); }

// The meta object holds no number that is not finite (nlohmann would write it as null).
void check_meta(const nlohmann::json& j, const std::string& path) {
    if (j.is_number_float() && !std::isfinite(j.get<double>()))
        throw std::invalid_argument(fmt::format("the Chrome trace cannot hold the trace's meta{}: {} is not a JSON number",
                                                path, j.get<double>()));
    if (j.is_object())
        for (const auto& [key, value] : j.items()) check_meta(value, path + "." + key);
    if (j.is_array())
        for (std::size_t i = 0; i < j.size(); ++i) check_meta(j[i], fmt::format("{}[{}]", path, i));
}

// Every number the export writes is finite, checked before anything is written: JSON has no NaN or
// infinity (nor null where a number belongs), and a time in microseconds past the largest double
// (1.8e302 s) has no JSON number either.
void check_numbers(const Trace& trace, double us) {
    check_meta(trace.meta, "");
    for (const auto& r : trace.ranks)
        for (std::size_t i = 0; i < r.events.size(); ++i) {
            const Event& e = r.events[i];
            for (const auto& [v, what] : {std::pair{e.start * us, "start in microseconds"},
                                          std::pair{e.duration * us, "duration in microseconds"},
                                          std::pair{e.memory, "memory"}, std::pair{e.bytes, "bytes"},
                                          std::pair{e.flops, "FLOPs"}})
                if (!std::isfinite(v))
                    throw std::invalid_argument(
                        fmt::format("the Chrome trace cannot hold the {} of rank {}, event {} ({}): {} is not a JSON "
                                    "number",
                                    what, r.rank, i, e.op.name(), v));
        }
    const std::size_t stride = 1 + trace.memory_kinds.size();
    for (const auto& r : trace.ranks)
        if (!trace.memory_kinds.empty()) {
            if (!trace.whole_memory_samples(r))
                throw std::invalid_argument(fmt::format(
                    "the Chrome trace cannot hold rank {}'s memory by kind: it is not whole samples of a time and {} amounts",
                    r.rank, trace.memory_kinds.size()));
            for (std::size_t j = 0; j < r.memory_by_kind.size(); ++j)
                if (const double v = r.memory_by_kind[j] * (j % stride == 0 ? us : 1.0); !std::isfinite(v))
                    throw std::invalid_argument(fmt::format(
                        "the Chrome trace cannot hold the memory by kind of rank {}, sample {}: {} is not a JSON number",
                        r.rank, j / stride, v));
        }
}

// One event per line, separated by commas.
void separate(std::string& out, bool& first) {
    out += first ? "\n" : ",\n";
    first = false;
}

void put_metadata(std::string& out, bool& first, int pid, long long tid, std::string_view name,
                  std::string_view key, const std::string& value_json) {
    separate(out, first);
    fmt::format_to(std::back_inserter(out),
                   "{{\"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"name\": \"{}\", \"args\": {{\"{}\": {}}}}}",
                   pid, tid, name, key, value_json);
}

double micros_per_unit(const Trace& trace) {
    return trace.time_unit == "s" ? kChromeMicrosPerSecond : kChromeMicrosPerStep;
}

// The threads of one rank: each stream's events spread over as few threads as keep the slices of a
// thread apart, since a viewer nests (Perfetto) or stacks the slices of one thread that overlap, and
// one that starts inside another and ends after it has no place there. A pipeline rank's sends and
// receives overlap this way on the comm stream (the simulator runs them concurrently), and so may the
// collectives of its data- and tensor-parallel streams, which share the trace's one comm stream.
struct RankThreads {
    std::vector<std::size_t> order;      // the events by start (stable): the order threads and counters take
    std::vector<std::size_t> thread_of;  // per event: index into names
    std::vector<std::string> names;      // "compute", then "comm", "comm 2", ...; the compute thread always first
    std::vector<int> sort_index;
};

// Overlaps shorter than this (microseconds: a nanosecond, the resolution of Perfetto's timestamps)
// are rounding in the trace's times, not concurrency.
constexpr double kOverlapTolerance = 1e-3;

RankThreads rank_threads(const RankTrace& r, double us) {
    RankThreads out;
    out.thread_of.assign(r.events.size(), 0);
    std::vector<std::size_t>& order = out.order;
    order.resize(r.events.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return r.events[a].start < r.events[b].start; });
    for (const Stream stream : {Stream::compute, Stream::comm}) {
        const std::string_view base = stream == Stream::compute ? "compute" : "comm";
        std::vector<double> ends;  // per thread of this stream: the end of its last slice, in microseconds
        const std::size_t first = out.names.size();
        for (const auto i : order) {
            const Event& e = r.events[i];
            if (e.stream != stream) continue;
            const double start = e.start * us;
            std::size_t k = 0;
            while (k < ends.size() && ends[k] > start + kOverlapTolerance) ++k;
            if (k == ends.size()) ends.push_back(0);
            ends[k] = std::max(ends[k], start + e.duration * us);
            out.thread_of[i] = first + k;
        }
        if (stream == Stream::compute && ends.empty()) ends.push_back(0);  // named even when empty
        for (std::size_t k = 0; k < ends.size(); ++k) {
            out.names.push_back(k == 0 ? std::string(base) : fmt::format("{} {}", base, k + 1));
            out.sort_index.push_back(static_cast<int>(out.names.size()) - 1);
        }
    }
    return out;
}

void write_checked(const Trace& trace, std::ostream& os) {
    const double us = micros_per_unit(trace);
    // Memory as a counter in GiB (2^30 bytes divide a double exactly), or in the trace's units.
    const bool bytes = trace.memory_unit == "byte";
    const std::string_view memory_key = bytes ? "GiB" : "units";
    const double memory_scale = bytes ? 1.0 / static_cast<double>(std::int64_t{1} << 30) : 1.0;
    const bool has_memory = std::any_of(trace.ranks.begin(), trace.ranks.end(), [](const RankTrace& r) {
        return std::any_of(r.events.begin(), r.events.end(), [](const Event& e) { return e.memory != 0; });
    });
    std::string out;
    constexpr std::size_t kChunk = std::size_t{1} << 22;  // written out whenever this much has gathered
    out.reserve(std::min(512 + trace.event_count() * 200, 2 * kChunk));
    out += "{\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"generator\": \"dtsim\", \"time_unit\": ";
    put_string(out, trace.time_unit);
    out += ", \"microseconds_per_time_unit\": ";
    put_number(out, us);
    out += ", \"memory_unit\": ";
    put_string(out, trace.memory_unit);
    out += ", \"meta\": ";
    out += trace.meta.dump();
    out += "},\n\"traceEvents\": [";
    bool first = true;
    const RankGrid grid = grid_of(trace);
    const bool puzzle = trace.meta.is_object() && trace.meta.contains("puzzle");
    const bool layer_is_stage = trace.meta.is_object() && trace.meta.contains("stages");
    // The flow arrows of point-to-point passes, by send and by receive: (rank index, event index) -> id.
    std::map<std::pair<std::size_t, std::size_t>, std::size_t> flow_out, flow_in;
    {
        const auto flows = match_passes(trace, grid);
        for (std::size_t k = 0; k < flows.size(); ++k) {
            flow_out[{flows[k].send_rank, flows[k].send_event}] = k + 1;
            flow_in[{flows[k].recv_rank, flows[k].recv_event}] = k + 1;
        }
    }
    // Thread ids are unique in the whole export and above every pid (the rank): Perfetto's importer
    // finds a thread by its tid, takes tid 0 for the idle task, and a tid equal to a pid for that
    // process's main thread.
    long long next_tid = 1;
    for (const auto& r : trace.ranks) next_tid = std::max(next_tid, static_cast<long long>(r.rank) + 1);
    for (std::size_t ri = 0; ri < trace.ranks.size(); ++ri) {
        const auto& r = trace.ranks[ri];
        const int pid = r.rank;
        std::string process = fmt::format("GPU {}", r.rank);
        if (grid.known && grid.size() == static_cast<int>(trace.ranks.size()) && grid.size() > 1) {
            const auto c = grid.coords(r.rank);
            std::string coords;
            for (const auto& [dim, n, v] : {std::tuple{"pp", grid.pp, c.pp}, std::tuple{"dp", grid.dp, c.dp},
                                            std::tuple{"cp", grid.cp, c.cp}, std::tuple{"tp", grid.tp, c.tp}})
                if (n > 1) coords += fmt::format("{}{}{}", coords.empty() ? "" : " ", dim, v);
            process += " (" + coords + ")";
        }
        const RankThreads threads = rank_threads(r, us);
        const long long tid0 = next_tid;
        next_tid += static_cast<long long>(threads.names.size());
        put_metadata(out, first, pid, tid0, "process_name", "name", nlohmann::json(process).dump());
        put_metadata(out, first, pid, tid0, "process_sort_index", "sort_index", fmt::format("{}", r.rank));
        for (std::size_t k = 0; k < threads.names.size(); ++k) {
            const long long tid = tid0 + static_cast<long long>(k);
            put_metadata(out, first, pid, tid, "thread_name", "name", nlohmann::json(threads.names[k]).dump());
            put_metadata(out, first, pid, tid, "thread_sort_index", "sort_index",
                         fmt::format("{}", threads.sort_index[k]));
        }
        for (std::size_t ei = 0; ei < r.events.size(); ++ei) {
            const Event& e = r.events[ei];
            const long long tid = tid0 + static_cast<long long>(threads.thread_of[ei]);
            separate(out, first);
            fmt::format_to(std::back_inserter(out), "{{\"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"name\": ", pid, tid);
            put_string(out, event_name(e, puzzle, layer_is_stage));
            fmt::format_to(std::back_inserter(out), ", \"cat\": \"{}\", \"ts\": ", kind_name(op_kind(e.op)));
            put_number(out, e.start * us);
            out += ", \"dur\": ";
            put_number(out, e.duration * us);
            out += ", \"args\": {";
            if (e.layer != kNoLayer) fmt::format_to(std::back_inserter(out), "\"layer\": {}, ", e.layer);
            if (!e.batches.empty()) {
                out += "\"batches\": [";
                bool first_id = true;
                e.batches.for_each([&](std::int64_t b) {
                    if (!first_id) out += ", ";
                    first_id = false;
                    fmt::format_to(std::back_inserter(out), "{}", b);
                });
                out += "], ";
            }
            out += "\"memory\": ";
            put_number(out, e.memory);
            if (e.bytes > 0) {
                out += ", \"bytes\": ";
                put_number(out, e.bytes);
            }
            if (e.flops > 0) {
                out += ", \"flops\": ";
                put_number(out, e.flops);
            }
            out += "}}";
            // A pass's arrow: from its send ("s") to its receive ("f", bound to the enclosing slice).
            for (const auto* flows : {&flow_out, &flow_in}) {
                auto it = flows->find({ri, ei});
                if (it == flows->end()) continue;
                separate(out, first);
                fmt::format_to(std::back_inserter(out),
                               "{{\"ph\": \"{}\", \"pid\": {}, \"tid\": {}, \"name\": \"pass\", \"cat\": \"p2p\", "
                               "\"id\": {}, {}\"ts\": ",
                               flows == &flow_out ? "s" : "f", pid, tid, it->second,
                               flows == &flow_out ? "" : "\"bp\": \"e\", ");
                put_number(out, e.start * us);
                out += "}";
            }
        }
        // Memory as a counter track of the rank's process, "memory GPU r": a sample wherever the value
        // changes, in time order. None for a trace that records no memory (dtsim failures).
        if (has_memory) {
            const std::string counter = nlohmann::json(fmt::format("memory GPU {}", r.rank)).dump();
            bool have_last = false;
            double last = 0;
            for (auto i : threads.order) {
                const Event& e = r.events[i];
                if (have_last && e.memory == last) continue;
                have_last = true;
                last = e.memory;
                separate(out, first);
                fmt::format_to(std::back_inserter(out), "{{\"ph\": \"C\", \"pid\": {}, \"tid\": {}, \"name\": {}, \"ts\": ",
                               pid, tid0, counter);
                put_number(out, e.start * us);
                fmt::format_to(std::back_inserter(out), ", \"args\": {{\"{}\": ", memory_key);
                put_number(out, e.memory * memory_scale);
                out += "}}";
            }
        }
        // Memory by kind, where the trace divides it: one counter "memory by kind GPU r" with an
        // argument per kind (Perfetto draws a track for each; chrome://tracing stacks them).
        if (const std::size_t n = trace.memory_samples(r); n > 0) {
            const std::string counter = nlohmann::json(fmt::format("memory by kind GPU {}", r.rank)).dump();
            const std::size_t kinds = trace.memory_kinds.size();
            for (std::size_t i = 0; i < n; ++i) {
                const double* s = r.memory_by_kind.data() + i * (1 + kinds);
                if (i > 0 && std::equal(s + 1, s + 1 + kinds, s - kinds)) continue;  // no change
                separate(out, first);
                fmt::format_to(std::back_inserter(out), "{{\"ph\": \"C\", \"pid\": {}, \"tid\": {}, \"name\": {}, \"ts\": ",
                               pid, tid0, counter);
                put_number(out, s[0] * us);
                out += ", \"args\": {";
                for (std::size_t k = 0; k < kinds; ++k) {
                    if (k) out += ", ";
                    put_string(out, trace.memory_kinds[k]);
                    out += ": ";
                    put_number(out, s[1 + k] * memory_scale);
                }
                out += "}}";
            }
        }
        if (out.size() > kChunk) {
            os << out;
            out.clear();
            if (!os) break;  // a failed stream, or an interrupted file (detail/output_file.hpp)
        }
    }
    out += "\n]}\n";
    os << out;
    if (!os) throw std::runtime_error("writing the Chrome trace: the output stream failed");
}

}  // namespace

void write_chrome_trace(const Trace& trace, std::ostream& os) {
    check_numbers(trace, micros_per_unit(trace));
    write_checked(trace, os);
}

void write_chrome_trace_file(const Trace& trace, const std::string& path) {
    check_numbers(trace, micros_per_unit(trace));  // before the file is opened: no file for a trace it cannot hold
    dtsim::detail::write_output_file(path, [&trace](std::ostream& out) { write_checked(trace, out); });
}

}  // namespace dtsim::render

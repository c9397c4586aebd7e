#include "dtsim/trace_io.hpp"

#include "dtsim/detail/output_file.hpp"
#include "json/reader.hpp"
#include "trace/fast_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <array>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>
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
    const std::size_t stride = 1 + trace.memory_kinds.size();
    if (!trace.memory_kinds.empty()) {
        out += ",\n\"memory_kinds\": [";
        for (std::size_t k = 0; k < trace.memory_kinds.size(); ++k) {
            if (k) out += ", ";
            put_string(out, trace.memory_kinds[k]);
        }
        out += ']';
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
        out += ']';
        if (!trace.memory_kinds.empty() && !r.memory_by_kind.empty()) {
            if (!trace.whole_memory_samples(r))
                throw std::logic_error("write_trace_json: a rank's memory_by_kind is not whole samples");
            out += ",\n \"memory_by_kind\": [";
            for (std::size_t j = 0; j < r.memory_by_kind.size(); j += stride) {
                out += j ? ",\n  [" : "\n  [";
                for (std::size_t k = 0; k < stride; ++k) {
                    if (k) out += ", ";
                    put_number(out, r.memory_by_kind[j + k]);
                }
                out += ']';
                if (out.size() > (1u << 22)) {
                    os << out;
                    out.clear();
                    if (!os) return;
                }
            }
            out += ']';
        }
        out += '}';
    }
    out += "]\n}\n";
    os << out;
}

void write_trace_file(const Trace& trace, const std::string& path) {
    detail::write_output_file(path, [&trace](std::ostream& os) { write_trace_json(trace, os); });
}

namespace {

// A value of the document kept until its object is complete, so that an event's fields are checked
// in one order whatever order the file gives them in; an array or object only by its kind.
struct Scalar {
    enum class Kind : std::uint8_t { absent, null, boolean, integer, unsigned_integer, real, string, object, array };
    Kind kind = Kind::absent;
    bool b = false;
    std::int64_t i = 0;
    std::uint64_t u = 0;
    double d = 0;
    std::string s;

    [[nodiscard]] bool present() const { return kind != Kind::absent; }
    [[nodiscard]] bool is_number() const {
        return kind == Kind::integer || kind == Kind::unsigned_integer || kind == Kind::real;
    }
    [[nodiscard]] double number() const {
        return kind == Kind::integer ? static_cast<double>(i) : kind == Kind::unsigned_integer ? static_cast<double>(u) : d;
    }
    // The value as nlohmann has it, for messages (json_reader::describe) and the meta.
    [[nodiscard]] json to_json() const {
        switch (kind) {
            case Kind::absent:
            case Kind::null: return nullptr;
            case Kind::boolean: return b;
            case Kind::integer: return i;
            case Kind::unsigned_integer: return u;
            case Kind::real: return d;
            case Kind::string: return s;
            case Kind::object: return json::object();
            case Kind::array: return json::array();
        }
        return nullptr;
    }
};

// The fields of an event dtsim reads, and the trace's own fields at its top.
enum class Field : std::uint8_t { op, layer, start, duration, memory, stream, bytes, flops, batches, other };
constexpr std::size_t kEventScalars = 8;  // op ... flops

Field event_field(std::string_view k) {
    static constexpr std::pair<std::string_view, Field> kFields[] = {
        {"op", Field::op},         {"layer", Field::layer},   {"start", Field::start}, {"duration", Field::duration},
        {"memory", Field::memory}, {"stream", Field::stream}, {"bytes", Field::bytes}, {"flops", Field::flops},
        {"batches", Field::batches}};
    for (const auto& [name, f] : kFields)
        if (k == name) return f;
    return Field::other;
}

// Reads a trace as nlohmann's parser hands over its values, into the trace itself: no document of
// the whole file is built, so what reading takes beyond the trace is one event's fields and the
// meta. Each value is checked against the format (docs/trace-format.md) with the messages the
// reader has always given: the file, the JSON path, what was expected and what was found. A syntax
// error anywhere comes first; then the first bad value in the file's order, an event's fields
// checked once the event is complete, in the order op, layer, start, duration, memory, batches,
// stream, bytes, flops.
class TraceReader final : public json::json_sax_t {
public:
    TraceReader(Trace& t, const std::string& source, const RankHook& hook) : t_(t), source_(source), hook_(hook) {}

    // After the parse: the fields of the top that must be there, and the summary.
    void finish() {
        if (failed_) throw TraceFormatError(first_error_);
        check_head(/*complete=*/true);
        check_memory_samples();
        summarize(t_);
        // The written summary is recomputed above; only the correctness of the run is kept, where it is given.
        t_.summary.correct = correct_;
    }

    bool null() override { return put(Scalar::Kind::null); }
    bool boolean(bool v) override {
        tmp_.b = v;
        return put(Scalar::Kind::boolean);
    }
    bool number_integer(number_integer_t v) override {
        tmp_.i = v;
        return put(Scalar::Kind::integer);
    }
    bool number_unsigned(number_unsigned_t v) override {
        tmp_.u = v;
        return put(Scalar::Kind::unsigned_integer);
    }
    bool number_float(number_float_t v, const string_t&) override {
        tmp_.d = v;
        return put(Scalar::Kind::real);
    }
    bool string(string_t& v) override {
        tmp_.s.assign(v);
        return put(Scalar::Kind::string);
    }
    bool binary(binary_t&) override { return put(Scalar::Kind::null); }  // not produced by the JSON parser
    bool start_object(std::size_t) override { return put(Scalar::Kind::object); }
    bool start_array(std::size_t) override { return put(Scalar::Kind::array); }
    bool key(string_t& k) override {
        Frame& f = stack_.back();
        f.key.assign(k);
        if (f.role == Role::event) field_ = event_field(k);
        return true;
    }
    bool end_object() override {
        close();
        return true;
    }
    bool end_array() override {
        close();
        return true;
    }
    // Syntax errors are json_reader::sax_read's to report.
    bool parse_error(std::size_t, const std::string&, const json::exception&) override { return false; }

private:
    // What a container of the document is to the reader.
    enum class Role : std::uint8_t { root, ranks, rank, events, event, batches, meta, summary, kinds, samples, sample, skip };
    struct Frame {
        Role role;
        bool array;
        std::size_t count = 0;  // an array's elements so far, the one being read included
        std::string key;        // an object's last key
    };

    [[noreturn]] void fail(const std::string& path, const std::string& message) const {
        throw TraceFormatError(fmt::format("{}: at {}: {}", source_, path, message));
    }

    // The path of the value in the slot of frame `n` (its last key or element), through the frames below.
    [[nodiscard]] std::string path(std::size_t n) const {
        std::string out = "$";
        for (std::size_t i = 0; i < n && i < stack_.size(); ++i) out += step(stack_[i]);
        return out;
    }
    [[nodiscard]] static std::string step(const Frame& f) {
        if (f.array) return fmt::format("[{}]", f.count - 1);
        constexpr std::size_t kShown = 32;
        return f.key.size() <= kShown ? "." + f.key : "." + f.key.substr(0, kShown) + "...";
    }
    static auto literal(const char* path) {
        return [path] { return std::string(path); };
    }
    [[nodiscard]] std::string field_path(std::size_t n, std::string_view name) const {
        return path(n) + "." + std::string(name);
    }

    // The checks below take the place of the value as a function that puts its path together, called
    // only when the check fails: a trace has millions of values, and almost never a bad one.
    template <class Where>
    [[noreturn]] void expected(const Where& where, std::string_view what, const Scalar& v) const {
        fail(where(), fmt::format("expected {}, found {}", what, json_reader::describe(v.to_json())));
    }
    // As json_reader::Value::real for the trace's ranges, which start at 0 inclusive.
    template <class Where>
    double real(const Where& where, const Scalar& v, const Range& range) const {
        if (!v.is_number()) expected(where, "a number >= 0", v);
        const double x = v.number();
        if (!range.right_sign(x)) expected(where, "a number >= 0", v);
        if (!range.contains(x)) expected(where, range.describe(), v);
        return x;
    }
    template <class Where>
    std::int64_t int64(const Where& where, const Scalar& v) const {
        if (v.kind == Scalar::Kind::integer) return v.i;
        if (v.kind == Scalar::Kind::unsigned_integer && v.u <= static_cast<std::uint64_t>(INT64_MAX))
            return static_cast<std::int64_t>(v.u);
        expected(where, "an integer", v);
    }
    template <class Where>
    std::string_view choice(const Where& where, const Scalar& v, std::string_view a, std::string_view b = {}) const {
        const std::string_view choices[] = {a, b};
        const std::span<const std::string_view> list(choices, b.empty() ? 1 : 2);
        const std::string alternatives =
            b.empty() ? fmt::format("\"{}\"", a) : fmt::format("\"{}\" or \"{}\"", a, b);
        if (v.kind != Scalar::Kind::string) expected(where, alternatives, v);
        for (std::string_view c : list)
            if (v.s == c) return c;
        const auto hint = json_reader::nearest(v.s, list);
        fail(where(), fmt::format("expected {}, found \"{}\"{}", alternatives, json_reader::shorten(v.s),
                               hint.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", hint)));
    }

    // The fields at the top of the document, checked as they were before a trace was streamed:
    // those given so far when the ranks start, all of them (and the ranks there) at the end.
    void check_head(bool complete) {
        const auto need = [&](const Scalar& v, std::string_view name) {
            if (!v.present() && complete) fail("$", fmt::format("missing field \"{}\"", name));
            return v.present();
        };
        if (need(format_, "format")) (void)choice(literal("$.format"), format_, "dtsim-trace");
        if (need(version_, "version") && !(version_.is_number() && version_.number() == 1))
            expected(literal("$.version"), "1", version_);
        if (time_unit_.present()) t_.time_unit = std::string(choice(literal("$.time_unit"), time_unit_, "step", "s"));
        if (memory_unit_.present()) t_.memory_unit = std::string(choice(literal("$.memory_unit"), memory_unit_, "unit", "byte"));
        if (capacity_.present()) t_.memory_capacity = real(literal("$.memory_capacity"), capacity_, kMemory);
        if (complete && !ranks_seen_) fail("$", "missing field \"ranks\"");
    }

    // A value (a scalar in tmp_, or the start of an array or object), where its container puts it.
    // After the first bad value the rest of the file is only parsed, its nesting counted: a file
    // that is not JSON is said to be so first (the reader of whole documents did it so), and a
    // file nested too deep at once.
    bool put(Scalar::Kind kind) {
        tmp_.kind = kind;
        if (kind != Scalar::Kind::string) tmp_.s.clear();  // copies of a non-string value carry no old text
        const bool container = kind == Scalar::Kind::object || kind == Scalar::Kind::array;
        Role child = Role::skip;
        if (!failed_) {
            try {
                child = place(kind, container);
            } catch (const TraceFormatError& e) {
                failed_ = true;
                first_error_ = e.what();
                child = Role::skip;
            }
        } else if (!stack_.empty() && stack_.back().array) {
            ++stack_.back().count;
        }
        if (container) open(child, kind == Scalar::Kind::array);
        return true;
    }

    // Where the value goes, checked; the role of its frame where it is an array or an object.
    Role place(Scalar::Kind kind, bool container) {
        if (stack_.empty()) {
            if (kind != Scalar::Kind::object) expected(literal("$"), "an object", tmp_);
            return Role::root;
        }
        Frame& f = stack_.back();
        if (f.array) ++f.count;
        Role child = Role::skip;
        switch (f.role) {
            case Role::root: child = at_top(f.key, container); break;
            case Role::ranks:
                if (kind != Scalar::Kind::object) expected([&] { return path(stack_.size()); }, "an object", tmp_);
                t_.ranks.emplace_back();
                t_.ranks.back().rank = static_cast<int>(t_.ranks.size() - 1);
                rank_given_ = events_given_ = false;
                child = Role::rank;
                break;
            case Role::rank: child = in_rank(f.key, container); break;
            case Role::events:
                if (kind != Scalar::Kind::object) expected([&] { return path(stack_.size()); }, "an object", tmp_);
                for (auto& v : fields_) v.kind = Scalar::Kind::absent;
                batches_.kind = Scalar::Kind::absent;
                batch_ids_.clear();
                child = Role::event;
                break;
            case Role::event:
                if (field_ == Field::batches) {
                    batches_ = tmp_;
                    if (kind == Scalar::Kind::array) {
                        batch_ids_.clear();
                        child = Role::batches;
                    }
                } else if (field_ != Field::other) {
                    fields_[static_cast<std::size_t>(field_)] = tmp_;
                }
                break;
            case Role::batches: batch_ids_.push_back(tmp_); break;
            case Role::kinds: {
                const auto p = [&] { return path(stack_.size()); };
                if (tmp_.kind != Scalar::Kind::string || tmp_.s.empty()) expected(p, "a kind's name", tmp_);
                if (std::find(t_.memory_kinds.begin(), t_.memory_kinds.end(), tmp_.s) != t_.memory_kinds.end())
                    fail(p(), fmt::format("the kind \"{}\" is named twice", json_reader::shorten(tmp_.s)));
                if (t_.memory_kinds.size() >= detail::kMaxMemoryKinds)
                    fail(p(), fmt::format("more than {} memory kinds", detail::kMaxMemoryKinds));
                t_.memory_kinds.push_back(tmp_.s);
                break;
            }
            case Role::samples:
                if (kind != Scalar::Kind::array)
                    expected([&] { return path(stack_.size()); }, "an array (a time, then an amount of each memory kind)", tmp_);
                sample_start_ = t_.ranks.back().memory_by_kind.size();
                child = Role::sample;
                break;
            case Role::sample: {
                const auto p = [&] { return path(stack_.size()); };
                t_.ranks.back().memory_by_kind.push_back(f.count == 1 ? real(p, tmp_, kTime) : real(p, tmp_, kMemory));
                break;
            }
            case Role::meta: {
                json& top = *meta_stack_.back();
                json& slot = f.array ? top.emplace_back(tmp_.to_json()) : (top[f.key] = tmp_.to_json());
                if (container) meta_stack_.push_back(&slot);
                child = Role::meta;
                break;
            }
            case Role::summary:
                if (f.key == "correct")
                    correct_ = kind == Scalar::Kind::boolean ? std::optional<bool>(tmp_.b) : std::nullopt;
                break;
            case Role::skip: break;
        }
        return child;
    }

    void open(Role role, bool array) {
        // As json_reader's document builder: the document itself is the first level.
        if (static_cast<int>(stack_.size()) >= json_reader::kMaxDepth) {
            constexpr std::size_t kSteps = 8;
            std::string place = path(std::min(stack_.size(), kSteps));
            if (stack_.size() > kSteps) place += "...";
            fail(place, fmt::format("arrays and objects nested more than {} deep (dtsim reads at most {} levels)",
                                    json_reader::kMaxDepth, json_reader::kMaxDepth));
        }
        stack_.push_back({role, array, 0, {}});
    }

    Role at_top(const std::string& k, bool container) {
        Scalar* keep = k == "format"            ? &format_
                       : k == "version"         ? &version_
                       : k == "time_unit"       ? &time_unit_
                       : k == "memory_unit"     ? &memory_unit_
                       : k == "memory_capacity" ? &capacity_
                                                : nullptr;
        if (keep) {
            *keep = tmp_;
            return Role::skip;
        }
        if (k == "meta") {
            t_.meta = tmp_.to_json();
            meta_stack_.assign(1, &t_.meta);
            return Role::meta;
        }
        if (k == "memory_kinds") {
            if (tmp_.kind != Scalar::Kind::array) expected(literal("$.memory_kinds"), "an array of names", tmp_);
            t_.memory_kinds.clear();  // a key given twice: the last one counts
            return Role::kinds;
        }
        if (k == "ranks") {
            check_head(/*complete=*/false);
            if (tmp_.kind != Scalar::Kind::array) expected(literal("$.ranks"), "an array", tmp_);
            ranks_seen_ = true;
            t_.ranks.clear();  // a key given twice: the last one counts
            return Role::ranks;
        }
        if (k == "summary") {
            correct_.reset();
            return container && tmp_.kind == Scalar::Kind::object ? Role::summary : Role::skip;
        }
        return Role::skip;
    }

    Role in_rank(const std::string& k, bool) {
        const std::size_t i = t_.ranks.size() - 1;
        if (k == "rank") {
            const auto p = [&] { return field_path(stack_.size() - 1, "rank"); };
            if (const std::int64_t n = int64(p, tmp_); n != static_cast<std::int64_t>(i))
                fail(p(), fmt::format("ranks must be listed in order: expected {}, found {}", i, n));
            rank_given_ = true;
            return Role::skip;
        }
        if (k == "events") {
            if (tmp_.kind != Scalar::Kind::array) expected([&] { return field_path(stack_.size() - 1, "events"); }, "an array", tmp_);
            events_given_ = true;
            t_.ranks.back().events.clear();
            return Role::events;
        }
        if (k == "memory_by_kind") {
            if (tmp_.kind != Scalar::Kind::array)
                expected([&] { return field_path(stack_.size() - 1, "memory_by_kind"); }, "an array of samples", tmp_);
            t_.ranks.back().memory_by_kind.clear();
            return Role::samples;
        }
        return Role::skip;
    }

    void close() {
        if (!failed_) {
            try {
                complete(stack_.back().role);
            } catch (const TraceFormatError& e) {
                failed_ = true;
                first_error_ = e.what();
            }
        }
        stack_.pop_back();
    }

    void complete(Role role) {
        switch (role) {
            case Role::event: end_event(); break;
            case Role::rank: {
                if (!rank_given_) fail(path(stack_.size() - 1), "missing field \"rank\"");
                if (!events_given_) fail(path(stack_.size() - 1), "missing field \"events\"");
                auto& events = t_.ranks.back().events;
                events.shrink_to_fit();  // what the vector grew by beyond the rank's events
                if (hook_) hook_(t_, t_.ranks.back());
                break;
            }
            case Role::meta: meta_stack_.pop_back(); break;
            case Role::sample: end_sample(); break;
            default: break;
        }
    }

    const Scalar& field(Field f) const { return fields_[static_cast<std::size_t>(f)]; }

    // A sample of a rank's memory by kind complete: as wide as every other (the kinds are checked
    // against it at the end, memory_kinds being free to come after the ranks), its time not before
    // the sample before it.
    void end_sample() {
        std::vector<double>& v = t_.ranks.back().memory_by_kind;
        const std::size_t width = v.size() - sample_start_;
        const auto p = [&] { return path(stack_.size() - 1); };
        if (width < 2)
            fail(p(), fmt::format("expected a time and an amount of each memory kind, found {} number{}", width,
                                  width == 1 ? "" : "s"));
        if (sample_width_ == 0) {
            sample_width_ = width;
            first_sample_rank_ = t_.ranks.size() - 1;
        } else if (width != sample_width_) {
            fail(p(), fmt::format("expected {} numbers, as in the samples before it, found {}", sample_width_, width));
        }
        if (sample_start_ >= width && v[sample_start_] < v[sample_start_ - width])
            fail(p() + "[0]", fmt::format("expected a time >= the sample before it ({}), found {}", v[sample_start_ - width],
                                         v[sample_start_]));
    }

    // The samples' width against the kinds, once the whole file is read.
    void check_memory_samples() const {
        if (sample_width_ == 0) return;
        const std::string where = fmt::format("$.ranks[{}].memory_by_kind", first_sample_rank_);
        if (t_.memory_kinds.empty())
            fail(where, "memory by kind needs the kinds it is divided into: the document has no \"memory_kinds\"");
        if (sample_width_ != 1 + t_.memory_kinds.size())
            fail(where + "[0]", fmt::format("expected {} numbers (a time and an amount of each of the {} memory_kinds), found {}",
                                            1 + t_.memory_kinds.size(), t_.memory_kinds.size(), sample_width_));
    }

    // An event complete: its fields checked in one order, as before a trace was streamed.
    void end_event() {
        const std::size_t n = stack_.size() - 1;  // the event is the value in the slot of frame n - 1
        const auto at = [this, n](std::string_view name) { return [this, n, name] { return field_path(n, name); }; };
        const auto required = [&](Field f, std::string_view name) -> const Scalar& {
            const Scalar& v = field(f);
            if (!v.present()) fail(path(n), fmt::format("missing field \"{}\"", name));
            return v;
        };
        Event e;
        const Scalar& op = required(Field::op, "op");
        if (op.kind != Scalar::Kind::string || op.s.empty()) expected(at("op"), "an operation name", op);
        try {
            e.op = OpCode::of(op.s);
        } catch (const std::length_error&) {  // the process-wide table of names is full
            fail(at("op")(), fmt::format("too many distinct operation names (at most 65535 in one process), found \"{}\"",
                                       json_reader::shorten(op.s)));
        }
        if (const Scalar& layer = field(Field::layer); layer.present() && layer.kind != Scalar::Kind::null) {
            const std::int64_t l = int64(at("layer"), layer);
            if (l < 0 || l > 1'000'000'000) fail(at("layer")(), fmt::format("expected a layer index >= 0, found {}", l));
            e.layer = static_cast<std::int32_t>(l);
        }
        e.start = real(at("start"), required(Field::start, "start"), kTime);
        const Scalar& duration = required(Field::duration, "duration");
        if (!duration.is_number()) expected(at("duration"), "a number", duration);
        e.duration = duration.number();
        if (e.duration < 0) fail(at("duration")(), fmt::format("expected >= 0, found {}", e.duration));
        if (!std::isfinite(e.start + e.duration))
            fail(at("duration")(),
                 fmt::format("the event ends beyond the largest time a trace can hold (start {} + duration {})", e.start,
                             e.duration));
        e.memory = real(at("memory"), required(Field::memory, "memory"), kMemory);
        if (batches_.present()) {
            if (batches_.kind != Scalar::Kind::array) expected(at("batches"), "an array of ids", batches_);
            for (std::size_t b = 0; b < batch_ids_.size(); ++b) {
                const auto p = [&] { return fmt::format("{}[{}]", field_path(n, "batches"), b); };
                const std::int64_t id = int64(p, batch_ids_[b]);
                // (A set of ids holds [id, id + 1): the largest int64 has no successor.)
                if (id < 0 || id == std::numeric_limits<std::int64_t>::max())
                    fail(p(), fmt::format("expected an id from 0 to {}, found {}",
                                          std::numeric_limits<std::int64_t>::max() - 1, id));
                e.batches.insert(id);
            }
        }
        if (const Scalar& stream = field(Field::stream); stream.present())
            e.stream = choice(at("stream"), stream, "compute", "comm") == "comm" ? Stream::comm : Stream::compute;
        if (const Scalar& bytes = field(Field::bytes); bytes.present()) e.bytes = real(at("bytes"), bytes, kAmount);
        if (const Scalar& flops = field(Field::flops); flops.present()) e.flops = real(at("flops"), flops, kAmount);
        t_.ranks.back().events.push_back(std::move(e));
    }

    Trace& t_;
    const std::string& source_;
    std::vector<Frame> stack_;
    Scalar tmp_;  // the value being put
    Field field_ = Field::other;  // the event field the last key of an event names
    std::array<Scalar, kEventScalars> fields_;
    Scalar batches_;
    std::vector<Scalar> batch_ids_;
    std::vector<json*> meta_stack_;  // the meta's containers being filled, outermost first
    Scalar format_, version_, time_unit_, memory_unit_, capacity_;
    bool ranks_seen_ = false, rank_given_ = false, events_given_ = false;
    std::size_t sample_start_ = 0;       // where the sample being read starts in its rank's memory_by_kind
    std::size_t sample_width_ = 0;       // the numbers of every sample so far (0: none yet)
    std::size_t first_sample_rank_ = 0;  // ...and the rank of the first
    std::optional<bool> correct_;
    bool failed_ = false;      // a bad value was met: the rest is parsed, not read
    std::string first_error_;  // ...and what was wrong with it
    const RankHook& hook_;     // called with each rank read (may be empty)
};

}  // namespace

Trace detail::read_trace_sax(std::istream& in, const std::string& source, const RankHook& hook) {
    Trace t;
    TraceReader reader(t, source, hook);
    json_reader::sax_read(in, source, kTraceDialect, reader, json_reader::kMaxTraceBytes);
    reader.finish();
    return t;
}

// The fast reader first where the stream can be read again from where it is; the checking reader
// where it gives up, and on a stream that cannot go back (a pipe).
Trace read_trace_json(std::istream& in, const std::string& source, const RankHook& hook) {
    const std::istream::pos_type start = in.tellg();
    if (start == std::istream::pos_type(-1)) return detail::read_trace_sax(in, source, hook);
    {
        Trace t;
        if (detail::read_trace_fast(in, t, json_reader::kMaxTraceBytes, hook)) return t;
    }
    in.clear();
    if (!in.seekg(start))
        kTraceDialect.raise(source, "$", "cannot read the file: it cannot be read again from its start");
    return detail::read_trace_sax(in, source, hook);
}

Trace read_trace_file(const std::string& path, const RankHook& hook) {
    std::ifstream f = json_reader::open_input(path, path, kTraceDialect, json_reader::kMaxTraceBytes);
    return read_trace_json(f, path, hook);
}

}  // namespace dtsim

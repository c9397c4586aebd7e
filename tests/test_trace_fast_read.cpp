// The trace reader's fast path (sim/trace/fast_reader.hpp) against the checking reader: the
// same trace for every input it reads, and through read_trace_json the same outcome (the trace,
// or the error's message) for every input, read or given up on.
#include "trace/fast_reader.hpp"

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "dtsim/sched/executor.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/lowering.hpp"
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

using namespace dtsim;

namespace {

constexpr std::uint64_t kMax = std::uint64_t{8} << 30;

// The sanitizer build, some ten times slower, reads every second number and half the mutated
// traces below (the fuzz targets read many more under the sanitizers); the release build all.
#if defined(DTSIM_SANITIZE)
constexpr int kStride = 2;
#else
constexpr int kStride = 1;
#endif

std::string to_json(const Trace& t) {
    std::ostringstream os;
    write_trace_json(t, os);
    return os.str();
}

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

// Everything a Trace holds, doubles to the bit (the written form leaves some out: a step trace's bytes).
void check_same(const Trace& a, const Trace& b) {
    CHECK(a.time_unit == b.time_unit);
    CHECK(a.memory_unit == b.memory_unit);
    CHECK(a.meta == b.meta);
    CHECK(a.memory_capacity.has_value() == b.memory_capacity.has_value());
    if (a.memory_capacity && b.memory_capacity) CHECK(same_bits(*a.memory_capacity, *b.memory_capacity));
    CHECK(a.memory_kinds == b.memory_kinds);
    CHECK(same_bits(a.summary.timesteps, b.summary.timesteps));
    CHECK(same_bits(a.summary.makespan, b.summary.makespan));
    CHECK(same_bits(a.summary.max_memory, b.summary.max_memory));
    CHECK(a.summary.max_memory_rank == b.summary.max_memory_rank);
    CHECK(same_bits(a.summary.max_memory_time, b.summary.max_memory_time));
    CHECK(a.summary.correct == b.summary.correct);
    REQUIRE(a.ranks.size() == b.ranks.size());
    for (std::size_t r = 0; r < a.ranks.size(); ++r) {
        const RankTrace &x = a.ranks[r], &y = b.ranks[r];
        CHECK(x.rank == y.rank);
        REQUIRE(x.memory_by_kind.size() == y.memory_by_kind.size());
        for (std::size_t i = 0; i < x.memory_by_kind.size(); ++i) CHECK(same_bits(x.memory_by_kind[i], y.memory_by_kind[i]));
        REQUIRE(x.events.size() == y.events.size());
        std::size_t differ = 0;
        for (std::size_t i = 0; i < x.events.size(); ++i) {
            const Event &e = x.events[i], &f = y.events[i];
            differ += !(e.op == f.op && e.stream == f.stream && e.layer == f.layer && same_bits(e.start, f.start) &&
                        same_bits(e.duration, f.duration) && same_bits(e.memory, f.memory) && e.batches == f.batches &&
                        same_bits(e.bytes, f.bytes) && same_bits(e.flops, f.flops));
        }
        CHECK(differ == 0);
    }
}

Trace sax(const std::string& text) {
    std::istringstream in(text);
    return detail::read_trace_sax(in, "t.json");
}

// The fast path reads `text` (and says so), to the checking reader's trace.
void check_fast(const std::string& text) {
    const Trace want = sax(text);
    std::istringstream in(text);
    Trace got;
    REQUIRE(detail::read_trace_fast(in, got, kMax));
    check_same(got, want);
    CHECK(to_json(got) == to_json(want));
    CHECK(to_json(got) == text);  // dtsim's own traces read back to their bytes
}

// What reading gives: the trace written back, or the error's message.
template <class Read>
std::string outcome(const std::string& text, Read read) {
    std::istringstream in(text);
    try {
        return "trace " + to_json(read(in));
    } catch (const TraceFormatError& e) {
        return std::string("error ") + e.what();
    }
}
std::string public_outcome(const std::string& text) {
    return outcome(text, [](std::istream& in) { return read_trace_json(in, "t.json"); });
}
std::string sax_outcome(const std::string& text) {
    return outcome(text, [](std::istream& in) { return detail::read_trace_sax(in, "t.json"); });
}

std::string file_text(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

Trace hw_trace(const std::string& run) {
    const hw::Config c = hw::load_config(std::string(DTSIM_CONFIGS) + "/runs/" + run, {{"model.layers", "8"}});
    return hw::simulate(c, {.keep_trace = true}).trace;
}

// A trace of each kind of field: meta with escapes and text beyond ASCII, unknown fields, units,
// capacity, memory by kind, a summary's correctness, numbers of each kind.
const std::string kHandMade = R"({"format": "dtsim-trace", "version": 1, "time_unit": "s", "memory_unit": "byte",
"meta": {"file": "sch\u00e9d\"\\ule.txt", "n": [1, -2, 3.5e-3, 18446744073709551615, true, null], "é": {}},
"memory_capacity": 8.5e10, "memory_kinds": ["weights", "activations"], "x": [{"y": [1e5, -0.0, "z"]}],
"summary": {"timesteps": 4, "correct": true},
"ranks": [{"rank": 0, "extra": {"a": [[], {}]}, "events": [
  {"op": "forward", "layer": 3, "start": 0, "duration": 1.25, "memory": 100, "batches": [2, 0, 1, 7], "stream": "compute", "bytes": 1e9, "flops": 2.5e12, "note": "n"},
  {"flops": 0, "stream": "comm", "memory": 9007199254740993, "duration": 0.5, "start": 1.25, "layer": null, "op": "send"},
  {"op": "x", "start": 1E2, "duration": 0, "memory": 0.0, "batches": []}],
 "memory_by_kind": [[0, 10, 0], [0.5, 10, 4.25], [0.5, 10, 0]]},
 {"events": [], "rank": 1, "memory_by_kind": []}]}
)";

}  // namespace

TEST_CASE("the fast path reads every puzzle's, schedule's and hardware run's trace as the checking reader does") {
    for (const auto& p : puzzle::puzzles()) {
        INFO(p.name);
        check_fast(to_json(
            puzzle::run_strategy(p.strategy, p.layers, p.batches, p.ranks, puzzle::puzzle_costs(), {{"puzzle", p.name}})
                .trace));
    }
    sched::Costs c;
    c.p2p = 0.5;
    for (const sched::Schedule& s : {sched::gpipe(4, 8), sched::one_f_one_b(4, 8), sched::interleaved_1f1b(4, 8, 2),
                                     sched::zb_h1(4, 8), sched::looped_bfs(4, 8, 2), sched::dualpipev(4, 8)})
        check_fast(to_json(sched::run_schedule(sched::lower(s), c).trace));
    for (const char* run : {"llama3-8b-16xh100-ddp.json", "llama3-8b-16xh100-fsdp.json", "llama3-8b-16xh100-zero2.json",
                            "llama3-8b-8xh100-megatron.json", "llama3-70b-64xh100-zbh1.json",
                            "llama3-70b-64xh100-1f1b-fsdp.json"}) {
        INFO(run);
        const Trace t = hw_trace(run);
        REQUIRE_FALSE(t.memory_kinds.empty());
        check_fast(to_json(t));
    }
    for (const char* golden : {"1f1b-pp4-trace.json", "failures-2x2-trace.json"}) {
        INFO(golden);
        const auto path = std::filesystem::path(DTSIM_RENDER_GOLDEN) / golden;
        check_fast(file_text(path));
        std::ifstream f(path, std::ios::binary);
        Trace t;
        CHECK(detail::read_trace_fast(f, t, kMax));
        check_same(read_trace_file(path.string()), t);
    }
    // Not traces (the reference's logs): given up on, and refused as the checking reader refuses them.
    for (const auto& entry : std::filesystem::directory_iterator(std::string(DTSIM_TEST_DATA) + "/golden")) {
        INFO(entry.path());
        const std::string text = file_text(entry.path());
        std::istringstream in(text);
        Trace t;
        CHECK_FALSE(detail::read_trace_fast(in, t, kMax));
        CHECK(public_outcome(text) == sax_outcome(text));
    }
}

TEST_CASE("the fast path reads meta, unknown fields, memory by kind and the summary's correctness as the checking reader") {
    std::istringstream in(kHandMade);
    Trace got;
    REQUIRE(detail::read_trace_fast(in, got, kMax));
    const Trace want = sax(kHandMade);
    check_same(got, want);
    CHECK(got.meta["file"] == "sch\u00e9d\"\\ule.txt");
    CHECK(got.summary.correct == true);
    CHECK(got.ranks.at(0).events.at(1).memory == 9007199254740992.0);  // nlohmann's rounding: an integer, cast
    CHECK(got.memory_capacity == 8.5e10);
}

TEST_CASE("the fast path gives up where the checking reader must decide, and reading gives its outcome") {
    const std::string head = R"({"format": "dtsim-trace", "version": 1, "ranks": [{"rank": 0, "events": [{"op": "f", )";
    const auto event = [&](const std::string& fields) { return head + fields + "}]}]}"; };
    for (const std::string& text :
         {event(R"("start": 0, "duration": 1, "memory": 0, "memory": 2)"),        // a key given twice
          event(R"("start": 0, "duration": 1, "memory": 18446744073709551616)"),  // an integer beyond 64 bits
          event(R"("start": 0, "duration": 1, "memory": 1e400)"),                 // beyond the largest
          event(R"("start": 0, "duration": 1, "memory": -1)"),                    // a bad value
          event(R"("start": 0, "duration": 1, "memory": 0, "x": "\u0041")"),      // an escape
          event(R"("start": 0, "duration": 1, "memory": 0, "x": "é")"),           // beyond ASCII
          event(R"("start": 0, "duration": 1, "memory": 0, "layer": 1.0)"),
          event(R"("start": 0, "duration": 1, "memory": 0}, {)"),  // a syntax error
          "\xef\xbb\xbf" + event(R"("start": 0, "duration": 1, "memory": 0)"),  // a byte order mark
          event(R"("start": 0, "duration": 1, "memory": 0)") + std::string(1, '\0') + "x",
          event(R"("start": 0, "duration": 1, "memory": 0, "x": )") + std::string(100, '[') + std::string(100, ']')}) {
        INFO(text);
        std::istringstream in(text);
        Trace t;
        CHECK_FALSE(detail::read_trace_fast(in, t, kMax));
        CHECK(public_outcome(text) == sax_outcome(text));
    }
    // Below the smallest double: strtod's 0, where the fast path reads it at all.
    const std::string tiny = event(R"("start": 0, "duration": 1, "memory": 1e-400, "bytes": 4.9e-324)");
    CHECK(public_outcome(tiny) == sax_outcome(tiny));
    // Tokens across the fast path's blocks: a trace larger than its buffer, whitespace runs included.
    std::string big = head + R"("start": 0, "duration": 1, "memory": 0})";
    for (int i = 0; big.size() < (3u << 20); ++i)
        big += ",\n" + std::string(static_cast<std::size_t>(i % 97), ' ') + R"({"op": "o)" + std::to_string(i % 13) +
               R"(", "start": )" + std::to_string(i) + R"(.125, "duration": 0.5, "memory": )" + std::to_string(i * 7) + "}";
    big += "]}], \"meta\": {\"s\": \"" + std::string(40000, 'm') + "\"}}";
    std::istringstream in(big);
    Trace t;
    CHECK(detail::read_trace_fast(in, t, kMax));
    check_same(t, sax(big));
    CHECK(t.event_count() > 20000);
}

// The fast path takes digits eight at a time where it can: runs of every length around 8 and 16,
// leading zeros in the integer and the fraction, 19 and more significant digits, exponents.
TEST_CASE("numbers of every digit run read to the checking reader's values") {
    const std::string head = R"({"format": "dtsim-trace", "version": 1, "ranks": [{"rank": 0, "events": [)";
    std::vector<std::string> numbers;
    const std::string digits = "9876543210123456789098765432101234567890";
    for (int whole = 0; whole <= 26; ++whole)
        for (int zeros : {0, 1, 7, 8, 9, 17}) {
            const std::string integer = whole == 0 ? "0" : digits.substr(0, static_cast<std::size_t>(whole));
            numbers.push_back(integer);
            for (int fraction : {1, 7, 8, 9, 15, 16, 17, 24})
                for (const char* exponent : {"", "e5", "E-12", "e+300"})
                    numbers.push_back(integer + "." + std::string(static_cast<std::size_t>(zeros), '0') +
                                      digits.substr(3, static_cast<std::size_t>(fraction)) + exponent);
        }
    for (const char* n : {"100000000", "10000000000000000", "0.00000000", "0.000000000000000000", "9007199254740993",
                          "18446744073709551615", "18446744073709551616", "99999999.99999999", "1.7976931348623157e308",
                          "4.9406564584124654e-324", "0.000287144000000072450"})
        numbers.emplace_back(n);
    // Given up on only where the checking reader must decide: an integer beyond 64 bits, or a
    // number beyond the largest double.
    const auto beyond = [](const std::string& n) {
        if (n.find_first_of(".eE") == std::string::npos)
            return n.size() > 20 || (n.size() == 20 && n > "18446744073709551615");
        return std::isinf(std::strtod(n.c_str(), nullptr));
    };
    for (std::size_t i = 0; i < numbers.size(); i += kStride) {
        const std::string& n = numbers[i];
        const std::string text =
            head + R"({"op": "f", "start": )" + n + R"(, "duration": 1, "memory": 0, "bytes": )" + n + "}]}]}";
        INFO(text);
        std::istringstream in(text);
        Trace t;
        const bool fast = detail::read_trace_fast(in, t, kMax);
        CHECK(fast == !beyond(n));
        if (fast) check_same(t, sax(text));
        CHECK(public_outcome(text) == sax_outcome(text));
    }
}

TEST_CASE("a token longer than the fast path's window, across its blocks, is given up on, and read as the checking reader reads it") {
    // An operation name, a number and a run of spaces of 70,000 characters each, after 1 MiB of events:
    // each lies across the first block's end, longer than the 64 KiB every other token fits in.
    const std::string head = R"({"format": "dtsim-trace", "version": 1, "ranks": [{"rank": 0, "events": [)";
    std::string events;
    for (int i = 0; events.size() < (1u << 20) - 40000; ++i)
        events += R"({"op": "o", "start": )" + std::to_string(i) + R"(, "duration": 1, "memory": 0}, )";
    const std::string tail = "]}]}";
    for (const std::string& text :
         {head + events + R"({"op": ")" + std::string(70000, 'n') + R"(", "start": 0, "duration": 1, "memory": 0})" + tail,
          head + events + R"({"op": "o", "start": 0, "duration": 1, "memory": 0.)" + std::string(70000, '0') + "1}" + tail,
          head + events + R"({"op": "o", "start": 0, "duration": 1, "memory": 1)" + std::string(70000, '0') + "}" + tail,
          head + events + R"({"op": "o", "start": 0, "duration":)" + std::string(70000, ' ') + "1, \"memory\": 0}" + tail}) {
        CAPTURE(text.size());
        const std::string want = sax_outcome(text);
        CHECK(public_outcome(text) == want);
        std::istringstream in(text);
        Trace t;
        if (detail::read_trace_fast(in, t, kMax)) CHECK("trace " + to_json(t) == want);  // read whole, or given up
    }
}

namespace {

// Deterministic mutations of a trace's text: bytes flipped, deleted, inserted; keys given twice;
// an event's fields reordered; numbers replaced by unusual ones; the text cut short.
std::string mutate(std::string s, std::mt19937_64& rng) {
    const auto at = [&](std::size_t n) { return static_cast<std::size_t>(rng() % (n ? n : 1)); };
    static const std::vector<std::string> inserts = {"-", "e", "E", "\"", "\\", "}", "]", "{", "[", ",", ":", ".", "0",
                                                     " ", "\n", "+", "1", "n", "\xc3\xa9", "\xff", std::string(1, '\0'),
                                                     "\\u0041", "null", "true", "\t"};
    static const std::vector<std::string> members = {
        R"("op": "y", )",     R"("start": 1, )",        R"("rank": 0, )",    R"("memory_kinds": ["a"], )",
        R"("format": "dtsim-trace", )", R"("meta": {"k": 1}, )", R"("summary": {"correct": false}, )",
        R"("batches": [1], )", R"("correct": true, )", R"("memory_by_kind": [], )", R"("events": [], )",
        R"("layer": null, )", R"("version": 1, )", R"("duration": 2, )", R"("memory": 3, )", R"("stream": "comm", )",
        R"("time_unit": "s", )", R"("memory_capacity": 5, )", R"("x": [1, {"y": "\u00e9"}], )"};
    static const std::vector<std::string> numbers = {"1e999", "-0", "-0.0", "1.0", "18446744073709551616",
                                                     "-9223372036854775809", "5e-400", "01", "1.", ".5", "1e",
                                                     "9223372036854775808", "-1", "4.9e-324", "1e308", "0x10", "2E+3"};
    switch (rng() % 8) {
        case 0: s[at(s.size())] ^= static_cast<char>(1u << (rng() % 8)); break;
        case 1: s.erase(at(s.size()), 1 + at(4)); break;
        case 2: s.insert(at(s.size() + 1), inserts[at(inserts.size())]); break;
        case 3: {  // a member where one starts
            std::vector<std::size_t> starts;
            for (std::size_t i = 0; i + 1 < s.size(); ++i)
                if ((s[i] == '{' || s[i] == ' ') && s[i + 1] == '"') starts.push_back(i + 1);
            if (!starts.empty()) s.insert(starts[at(starts.size())], members[at(members.size())]);
            break;
        }
        case 4: {  // an event's (or any flat object's) members in another order
            std::vector<std::size_t> opens;
            for (std::size_t i = 0; i < s.size(); ++i)
                if (s[i] == '{') opens.push_back(i);
            if (opens.empty()) break;
            const std::size_t open = opens[at(opens.size())], close = s.find('}', open);
            if (close == std::string::npos || s.find('{', open + 1) < close) break;
            std::vector<std::string> parts;
            std::string body = s.substr(open + 1, close - open - 1);
            for (std::size_t from = 0;;) {
                const std::size_t comma = body.find(", \"", from);
                parts.push_back(body.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
                if (comma == std::string::npos) break;
                from = comma + 2;
            }
            std::shuffle(parts.begin(), parts.end(), rng);
            std::string joined;
            for (std::size_t i = 0; i < parts.size(); ++i) joined += (i ? ", " : "") + parts[i];
            s.replace(open + 1, close - open - 1, joined);
            break;
        }
        case 5: {  // a number replaced
            std::vector<std::size_t> digits;
            for (std::size_t i = 1; i < s.size(); ++i)
                if (s[i] >= '0' && s[i] <= '9' && (s[i - 1] == ' ' || s[i - 1] == '[')) digits.push_back(i);
            if (digits.empty()) break;
            const std::size_t from = digits[at(digits.size())];
            std::size_t to = from;
            while (to < s.size() && (std::isdigit(static_cast<unsigned char>(s[to])) || s[to] == '.' || s[to] == 'e' ||
                                     s[to] == '-' || s[to] == '+'))
                ++to;
            s.replace(from, to - from, numbers[at(numbers.size())]);
            break;
        }
        case 6: s.resize(at(s.size())); break;
        case 7: {  // a string's text changed
            const std::size_t q = s.find('"', at(s.size()));
            if (q != std::string::npos) s.insert(q + 1, inserts[at(inserts.size())]);
            break;
        }
    }
    return s;
}

}  // namespace

TEST_CASE("mutated traces read to the checking reader's outcome, trace or message") {
    std::vector<std::string> seeds;
    const puzzle::PuzzleInfo& p = *puzzle::find_puzzle("ddp");
    seeds.push_back(to_json(puzzle::run_strategy(p.strategy, 2, 2, 2, puzzle::puzzle_costs(), {{"puzzle", "ddp"}}).trace));
    sched::Costs c;
    c.p2p = 0.5;
    seeds.push_back(to_json(sched::run_schedule(sched::lower(sched::one_f_one_b(2, 2)), c).trace));
    seeds.push_back(kHandMade);
    {
        // A hardware run's trace with memory by kind, cut to a few events and samples per rank.
        Trace t = hw_trace("llama3-8b-16xh100-ddp.json");
        t.ranks.resize(2);
        const std::size_t stride = 1 + t.memory_kinds.size();
        for (auto& r : t.ranks) {
            r.events.resize(std::min<std::size_t>(r.events.size(), 4));
            r.memory_by_kind.resize(std::min(r.memory_by_kind.size(), 3 * stride));
        }
        t.meta = {{"run", "ddp"}};
        summarize(t);
        seeds.push_back(to_json(t));
    }
    std::mt19937_64 rng(20261126);
    int taken = 0, given_up = 0, traces = 0;
    const int mutations = 1000 / kStride;  // of each seed
    for (const std::string& seed : seeds) {
        for (int i = 0; i < mutations; ++i) {
            std::string text = seed;
            for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) text = mutate(std::move(text), rng);
            const std::string want = sax_outcome(text);
            const std::string got = public_outcome(text);
            if (got != want) {
                CAPTURE(text);
                CHECK(got == want);
            }
            std::istringstream in(text);
            Trace t;
            (detail::read_trace_fast(in, t, kMax) ? taken : given_up) += 1;
            traces += want.rfind("trace ", 0) == 0;
        }
    }
    MESSAGE("fast path: " << taken << " read, " << given_up << " given up; " << traces << " traces");
    CHECK(taken > mutations / 5);
    CHECK(given_up > mutations / 5);
}

namespace {

// A stream that cannot seek (as a pipe): tellg fails.
class OneWay : public std::streambuf {
public:
    explicit OneWay(std::string text) : text_(std::move(text)) { setg(text_.data(), text_.data(), text_.data() + text_.size()); }

private:
    std::string text_;
};

}  // namespace

TEST_CASE("a stream that cannot seek is read by the checking reader alone; a seekable one from where it is") {
    const std::string text = kHandMade;
    OneWay buf(text);
    std::istream in(&buf);
    REQUIRE(in.tellg() == std::istream::pos_type(-1));
    in.clear();
    check_same(read_trace_json(in, "pipe"), sax(text));
    const std::string bad = text.substr(0, text.size() / 2);
    OneWay bad_buf(bad);
    std::istream bad_in(&bad_buf);
    CHECK(outcome(bad, [&](std::istream&) { return read_trace_json(bad_in, "t.json"); }) == sax_outcome(bad));
    // From the stream's position, read again from there when the fast path gives up.
    std::istringstream after("junk" + text);
    after.seekg(4);
    check_same(read_trace_json(after, "x"), sax(text));
    std::string escaped = text;  // an escape, which the fast path leaves to the checking reader
    const std::size_t op = escaped.find(R"("op": "x")");
    REQUIRE(op != std::string::npos);
    escaped.replace(op, 9, R"("op": "\u0078")");
    std::istringstream given_up(escaped);
    Trace t;
    CHECK_FALSE(detail::read_trace_fast(given_up, t, kMax));
    std::istringstream after_escape("junk" + escaped);
    after_escape.seekg(4);
    const Trace back = read_trace_json(after_escape, "x");
    check_same(back, sax(escaped));
    check_same(back, sax(text));
}

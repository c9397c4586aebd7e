#include "dtsim/puzzle/registry.hpp"
#include "dtsim/sched/executor.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/lowering.hpp"
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>

#include <sstream>

using namespace dtsim;

namespace {

std::string to_json(const Trace& t) {
    std::ostringstream os;
    write_trace_json(t, os);
    return os.str();
}

std::string read_error(const std::string& text) {
    std::istringstream in(text);
    try {
        read_trace_json(in, "t.json");
    } catch (const TraceFormatError& e) {
        return e.what();
    }
    return "no error";
}

const char* kHead = R"({"format": "dtsim-trace", "version": 1, "ranks": [)";

}  // namespace

TEST_CASE("a written trace reads back to the same bytes") {
    for (const auto& p : puzzle::puzzles()) {
        INFO(p.name);
        auto run = puzzle::run_strategy(p.strategy, p.layers, p.batches, p.ranks, puzzle::puzzle_costs(),
                                        {{"puzzle", p.name}});
        const std::string a = to_json(run.trace);
        std::istringstream in(a);
        Trace back = read_trace_json(in, "mem");
        CHECK(to_json(back) == a);
        CHECK(back.summary.correct == true);
        CHECK(back.meta["puzzle"] == p.name);
    }
}

TEST_CASE("a step trace keeps its comm-stream events on the comm stream when read back") {
    // A lowered pipeline schedule with a cost per tensor crossing ranks records its sends and
    // receives on the comm stream.
    sched::Costs c;
    c.p2p = 0.5;
    const Trace t = sched::run_schedule(sched::lower(sched::one_f_one_b(2, 2)), c).trace;
    std::size_t comm = 0;
    for (const auto& r : t.ranks)
        for (const auto& e : r.events) comm += e.stream == Stream::comm;
    REQUIRE(comm > 0);
    const std::string a = to_json(t);
    std::istringstream in(a);
    const Trace back = read_trace_json(in, "mem");
    std::size_t comm_back = 0;
    for (const auto& r : back.ranks)
        for (const auto& e : r.events) comm_back += e.stream == Stream::comm;
    CHECK(comm_back == comm);
    CHECK(to_json(back) == a);
}

TEST_CASE("the trace JSON has the documented fields and shortest-form numbers") {
    auto run = puzzle::run_strategy(&puzzle::wsdp, 6, 4, 4);
    const auto j = nlohmann::json::parse(to_json(run.trace));
    CHECK(j["format"] == "dtsim-trace");
    CHECK(j["version"] == 1);
    CHECK(j["time_unit"] == "step");
    CHECK(j["memory_unit"] == "unit");
    CHECK(j["summary"]["timesteps"].get<double>() == 19.90000000000001);
    CHECK(j["summary"]["max_memory_time"].get<double>() == 14.600000000000003);
    CHECK(j["summary"]["correct"] == true);
    const auto& e0 = j["ranks"][0]["events"][0];
    CHECK(e0["op"] == "allgather");
    CHECK(e0["layer"] == 0);
    CHECK_FALSE(e0.contains("batches"));
    CHECK(j["ranks"][0]["events"][1]["batches"] == nlohmann::json::array({0}));
    CHECK(j["ranks"][0]["events"].back()["layer"].is_null());
}

TEST_CASE("malformed traces are rejected with the file and JSON path") {
    CHECK(read_error("{") == "t.json: at $: invalid JSON at line 1, column 2");
    CHECK(read_error("[]") == "t.json: at $: expected an object, found an array");
    CHECK(read_error(R"({"format": "x", "version": 1, "ranks": []})") ==
          "t.json: at $.format: expected \"dtsim-trace\", found \"x\"");
    CHECK(read_error(R"({"format": "dtsim-trace", "version": 2, "ranks": []})") ==
          "t.json: at $.version: expected 1, found 2");
    CHECK(read_error(R"({"format": "dtsim-trace", "version": 1})") == "t.json: at $: missing field \"ranks\"");
    CHECK(read_error(std::string(kHead) + R"({"rank": 1, "events": []}]})") ==
          "t.json: at $.ranks[0].rank: ranks must be listed in order: expected 0, found 1");
    CHECK(read_error(std::string(kHead) + R"({"rank": 0, "events": [{"op": "forward", "start": 0}]}]})") ==
          "t.json: at $.ranks[0].events[0]: missing field \"duration\"");
    CHECK(read_error(std::string(kHead) +
                     R"({"rank": 0, "events": [{"op": "forward", "start": "x", "duration": 1, "memory": 0}]}]})") ==
          "t.json: at $.ranks[0].events[0].start: expected a number >= 0, found \"x\" (a string)");
    CHECK(read_error(std::string(kHead) +
                     R"({"rank": 0, "events": [{"op": "f", "start": 0, "duration": -1, "memory": 0}]}]})") ==
          "t.json: at $.ranks[0].events[0].duration: expected >= 0, found -1");
    CHECK(read_error(std::string(kHead) +
                     R"({"rank": 0, "events": [{"op": "f", "start": 0, "duration": 1, "memory": 0, "batches": [-1]}]}]})") ==
          "t.json: at $.ranks[0].events[0].batches[0]: expected an id from 0 to 9223372036854775806, found -1");
    // The largest int64 has no successor for the half-open ranges ids are kept in.
    CHECK(read_error(std::string(kHead) + R"({"rank": 0, "events": [{"op": "f", "start": 0, "duration": 1, "memory": 0, )"
                                          R"("batches": [9223372036854775807]}]}]})") ==
          "t.json: at $.ranks[0].events[0].batches[0]: expected an id from 0 to 9223372036854775806, found "
          "9223372036854775807");
    CHECK(read_error(std::string(kHead) +
                     R"({"rank": 0, "events": [{"op": "f", "start": 0, "duration": 1, "memory": 0, "stream": "x"}]}]})") ==
          "t.json: at $.ranks[0].events[0].stream: expected \"compute\" or \"comm\", found \"x\"");
    CHECK(read_error(std::string(kHead) + R"({"rank": 0, "events": [{"op": "", "start": 0, "duration": 1, "memory": 0}]}]})") ==
          "t.json: at $.ranks[0].events[0].op: expected an operation name, found \"\" (a string)");
    CHECK(read_error(std::string(kHead) + R"({"rank": 0, "events": [{"op": "f", "start": 0, "duration": 1, "memory": 0,
                                                                   "batches": 3}]}]})") ==
          "t.json: at $.ranks[0].events[0].batches: expected an array of ids, found 3");
    CHECK(read_error(std::string(kHead) + R"(7]})") == "t.json: at $.ranks[0]: expected an object, found 7");
    CHECK(read_error(R"({"format": "dtsim-trace", "version": 1, "time_unit": "ms", "ranks": []})") ==
          "t.json: at $.time_unit: expected \"step\" or \"s\", found \"ms\" (did you mean \"s\"?)");
}

TEST_CASE("fields a trace does not know are ignored: the format may add fields") {
    Trace t = [] {
        std::istringstream in(std::string(kHead) + R"({"rank": 0, "group": 1, "events": [{"op": "f", "start": 0,
                                                     "duration": 1, "memory": 0, "group": "dp"}]}], "extra": 1})");
        return read_trace_json(in, "x");
    }();
    REQUIRE(t.ranks.size() == 1);
    CHECK(t.ranks[0].events.size() == 1);
}

TEST_CASE("numbers beyond a double, an int or 64 bits are rejected at their place, not crashed on") {
    // A number too large for a double (nlohmann reports it as out_of_range, not a parse error).
    CHECK(read_error(R"({"format": 6666666666666666666666666666666e66666666666666})") ==
          "t.json: at $: invalid JSON: the number 6666666666666666666666666666666e66666666666666 is out of range");
    // A rank that only matches after truncation to int.
    CHECK(read_error(std::string(kHead) + R"({"rank": 4294967296, "events": []}]})") ==
          "t.json: at $.ranks[0].rank: ranks must be listed in order: expected 0, found 4294967296");
    CHECK(read_error(std::string(kHead) + R"({"rank": 18446744073709551615, "events": []}]})") ==
          "t.json: at $.ranks[0].rank: expected an integer, found 18446744073709551615");
}

TEST_CASE("the summary is recomputed from the events on reading") {
    std::istringstream in(std::string(kHead) +
                          R"({"rank": 0, "events": [{"op": "a", "start": 0, "duration": 2, "memory": 5},
                                                    {"op": "b", "start": 2, "duration": 1, "memory": 7}]},
                             {"rank": 1, "events": [{"op": "c", "start": 1, "duration": 4, "memory": 7}]}]})");
    Trace t = read_trace_json(in, "x");
    CHECK(t.summary.timesteps == 2);
    CHECK(t.summary.makespan == 5);
    CHECK(t.summary.max_memory == 7);
    CHECK(t.summary.max_memory_rank == 0);
    CHECK(t.summary.max_memory_time == 2);
    CHECK_FALSE(t.summary.correct.has_value());
}

// A 149-byte trace with start 1e308 and duration 1e308 made render grow to 4.2 GB and its
// Chrome export write "ts": null; a negative start rendered as "at step -5".
TEST_CASE("an event's start is finite and >= 0, its end finite, its amounts >= 0") {
    const auto event = [](const std::string& fields) {
        return read_error(std::string(kHead) + R"({"rank": 0, "events": [{"op": "f", )" + fields + "}]}]}");
    };
    CHECK(event(R"("start": 1e308, "duration": 1e308, "memory": 0)") ==
          "t.json: at $.ranks[0].events[0].duration: the event ends beyond the largest time a trace can hold (start "
          "1e+308 + duration 1e+308)");
    CHECK(event(R"("start": -5, "duration": 1, "memory": 0)") ==
          "t.json: at $.ranks[0].events[0].start: expected a number >= 0, found -5");
    CHECK(event(R"("start": 0, "duration": 1, "memory": -1)") ==
          "t.json: at $.ranks[0].events[0].memory: expected a number >= 0, found -1");
    CHECK(event(R"("start": 0, "duration": 1, "memory": 0, "bytes": -1)") ==
          "t.json: at $.ranks[0].events[0].bytes: expected a number >= 0, found -1");
    CHECK(event(R"("start": 0, "duration": 1, "memory": 0, "flops": -1)") ==
          "t.json: at $.ranks[0].events[0].flops: expected a number >= 0, found -1");
    CHECK(read_error(R"({"format": "dtsim-trace", "version": 1, "memory_capacity": -1, "ranks": []})") ==
          "t.json: at $.memory_capacity: expected a number >= 0, found -1");
    // Large but finite times are times.
    CHECK(event(R"("start": 1e300, "duration": 1e300, "memory": 0)") == "no error");
}

// A file name in the meta that is not UTF-8 (a schedule's file) threw nlohmann's type_error.316.
TEST_CASE("a meta string that is not UTF-8 is written with U+FFFD in its place") {
    Trace t;
    t.meta = {{"file", "sched\xff.txt"}};
    std::string out;
    CHECK_NOTHROW(out = to_json(t));
    CHECK(out.find("\"sched\xef\xbf\xbd.txt\"") != std::string::npos);
}

TEST_CASE("a trace that cannot be written says why, naming the file") {
    const std::string name = "/tmp/" + std::string(300, 'a') + ".json";
    try {
        write_trace_file(Trace{}, name);
        FAIL("no error");
    } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()) == name + ": cannot open for writing: File name too long");
    }
}

// The reader streams (it checks each value as it is parsed, keeping no document of the file): what
// it reads must not depend on the order of an object's keys, on fields it skips, or on where in the
// file nested values sit.
TEST_CASE("a streamed trace reads the same whatever the order of its keys and fields it does not know") {
    const std::string ordered = std::string(R"({"format": "dtsim-trace", "version": 1, "time_unit": "s",
        "memory_unit": "byte", "meta": {"a": [1, {"b": null}], "c": "x"}, "memory_capacity": 80,
        "summary": {"correct": false}, "ranks": [{"rank": 0, "events": [
        {"op": "forward", "layer": 3, "start": 1.5, "duration": 2, "memory": 7, "batches": [2, 0],
         "stream": "comm", "bytes": 10, "flops": 20}]}]})");
    const std::string shuffled = std::string(R"({"ranks": [{"events": [
        {"flops": 20, "extra": {"deep": [[1], {"x": []}]}, "bytes": 10, "stream": "comm", "batches": [2, 0],
         "memory": 7, "duration": 2, "start": 1.5, "layer": 3, "op": "forward"}], "x": [1], "rank": 0}],
        "summary": {"timesteps": 99, "correct": false}, "memory_capacity": 80, "meta": {"c": "x", "a": [1, {"b": null}]},
        "memory_unit": "byte", "time_unit": "s", "version": 1, "format": "dtsim-trace"})");
    std::istringstream a(ordered), b(shuffled);
    const Trace ta = read_trace_json(a, "a"), tb = read_trace_json(b, "b");
    CHECK(to_json(ta) == to_json(tb));
    const Event& e = tb.ranks.at(0).events.at(0);
    CHECK(e.op.name() == "forward");
    CHECK(e.layer == 3);
    CHECK(e.start == 1.5);
    CHECK(e.duration == 2);
    CHECK(e.memory == 7);
    CHECK(e.batches.size() == 2);
    CHECK(e.stream == Stream::comm);
    CHECK(e.bytes == 10);
    CHECK(e.flops == 20);
    CHECK(tb.time_unit == "s");
    CHECK(tb.memory_unit == "byte");
    CHECK(tb.memory_capacity == 80);
    CHECK(tb.summary.correct == false);
    CHECK(tb.summary.makespan == 3.5);  // recomputed, not the file's
    CHECK(tb.meta == nlohmann::json::parse(R"({"a": [1, {"b": null}], "c": "x"})"));
}

TEST_CASE("a streamed trace: a key given twice counts once, its last value; checks keep their order") {
    std::istringstream in(std::string(kHead) + R"({"rank": 0, "events": [{"op": "a", "start": 0, "duration": 1,
        "memory": 0}], "events": [{"op": "b", "start": 0, "duration": 1, "memory": 0, "memory": 3}]}]})");
    const Trace t = read_trace_json(in, "x");
    REQUIRE(t.ranks.at(0).events.size() == 1);
    CHECK(t.ranks[0].events[0].op.name() == "b");
    CHECK(t.ranks[0].events[0].memory == 3);
    // An event's fields are checked once it is complete, op first, whatever their order in the file.
    CHECK(read_error(std::string(kHead) + R"({"rank": 0, "events": [{"start": -1, "duration": 1, "memory": 0}]}]})") ==
          "t.json: at $.ranks[0].events[0]: missing field \"op\"");
    // A field missing at the top is found at its end, after the ranks.
    CHECK(read_error(R"({"version": 1, "ranks": []})") == "t.json: at $: missing field \"format\"");
    CHECK(read_error(std::string(kHead) + R"({"events": []}]})") == "t.json: at $.ranks[0]: missing field \"rank\"");
    CHECK(read_error(std::string(kHead) + R"({"rank": 0}]})") == "t.json: at $.ranks[0]: missing field \"events\"");
    CHECK(read_error(R"({"format": "dtsim-trace", "version": 1, "ranks": {}})") ==
          "t.json: at $.ranks: expected an array, found an object");
    CHECK(read_error(std::string(kHead) + R"({"rank": 0, "events": [{"op": "f", "start": [1], "duration": 1, "memory": 0}]}]})") ==
          "t.json: at $.ranks[0].events[0].start: expected a number >= 0, found an array");
    CHECK(read_error(std::string(kHead) + R"({"rank": 0, "events": [{"op": "f", "start": 0, "duration": 1, "memory": 0,
        "batches": [1, 2.5]}]}]})") == "t.json: at $.ranks[0].events[0].batches[1]: expected an integer, found 2.5");
    // A syntax error is reported before a bad value met earlier, as when the whole document was
    // parsed before anything was checked.
    CHECK(read_error(std::string(kHead) + R"({"rank": 0, "events": [{"op": "f", "start": -1, "duration": 1, "memory": 0}]},
        {"rank": 1, "events": [}]})") == "t.json: at $: invalid JSON at line 2, column 32");
    // A field it skips is still nested at most 256 deep, named at its path.
    CHECK(read_error(std::string(kHead) + R"({"rank": 0, "events": [{"x": )" + std::string(300, '[') +
                     std::string(300, ']') + "}]}]}") ==
          "t.json: at $.ranks[0].events[0].x[0][0][0]...: arrays and objects nested more than 256 deep (dtsim reads at "
          "most 256 levels)");
}

TEST_CASE("memory by kind reads back to the same bytes, its kinds before or after the ranks") {
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.memory_kinds = {"weights", "activations"};
    t.ranks.resize(2);
    t.ranks[0].rank = 0;
    Event e;
    e.op = ops::forward;
    e.duration = 1;
    e.memory = 10;
    t.ranks[0].events.push_back(e);
    t.ranks[0].memory_by_kind = {0, 10, 0, 0.5, 10, 4.25, 1, 10, 0};
    t.ranks[1].rank = 1;  // no samples: none written
    summarize(t);
    const std::string a = to_json(t);
    const auto j = nlohmann::json::parse(a);
    CHECK(j["memory_kinds"] == nlohmann::json::array({"weights", "activations"}));
    CHECK(j["ranks"][0]["memory_by_kind"] == nlohmann::json::parse("[[0, 10, 0], [0.5, 10, 4.25], [1, 10, 0]]"));
    CHECK_FALSE(j["ranks"][1].contains("memory_by_kind"));
    std::istringstream in(a);
    const Trace back = read_trace_json(in, "mem");
    CHECK(back.memory_kinds == t.memory_kinds);
    CHECK(back.ranks[0].memory_by_kind == t.ranks[0].memory_by_kind);
    CHECK(back.memory_samples(back.ranks[0]) == 3);
    CHECK(back.memory_samples(back.ranks[1]) == 0);
    CHECK(to_json(back) == a);

    // The kinds after the ranks, as a hand-written file may have them.
    auto moved = j;
    moved.erase("memory_kinds");
    std::string text = moved.dump();
    text.insert(text.size() - 1, R"(, "memory_kinds": ["weights", "activations"])");
    std::istringstream in2(text);
    const Trace later = read_trace_json(in2, "mem");
    CHECK(later.ranks[0].memory_by_kind == t.ranks[0].memory_by_kind);
    CHECK(later.memory_kinds == t.memory_kinds);
}

TEST_CASE("bad memory by kind is rejected at its place") {
    const std::string rank = R"({"rank": 0, "events": [], "memory_by_kind": )";
    const auto doc = [&](const std::string& kinds, const std::string& samples) {
        return std::string(R"({"format": "dtsim-trace", "version": 1, )") + kinds + R"("ranks": [)" + rank + samples +
               "}]}";
    };
    const std::string two = R"("memory_kinds": ["a", "b"], )";
    CHECK(read_error(doc(two, "[[0, 1, 2], [1, 1]]")) ==
          "t.json: at $.ranks[0].memory_by_kind[1]: expected 3 numbers, as in the samples before it, found 2");
    CHECK(read_error(doc(two, "[[0, 1]]")) ==
          "t.json: at $.ranks[0].memory_by_kind[0]: expected 3 numbers (a time and an amount of each of the 2 "
          "memory_kinds), found 2");
    CHECK(read_error(doc(two, "[[1, 1, 2], [0.5, 1, 2]]")) ==
          "t.json: at $.ranks[0].memory_by_kind[1][0]: expected a time >= the sample before it (1), found 0.5");
    CHECK(read_error(doc(two, "[[0, -1, 2]]")) == "t.json: at $.ranks[0].memory_by_kind[0][1]: expected a number >= 0, found -1");
    CHECK(read_error(doc(two, "[[0, \"x\", 2]]")) ==
          "t.json: at $.ranks[0].memory_by_kind[0][1]: expected a number >= 0, found \"x\" (a string)");
    CHECK(read_error(doc(two, "[[0]]")) ==
          "t.json: at $.ranks[0].memory_by_kind[0]: expected a time and an amount of each memory kind, found 1 number");
    CHECK(read_error(doc(two, "[3]")) ==
          "t.json: at $.ranks[0].memory_by_kind[0]: expected an array (a time, then an amount of each memory kind), found 3");
    CHECK(read_error(doc(two, "{}")) == "t.json: at $.ranks[0].memory_by_kind: expected an array of samples, found an object");
    CHECK(read_error(doc("", "[[0, 1, 2]]")) ==
          "t.json: at $.ranks[0].memory_by_kind: memory by kind needs the kinds it is divided into: the document has no "
          "\"memory_kinds\"");
    CHECK(read_error(doc(R"("memory_kinds": ["a", "a"], )", "[]")) == "t.json: at $.memory_kinds[1]: the kind \"a\" is named twice");
    CHECK(read_error(doc(R"("memory_kinds": ["a", ""], )", "[]")) ==
          "t.json: at $.memory_kinds[1]: expected a kind's name, found \"\" (a string)");
    CHECK(read_error(doc(R"("memory_kinds": "a", )", "[]")) ==
          "t.json: at $.memory_kinds: expected an array of names, found \"a\" (a string)");
    CHECK(read_error(doc(two, "[[0, 1, 2]]")) == "no error");
    CHECK(read_error(doc(two, "[]")) == "no error");
}

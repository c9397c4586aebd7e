// The Chrome Trace Event Format export, parsed back and compared with the trace.
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"
#include "sample_traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace dtsim::render {
namespace {

using nlohmann::json;

json export_json(const Trace& t) {
    std::ostringstream out;
    write_chrome_trace(t, out);
    return json::parse(out.str());
}

std::vector<json> with_phase(const json& j, const std::string& ph) {
    std::vector<json> out;
    for (const auto& e : j.at("traceEvents"))
        if (e.at("ph") == ph) out.push_back(e);
    return out;
}

using ThreadKey = std::pair<int, long long>;  // (pid, tid)

ThreadKey thread_of(const json& e) { return {e.at("pid").get<int>(), e.at("tid").get<long long>()}; }

// The names of the threads, from the "thread_name" metadata.
std::map<ThreadKey, std::string> thread_names(const json& j) {
    std::map<ThreadKey, std::string> out;
    for (const auto& m : with_phase(j, "M"))
        if (m.at("name") == "thread_name") out[thread_of(m)] = m.at("args").at("name");
    return out;
}

// Slices of one thread that overlap by more than a nanosecond (1e-3 us): the viewers nest them, and
// one that starts inside another and ends after it has no place.
std::size_t overlapping_slices(const json& j) {
    std::map<ThreadKey, std::vector<std::pair<double, double>>> slices;
    for (const auto& x : with_phase(j, "X"))
        slices[thread_of(x)].emplace_back(x.at("ts").get<double>(), x.at("ts").get<double>() + x.at("dur").get<double>());
    std::size_t n = 0;
    for (auto& [thread, v] : slices) {
        std::sort(v.begin(), v.end());
        for (std::size_t i = 1; i < v.size(); ++i)
            if (v[i].first < v[i - 1].second - 1e-3) ++n;
    }
    return n;
}

}  // namespace

TEST_CASE("the Chrome trace has one X event per trace event, with ts and dur in microseconds") {
    const Trace t = testing::ddp_trace();
    const json j = export_json(t);
    CHECK(j.at("otherData").at("microseconds_per_time_unit") == 1000);
    CHECK(j.at("otherData").at("meta").at("puzzle") == "ddp");
    const auto xs = with_phase(j, "X");
    REQUIRE(xs.size() == t.event_count());
    const auto threads = thread_names(j);
    std::size_t k = 0;
    for (const auto& r : t.ranks)
        for (const auto& e : r.events) {
            const json& x = xs[k++];
            CHECK(x.at("pid") == r.rank);
            CHECK(threads.at(thread_of(x)) == "compute");
            CHECK(x.at("ts").get<double>() == doctest::Approx(e.start * 1000));
            CHECK(x.at("dur").get<double>() == doctest::Approx(e.duration * 1000));
            CHECK(x.at("args").at("memory").get<double>() == e.memory);
            if (e.layer == kNoLayer)
                CHECK(!x.at("args").contains("layer"));
            else
                CHECK(x.at("args").at("layer") == e.layer);
            if (e.batches.empty())
                CHECK(!x.at("args").contains("batches"));
            else
                CHECK(x.at("args").at("batches") == json(e.batches.to_vector()));
        }
    // Named as the pipeline figures name passes, with the batch and layer: "F b0 L0".
    CHECK(xs[0].at("name") == "F b0 L0");
    CHECK(xs[2].at("name") == "loss L2");
    CHECK(xs[3].at("name") == "B b0 L1");
    CHECK(xs[5].at("name") == "allreduce L0");
    CHECK(xs[6].at("name") == "update");
    CHECK(xs[9].at("name") == "F b1 L0");
    CHECK(xs[0].at("cat") == "compute");
    CHECK(xs[5].at("cat") == "collective");
    CHECK(xs[6].at("cat") == "update");
}

TEST_CASE("the Chrome trace names a process per rank and a thread per stream") {
    const Trace t = testing::hardware_trace();
    const json j = export_json(t);
    std::map<int, std::string> processes;
    std::map<int, int> sort_index;
    for (const auto& m : with_phase(j, "M")) {
        if (m.at("name") == "process_name") processes[m.at("pid")] = m.at("args").at("name");
        if (m.at("name") == "process_sort_index") sort_index[m.at("pid")] = m.at("args").at("sort_index");
    }
    CHECK(processes == std::map<int, std::string>{{0, "GPU 0"}, {1, "GPU 1"}});
    CHECK(sort_index == std::map<int, int>{{0, 0}, {1, 1}});
    // Per rank a compute and a comm thread, first and second. Their ids are unique in the whole export
    // and none is 0 or any process's id (Perfetto finds a thread by its tid alone).
    const auto threads = thread_names(j);
    REQUIRE(threads.size() == 4);
    std::set<long long> tids;
    std::map<ThreadKey, int> thread_order;
    for (const auto& m : with_phase(j, "M"))
        if (m.at("name") == "thread_sort_index") thread_order[thread_of(m)] = m.at("args").at("sort_index");
    for (int r = 0; r < 2; ++r) {
        std::vector<std::string> names(2);
        for (const auto& [key, name] : threads)
            if (key.first == r) names.at(static_cast<std::size_t>(thread_order.at(key))) = name;
        CHECK(names == std::vector<std::string>{"compute", "comm"});
    }
    for (const auto& [key, name] : threads) {
        CHECK(key.second > 0);
        CHECK(!processes.contains(static_cast<int>(key.second)));
        CHECK(tids.insert(key.second).second);
    }
    // Each event on its stream's thread.
    const auto xs = with_phase(j, "X");
    REQUIRE(xs.size() == t.event_count());
    std::size_t k = 0;
    for (const auto& r : t.ranks)
        for (const auto& e : r.events) {
            CAPTURE(k);
            CHECK(threads.at(thread_of(xs[k])) == (e.stream == Stream::comm ? "comm" : "compute"));
            ++k;
        }
    // Seconds become microseconds; comm events carry their bytes.
    CHECK(xs[0].at("ts") == 0);
    CHECK(xs[0].at("dur").get<double>() == doctest::Approx(2000));
    CHECK(xs[0].at("args").at("flops").get<double>() == 3e12);
    CHECK(xs[3].at("name") == "all_reduce L1");
    CHECK(xs[2].at("name") == "B mb0,1 L1");
    CHECK(xs[3].at("cat") == "collective");
    CHECK(xs[3].at("ts").get<double>() == doctest::Approx(8000));
    CHECK(xs[3].at("args").at("bytes").get<double>() == 512.0 * (1 << 20));
    CHECK(!xs[2].at("args").contains("bytes"));
}

TEST_CASE("point-to-point passes get flow arrows from each send to its receive, peers found on the grid") {
    // Grid tp 2 x pp 2: ranks 0 and 1 (stage 0) send microbatch 0 at the same moment to ranks 2 and 3.
    const auto send = OpCode::of("send"), recv = OpCode::of("recv");
    std::vector<std::vector<Event>> ranks;
    for (int r = 0; r < 4; ++r) {
        auto e = testing::make_event(r < 2 ? send : recv, r < 2 ? 1 : 2, 1e-3, 1e-4, 0, IdSet::single(0), Stream::comm);
        e.bytes = 1 << 20;
        ranks.push_back({testing::make_event(ops::forward, r < 2 ? 1 : 2, 0, 1e-3, 0, IdSet::single(0)), e});
    }
    Trace t = testing::seconds_trace(std::move(ranks));
    t.meta = {{"config", "p2p"}, {"grid", {{"tp", 2}, {"pp", 2}}}};
    const json j = export_json(t);
    const auto threads = thread_names(j);
    const auto starts = with_phase(j, "s"), ends = with_phase(j, "f");
    REQUIRE(starts.size() == 2);
    REQUIRE(ends.size() == 2);
    for (const auto& s : starts) {
        const int from = s.at("pid");
        CAPTURE(from);
        const auto end = std::find_if(ends.begin(), ends.end(), [&](const json& f) { return f.at("id") == s.at("id"); });
        REQUIRE(end != ends.end());
        CHECK(end->at("pid") == from + 2);  // the same tp coordinate on the next stage
        CHECK(end->at("bp") == "e");
        CHECK(threads.at(thread_of(s)) == "comm");
        CHECK(threads.at(thread_of(*end)) == "comm");
        CHECK(s.at("ts").get<double>() == doctest::Approx(1000));
    }
    std::map<int, std::string> names;
    for (const auto& m : with_phase(j, "M"))
        if (m.at("name") == "process_name") names[m.at("pid")] = m.at("args").at("name");
    CHECK(names.at(3) == "GPU 3 (pp1 tp1)");
    CHECK(with_phase(j, "X")[1].at("name") == "send mb0 L1");
}

TEST_CASE("memory is a counter track per rank, \"memory GPU r\", sampled where it changes") {
    const Trace t = testing::ddp_trace();
    const json j = export_json(t);
    const auto threads = thread_names(j);
    const auto cs = with_phase(j, "C");
    // Per rank: 1179648 at 0, 1310720 at 1, 1441792 and 1572864 at 2, 1703936 at 3, 1835008 at 4.
    REQUIRE(cs.size() == 4 * 6);
    for (int r = 0; r < 4; ++r) {
        CAPTURE(r);
        const auto* c = &cs[static_cast<std::size_t>(r) * 6];
        for (int i = 0; i < 6; ++i) {
            CHECK(c[i].at("pid") == r);
            CHECK(c[i].at("name") == "memory GPU " + std::to_string(r));
            CHECK(threads.at(thread_of(c[i])) == "compute");  // a track of the rank's process
            CHECK(c[i].at("args").size() == 1);
        }
        CHECK(c[0].at("args").at("units") == 1179648);
        CHECK(c[3].at("ts").get<double>() == doctest::Approx(2000));
        CHECK(c[3].at("args").at("units") == 1572864);
        CHECK(c[5].at("ts").get<double>() == doctest::Approx(4000));
        CHECK(c[5].at("args").at("units") == 1835008);
    }
    // Bytes in GiB. Rank 1 of the hardware trace: 6, 8, 10 GiB over the forward and backward of
    // layer 1, 9 GiB from 8 ms (an all-reduce and a backward start then), 7 GiB from 12 ms.
    std::vector<std::pair<double, double>> rank1;
    for (const auto& c : with_phase(export_json(testing::hardware_trace()), "C"))
        if (c.at("pid") == 1) {
            CHECK(c.at("name") == "memory GPU 1");
            rank1.emplace_back(c.at("ts").get<double>(), c.at("args").at("GiB").get<double>());
        }
    CHECK(rank1 == std::vector<std::pair<double, double>>{{0, 6}, {2000, 8}, {4000, 10}, {8000, 9}, {12000, 7}});
}

TEST_CASE("memory by kind is a counter per rank with an argument per kind, in GiB, where a part changes") {
    Trace t = testing::hardware_trace();
    t.memory_kinds = {"weights", "activations"};
    const double G = 1 << 30;
    // Rank 1 only: 6 GiB of weights from 0, activations 2 then 4 GiB, an unchanged sample left out.
    t.ranks[1].memory_by_kind = {0, 6 * G, 0, 0.002, 6 * G, 2 * G, 0.003, 6 * G, 2 * G, 0.004, 6 * G, 4 * G};
    std::vector<json> kinds;
    for (const auto& c : with_phase(export_json(t), "C"))
        if (c.at("name").get<std::string>().starts_with("memory by kind")) kinds.push_back(c);
    REQUIRE(kinds.size() == 3);
    for (const auto& c : kinds) {
        CHECK(c.at("pid") == 1);
        CHECK(c.at("name") == "memory by kind GPU 1");
        CHECK(c.at("args").size() == 2);
    }
    CHECK(kinds[0].at("ts").get<double>() == 0);
    CHECK(kinds[0].at("args").at("weights") == 6);
    CHECK(kinds[0].at("args").at("activations") == 0);
    CHECK(kinds[1].at("ts").get<double>() == doctest::Approx(2000));
    CHECK(kinds[1].at("args").at("activations") == 2);
    CHECK(kinds[2].at("ts").get<double>() == doctest::Approx(4000));
    CHECK(kinds[2].at("args").at("activations") == 4);
    // Samples that are not whole, or not finite, cannot be written.
    t.ranks[1].memory_by_kind.push_back(1);
    CHECK_THROWS_WITH_AS(export_json(t), doctest::Contains("rank 1's memory by kind"), std::invalid_argument);
    t.ranks[1].memory_by_kind = {0, std::numeric_limits<double>::infinity(), 0};
    CHECK_THROWS_WITH_AS(export_json(t), doctest::Contains("memory by kind of rank 1, sample 0"), std::invalid_argument);
}

TEST_CASE("a trace without memory has no memory counters") {
    // `dtsim failures` records no memory: every event's is 0.
    Trace t = testing::seconds_trace(std::vector<std::vector<Event>>(
        2, {testing::make_event(OpCode::of("train"), kNoLayer, 0, 3600, 0),
            testing::make_event(OpCode::of("checkpoint"), kNoLayer, 3600, 4.5, 0)}));
    const json j = export_json(t);
    CHECK(with_phase(j, "C").empty());
    CHECK(with_phase(j, "X").size() == 4);
    // One event with memory brings every rank's counter back, zeros included.
    t.ranks[1].events[1].memory = 1 << 20;
    summarize(t);
    const auto cs = with_phase(export_json(t), "C");
    REQUIRE(cs.size() == 3);
    CHECK(cs[0].at("args").at("GiB") == 0);
    CHECK(cs[2].at("pid") == 1);
    CHECK(cs[2].at("args").at("GiB").get<double>() == 1.0 / 1024);
}

TEST_CASE("events of one stream that overlap go to threads of their own, named after the stream") {
    // Rank 0, in seconds: a send and a receive on the comm stream overlapping (as a pipeline rank's
    // do), a second send after the first, a collective after both; on the compute stream a forward
    // whose end, 0.1 + 0.2, is a rounding past the next start (0.3): the same thread; then two
    // compute events that do overlap.
    const auto send = OpCode::of("send"), recv = OpCode::of("recv"), all_reduce = OpCode::of("all_reduce");
    std::vector<Event> events = {
        testing::make_event(ops::forward, 0, 0.1, 0.2, 0),
        testing::make_event(ops::forward, 1, 0.3, 0.7, 0),
        testing::make_event(send, 1, 1.0, 0.4, 0, IdSet::single(0), Stream::comm),
        testing::make_event(recv, 1, 1.3, 0.4, 0, IdSet::single(1), Stream::comm),
        testing::make_event(send, 1, 1.45, 0.15, 0, IdSet::single(1), Stream::comm),
        testing::make_event(all_reduce, 1, 1.8, 0.2, 0, {}, Stream::comm),
        testing::make_event(ops::backward, 1, 5, 2, 0),
        testing::make_event(ops::backward, 0, 6, 2, 0),
    };
    REQUIRE(events[0].end() > events[1].start);  // the rounding
    const Trace t = testing::seconds_trace({std::move(events)});
    const json j = export_json(t);
    const auto threads = thread_names(j);
    const auto xs = with_phase(j, "X");
    REQUIRE(xs.size() == 8);
    std::vector<std::string> on;
    for (const auto& x : xs) on.push_back(threads.at(thread_of(x)));
    CHECK(on == std::vector<std::string>{"compute", "compute", "comm", "comm 2", "comm", "comm", "compute",
                                         "compute 2"});
    CHECK(overlapping_slices(j) == 0);
    std::map<std::string, int> order;
    for (const auto& m : with_phase(j, "M"))
        if (m.at("name") == "thread_sort_index") order[threads.at(thread_of(m))] = m.at("args").at("sort_index");
    CHECK(order == std::map<std::string, int>{{"compute", 0}, {"compute 2", 1}, {"comm", 2}, {"comm 2", 3}});
}

TEST_CASE("a 1F1B run's export: sends and receives that overlap on separate threads, each pass an arrow") {
    // The hardware run of the golden memory picture: 4 pipeline stages, 6 microbatches.
    const Trace t = read_trace_file(DTSIM_RENDER_GOLDEN_DIR "/1f1b-pp4-trace.json");
    const json j = export_json(t);
    const auto threads = thread_names(j);
    CHECK(overlapping_slices(j) == 0);
    // The middle stages receive from one neighbour while they send to the other: two comm threads.
    std::map<int, std::set<std::string>> per_rank;
    for (const auto& [key, name] : threads) per_rank[key.first].insert(name);
    CHECK(per_rank.at(0) == std::set<std::string>{"compute", "comm"});
    CHECK(per_rank.at(1) == std::set<std::string>{"compute", "comm", "comm 2"});
    CHECK(per_rank.at(2) == std::set<std::string>{"compute", "comm", "comm 2"});
    CHECK(per_rank.at(3) == std::set<std::string>{"compute", "comm"});
    // Every send and receive is on a comm thread; every send has an arrow to a receive on the next
    // stage (forward) or the one before (backward).
    std::size_t sends = 0;
    for (const auto& x : with_phase(j, "X")) {
        const std::string name = x.at("name");
        if (name.rfind("send ", 0) == 0) ++sends;
        if (name.rfind("send ", 0) == 0 || name.rfind("recv ", 0) == 0) CHECK(threads.at(thread_of(x)).rfind("comm", 0) == 0);
    }
    CHECK(sends == 2 * 3 * 6);  // 3 stage boundaries, each microbatch across each twice
    const auto starts = with_phase(j, "s"), ends = with_phase(j, "f");
    REQUIRE(starts.size() == sends);
    REQUIRE(ends.size() == sends);
    std::map<long long, int> end_pid;
    for (const auto& f : ends) end_pid[f.at("id").get<long long>()] = f.at("pid");
    for (const auto& s : starts) {
        const int from = s.at("pid"), to = end_pid.at(s.at("id").get<long long>());
        CHECK(std::abs(from - to) == 1);
        CHECK(threads.at(thread_of(s)).rfind("comm", 0) == 0);
    }
    // Memory counters in GiB; the peak, 66.55 GiB, on GPU 0.
    double peak = 0;
    int peak_pid = -1;
    for (const auto& c : with_phase(j, "C"))
        if (c.at("name").get<std::string>().starts_with("memory GPU") && c.at("args").at("GiB").get<double>() > peak) {
            peak = c.at("args").at("GiB");
            peak_pid = c.at("pid");
        }
    CHECK(peak_pid == 0);
    CHECK(peak * (1 << 30) == t.summary.max_memory);
    // The counter by kind peaks there too, its parts summing to it.
    double most = 0;
    int most_pid = -1;
    for (const auto& c : with_phase(j, "C"))
        if (c.at("name").get<std::string>().starts_with("memory by kind")) {
            CHECK(c.at("args").size() == 5);
            double sum = 0;
            for (const auto& [k, v] : c.at("args").items()) sum += v.get<double>();
            if (sum > most) {
                most = sum;
                most_pid = c.at("pid");
            }
        }
    CHECK(most_pid == 0);
    CHECK(most * (1 << 30) == doctest::Approx(t.summary.max_memory).epsilon(1e-12));
}

TEST_CASE("the Chrome trace is deterministic and written to a file") {
    const Trace t = testing::hardware_trace();
    std::ostringstream a, b;
    write_chrome_trace(t, a);
    write_chrome_trace(t, b);
    CHECK(a.str() == b.str());
    const auto path = std::filesystem::temp_directory_path() / "dtsim-render-tests-chrome.json";
    write_chrome_trace_file(t, path.string());
    std::ifstream f(path);
    CHECK(json::parse(f) == json::parse(a.str()));
    CHECK_THROWS_WITH_AS(write_chrome_trace_file(t, "/nonexistent-dir/x.json"),
                         "/nonexistent-dir/x.json: cannot open for writing: No such file or directory",
                         std::runtime_error);
}

}  // namespace dtsim::render

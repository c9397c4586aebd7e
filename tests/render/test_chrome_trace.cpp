// The Chrome Trace Event Format export, parsed back and compared with the trace.
#include "dtsim/render.hpp"
#include "sample_traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

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

}  // namespace

TEST_CASE("the Chrome trace has one X event per trace event, with ts and dur in microseconds") {
    const Trace t = testing::ddp_trace();
    const json j = export_json(t);
    CHECK(j.at("otherData").at("microseconds_per_time_unit") == 1000);
    CHECK(j.at("otherData").at("meta").at("puzzle") == "ddp");
    const auto xs = with_phase(j, "X");
    REQUIRE(xs.size() == t.event_count());
    std::size_t k = 0;
    for (const auto& r : t.ranks)
        for (const auto& e : r.events) {
            const json& x = xs[k++];
            CHECK(x.at("pid") == r.rank);
            CHECK(x.at("tid") == 0);
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
    std::map<std::pair<int, std::string>, json> meta;
    for (const auto& m : with_phase(j, "M"))
        meta[{m.at("pid").get<int>(),
              m.at("name").get<std::string>() + "/" + std::to_string(m.at("tid").get<int>())}] = m.at("args");
    for (int r = 0; r < 2; ++r) {
        CHECK(meta.at({r, "process_name/0"}).at("name") == "GPU " + std::to_string(r));
        CHECK(meta.at({r, "process_sort_index/0"}).at("sort_index") == r);
        CHECK(meta.at({r, "thread_name/0"}).at("name") == "compute");
        CHECK(meta.at({r, "thread_name/1"}).at("name") == "comm");
    }
    // Seconds become microseconds; comm events go to tid 1 with their bytes.
    const auto xs = with_phase(j, "X");
    REQUIRE(xs.size() == t.event_count());
    CHECK(xs[0].at("ts") == 0);
    CHECK(xs[0].at("dur").get<double>() == doctest::Approx(2000));
    CHECK(xs[0].at("args").at("flops").get<double>() == 3e12);
    CHECK(xs[3].at("name") == "all_reduce L1");
    CHECK(xs[2].at("name") == "B mb0,1 L1");
    CHECK(xs[3].at("tid") == 1);
    CHECK(xs[3].at("cat") == "collective");
    CHECK(xs[3].at("ts").get<double>() == doctest::Approx(8000));
    CHECK(xs[3].at("args").at("bytes").get<double>() == 512.0 * (1 << 20));
    CHECK(!xs[2].at("args").contains("bytes"));
}

TEST_CASE("point-to-point passes get flow arrows from each send to its receive, peers found on the grid") {
    // Grid tp 2 x pp 2: ranks 0 and 1 (stage 0) send microbatch 0 at the same moment to ranks 2 and 3.
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.meta = {{"config", "p2p"}, {"grid", {{"tp", 2}, {"pp", 2}}}};
    const auto send = OpCode::of("send"), recv = OpCode::of("recv");
    for (int r = 0; r < 4; ++r) {
        RankTrace rt;
        rt.rank = r;
        auto e = testing::make_event(r < 2 ? send : recv, r < 2 ? 1 : 2, 1e-3, 1e-4, 0, IdSet::single(0), Stream::comm);
        e.bytes = 1 << 20;
        rt.events = {testing::make_event(ops::forward, r < 2 ? 1 : 2, 0, 1e-3, 0, IdSet::single(0)), e};
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    const json j = export_json(t);
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
        CHECK(s.at("tid") == 1);
        CHECK(s.at("ts").get<double>() == doctest::Approx(1000));
    }
    std::map<int, std::string> names;
    for (const auto& m : with_phase(j, "M"))
        if (m.at("name") == "process_name") names[m.at("pid")] = m.at("args").at("name");
    CHECK(names.at(3) == "GPU 3 (pp1 tp1)");
    CHECK(with_phase(j, "X")[1].at("name") == "send mb0 L1");
}

TEST_CASE("memory is a counter per rank, sampled where it changes") {
    const Trace t = testing::ddp_trace();
    const json j = export_json(t);
    const auto cs = with_phase(j, "C");
    // Per rank: 1179648 at 0, 1310720 at 1, 1441792 and 1572864 at 2, 1703936 at 3, 1835008 at 4.
    REQUIRE(cs.size() == 4 * 6);
    for (int r = 0; r < 4; ++r) {
        const auto* c = &cs[static_cast<std::size_t>(r) * 6];
        CHECK(c[0].at("pid") == r);
        CHECK(c[0].at("name") == "memory");
        CHECK(c[0].at("args").at("units") == 1179648);
        CHECK(c[3].at("ts").get<double>() == doctest::Approx(2000));
        CHECK(c[3].at("args").at("units") == 1572864);
        CHECK(c[5].at("ts").get<double>() == doctest::Approx(4000));
        CHECK(c[5].at("args").at("units") == 1835008);
    }
    const auto hw = with_phase(export_json(testing::hardware_trace()), "C");
    REQUIRE(!hw.empty());
    CHECK(hw[0].at("args").contains("bytes"));
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

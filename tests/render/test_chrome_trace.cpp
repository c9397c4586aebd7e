// The Chrome Trace Event Format export, parsed back and compared with the trace.
#include "dtsim/render.hpp"
#include "sample_traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

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
            CHECK(x.at("name") == std::string(e.op.name()));
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
    CHECK(xs[3].at("name") == "all_reduce");
    CHECK(xs[3].at("tid") == 1);
    CHECK(xs[3].at("cat") == "collective");
    CHECK(xs[3].at("ts").get<double>() == doctest::Approx(8000));
    CHECK(xs[3].at("args").at("bytes").get<double>() == 512.0 * (1 << 20));
    CHECK(!xs[2].at("args").contains("bytes"));
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

#include "host/cli.hpp"
#include "host/sweep.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <set>

using namespace dtsim::harness;

namespace {

nlohmann::json read_json(const std::string& path) {
    std::ifstream f(path);
    REQUIRE_MESSAGE(f.good(), "cannot open " << path);
    return nlohmann::json::parse(f);
}

std::set<std::string> keys_of(const nlohmann::json& obj) {
    std::set<std::string> out;
    for (const auto& [k, v] : obj.items()) out.insert(k);
    return out;
}

// Same JSON kind: string, integer (signed or not), floating point, boolean, object, array.
bool same_kind(const nlohmann::json& a, const nlohmann::json& b) {
    return a.is_string() == b.is_string() && a.is_number_integer() == b.is_number_integer() &&
           a.is_number_float() == b.is_number_float() && a.is_boolean() == b.is_boolean() &&
           a.is_object() == b.is_object() && a.is_array() == b.is_array();
}

// The published sweep data this tool's output must look like.
nlohmann::json published() { return read_json(std::string(DTSIM_CALIB_DATA_DIR) + "/nccl_tests.json"); }

}  // namespace

TEST_CASE("bus bandwidth factors are nccl-tests' PERFORMANCE.md factors") {
    CHECK(bus_bandwidth_factor(Collective::all_reduce, 8) == doctest::Approx(1.75));
    CHECK(bus_bandwidth_factor(Collective::all_reduce, 16) == doctest::Approx(2.0 * 15 / 16));
    CHECK(bus_bandwidth_factor(Collective::all_gather, 8) == doctest::Approx(0.875));
    CHECK(bus_bandwidth_factor(Collective::reduce_scatter, 4) == doctest::Approx(0.75));
    CHECK(bus_bandwidth_factor(Collective::sendrecv, 8) == 1.0);
    CHECK(bus_bandwidth_factor(Collective::all_reduce, 1) == 0.0);
}

TEST_CASE("the default sweep runs 1 KiB to 4 GiB in 23 powers of two") {
    const auto sizes = size_sweep(1024, 4ull << 30, 2);
    REQUIRE(sizes.size() == 23);
    CHECK(sizes.front() == 1024);
    CHECK(sizes[1] == 2048);
    CHECK(sizes.back() == 4ull << 30);
    for (std::size_t i = 1; i < sizes.size(); ++i) CHECK(sizes[i] == 2 * sizes[i - 1]);
}

TEST_CASE("the sweep stops at the last size not above max, and rejects bad bounds") {
    CHECK(size_sweep(1000, 5000, 4) == std::vector<std::uint64_t>{1000, 4000});
    CHECK(size_sweep(8, 8, 2) == std::vector<std::uint64_t>{8});
    CHECK(size_sweep(1, ~0ull, 2).size() == 64);  // no overflow at the top
    CHECK_THROWS_AS(size_sweep(0, 8, 2), ArgError);
    CHECK_THROWS_AS(size_sweep(16, 8, 2), ArgError);
    CHECK_THROWS_AS(size_sweep(8, 16, 1), ArgError);
}

TEST_CASE("sweep points round counts as nccl-tests does") {
    auto ar = sweep_point(Collective::all_reduce, 1024, 4, 8);
    CHECK(ar.count == 256);
    CHECK(ar.send_count == 256);
    CHECK(ar.recv_count == 256);
    CHECK(ar.size_bytes == 1024);
    // all_gather: the printed count is per rank, the printed size the whole array.
    auto ag = sweep_point(Collective::all_gather, 1000, 4, 8);
    CHECK(ag.count == 31);
    CHECK(ag.send_count == 31);
    CHECK(ag.recv_count == 248);
    CHECK(ag.size_bytes == 992);
    auto rs = sweep_point(Collective::reduce_scatter, 134217728, 4, 8);
    CHECK(rs.count == 4194304);
    CHECK(rs.send_count == 33554432);
    CHECK(rs.recv_count == 4194304);
    CHECK(rs.size_bytes == 134217728);
    CHECK(sweep_point(Collective::all_gather, 16, 4, 8).count == 0);  // not run
}

TEST_CASE("rows computed from a time reproduce published nccl-tests rows") {
    const auto doc = published();
    int compared = 0;
    for (const auto& ds : doc["datasets"]) {
        const std::string id = ds["id"];
        Collective c = parse_collective(ds["collective"].get<std::string>());
        const int n = ds["hardware"]["gpus_per_node"].get<int>() * ds["hardware"]["nodes"].get<int>();
        if (id != "h100x8-nvls-allreduce" && id != "h100x8-ring-reducescatter" && id != "a100x8-nvlink-sendrecv")
            continue;
        for (const auto& row : ds["rows"]) {
            const auto p = sweep_point(c, static_cast<std::uint64_t>(row["size_bytes"].get<double>()), 4, n);
            CHECK(static_cast<double>(p.size_bytes) == row["size_bytes"].get<double>());
            if (row.contains("count")) CHECK(static_cast<double>(p.count) == row["count"].get<double>());
            const SweepRow r = make_row(c, p, row["time_us"].get<double>() * 1e-6, n);
            // Published figures are rounded to 2 decimals from unrounded times.
            CHECK(r.algbw_GBps == doctest::Approx(row["algbw_GBps"].get<double>()).epsilon(0.002));
            CHECK(r.busbw_GBps == doctest::Approx(row["busbw_GBps"].get<double>()).epsilon(0.002));
            ++compared;
        }
    }
    CHECK(compared >= 10);
}

TEST_CASE("a JSON row has exactly the keys and number types of nccl_tests.json's rows") {
    const auto doc = published();
    const auto& reference = doc["datasets"][0]["rows"][0];
    SweepRow r = make_row(Collective::all_reduce, sweep_point(Collective::all_reduce, 1 << 20, 4, 8), 12.5e-6, 8);
    const auto j = row_json(r);
    CHECK(keys_of(j) == keys_of(reference));
    for (const auto& [k, v] : reference.items()) {
        CAPTURE(k);
        CHECK(same_kind(j[k], v));
    }
    CHECK(j["size_bytes"].get<double>() == 1048576.0);
    CHECK(j["count"].get<double>() == 262144.0);
    CHECK(j["time_us"].get<double>() == 12.5);
}

TEST_CASE("the sweep file has nccl_tests.json's layout, plus the run's metadata") {
    const auto doc = published();
    SweepDataset d;
    d.collective = Collective::reduce_scatter;
    d.in_place = false;
    d.note = "float; iters 20";
    d.rows.push_back(make_row(d.collective, sweep_point(d.collective, 1 << 20, 4, 8), 10e-6, 8));
    nlohmann::json meta = {{"gpu", "NVIDIA H100 80GB HBM3"}, {"gpu_count", 8}, {"nodes", 1},
                           {"nccl_version", "2.28.9"}, {"date", "2025-01-01T00:00:00Z"}, {"command", "dtsim-collectives"}};
    const auto out = sweep_json(meta, {"NVIDIA H100 80GB HBM3", 8, 1}, {d});
    CHECK(out.contains("description"));
    CHECK(out["meta"] == meta);
    REQUIRE(out["datasets"].size() == 1);
    const auto& ds = out["datasets"][0];
    const auto& ref = doc["datasets"][0];
    for (const auto& [k, v] : ref.items()) {
        CAPTURE(k);
        REQUIRE(ds.contains(k));
        CHECK(same_kind(ds[k], v));
    }
    for (const auto& [k, v] : ref["hardware"].items()) {
        if (k == "intra" || k == "inter") continue;  // a measured run does not know its links
        CAPTURE(k);
        REQUIRE(ds["hardware"].contains(k));
        CHECK(same_kind(ds["hardware"][k], v));
    }
    CHECK(ds["collective"] == "reduce_scatter");
    CHECK(ds["id"] == "measured-1x8-reduce_scatter-out-of-place");
    CHECK(ds["note"] == "out-of-place; float; iters 20");
    CHECK(keys_of(ds["rows"][0]) == keys_of(ref["rows"][0]));
}

TEST_CASE("collective and data type names are parsed; an unknown one is named with the known ones") {
    CHECK(parse_collective("allreduce") == Collective::all_reduce);
    CHECK(parse_collective("reduce_scatter") == Collective::reduce_scatter);
    CHECK(parse_collective("sendrecv") == Collective::sendrecv);
    CHECK(collective_name(Collective::all_gather) == "all_gather");
    CHECK_THROWS_WITH_AS(parse_collective("all_reduc"),
                         doctest::Contains("unknown collective 'all_reduc'; the collectives are: all_reduce,"), ArgError);
    CHECK(parse_dtype("bf16").name == "bfloat16");
    CHECK(parse_dtype("bf16").size == 2);
    CHECK(parse_dtype("float").size == 4);
    CHECK(parse_dtype("double").size == 8);
    CHECK(parse_dtype("int8").size == 1);
    CHECK_THROWS_WITH_AS(parse_dtype("float128"), doctest::Contains("--dtype: unknown data type 'float128'"), ArgError);
}

TEST_CASE("the check pattern's sums are exact only where the type can hold them") {
    CHECK(expected_reduce_sum(8) == 20.0);  // 1+2+3+4, twice
    CHECK(check_is_exact(parse_dtype("bfloat16"), 64));
    CHECK_FALSE(check_is_exact(parse_dtype("bfloat16"), 128));
    CHECK(check_is_exact(parse_dtype("float"), 4096));
    CHECK_FALSE(check_is_exact(parse_dtype("int8"), 64));
}

TEST_CASE("format_bytes picks the largest exact binary unit") {
    CHECK(format_bytes(4ull << 30) == "4 GiB");
    CHECK(format_bytes(1024) == "1 KiB");
    CHECK(format_bytes(1536) == "1536 B");
    CHECK(format_bytes(0) == "0 B");
}

TEST_CASE("table rows line up with nccl-tests' columns") {
    const auto r = make_row(Collective::all_reduce, sweep_point(Collective::all_reduce, 1024, 4, 8), 25.26e-6, 8);
    const std::string line = table_row(1024, 256, "float", "sum", r, std::nullopt);
    CHECK(line.rfind("        1024           256     float     sum    25.26    0.04    0.07     N/A", 0) == 0);
    CHECK(table_header(true, true).find("out-of-place") != std::string::npos);
}

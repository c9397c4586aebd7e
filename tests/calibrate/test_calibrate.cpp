// dtsim calibrate and validate: the fits recover the parameters synthetic data
// was made with, the measured curves feed collective_cost, validate's
// arithmetic on a hand-made set, and bad files get errors with file and path.
#include "dtsim/hw/calibrate.hpp"
#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/hw/transformer.hpp"
#include "dtsim/hw/units.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace dtsim::hw;
namespace cal = dtsim::hw::calib;

namespace {

const std::string data_dir = DTSIM_CALIBRATE_TEST_DATA;

std::vector<int> iota(int n, int first = 0, int stride = 1) {
    std::vector<int> v(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = first + i * stride;
    return v;
}

double envelope(const std::vector<FitLine>& lines, double x) {
    double t = 1e300;
    for (const auto& l : lines) t = std::min(t, l.latency + x / l.bus_bandwidth);
    return t;
}

std::string write_temp(const std::string& name, const std::string& text) {
    const auto p = std::filesystem::temp_directory_path() / name;
    std::ofstream(p) << text;
    return p.string();
}

}  // namespace

TEST_CASE("the curve fit recovers the lines synthetic data was made of") {
    // Three protocols: LL-like, LL128-like and Simple-like lines (latency s, bus bandwidth B/s).
    const std::vector<FitLine> truth{{10e-6, 20e9}, {40e-6, 150e9}, {150e-6, 400e9}};
    std::vector<std::pair<double, double>> pts;
    for (double s = 64 * kKiB; s <= 4 * kGiB; s *= 2) pts.push_back({s, envelope(truth, s)});
    const auto lines = cal::fit_lines(pts, 3);
    REQUIRE(lines.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
        CHECK(lines[i].latency == doctest::Approx(truth[i].latency).epsilon(1e-6));
        CHECK(lines[i].bus_bandwidth == doctest::Approx(truth[i].bus_bandwidth).epsilon(1e-6));
    }
    // One line: plain alpha-beta, recovered from noisy data to within the noise.
    std::vector<std::pair<double, double>> noisy;
    int i = 0;
    for (double s = 1 * kMiB; s <= 1 * kGiB; s *= 2, ++i)
        noisy.push_back({s, (50e-6 + s / 300e9) * (i % 2 ? 1.01 : 0.99)});
    const auto one = cal::fit_lines(noisy, 1);
    REQUIRE(one.size() == 1);
    CHECK(one[0].latency == doctest::Approx(50e-6).epsilon(0.05));
    CHECK(one[0].bus_bandwidth == doctest::Approx(300e9).epsilon(0.02));
    // A second line that does not pay for itself is not kept.
    CHECK(cal::fit_lines(noisy, 3).size() <= 2);
    CHECK_THROWS_AS(cal::fit_lines({{1, 1}}, 3), std::invalid_argument);
}

namespace {
// An H100-like part with a bf16 peak, HBM bandwidth and the GEMM model's ceiling and overhead.
GpuSpec test_gpu(double peak_flops, double memory_bandwidth, double max_efficiency, double overhead_s) {
    GpuSpec g;
    g.name = "H100-TEST";
    g.peak_flops[static_cast<std::size_t>(DType::bf16)] = peak_flops;
    g.memory_bandwidth = memory_bandwidth;
    g.gemm.max_efficiency = max_efficiency;
    g.gemm.overhead_s = overhead_s;
    return g;
}
}  // namespace

TEST_CASE("the GEMM fit recovers the overhead and bandwidth fraction of the model") {
    GpuSpec g = test_gpu(1000e12, 3e12, 0.8, 7e-6);
    g.gemm.bandwidth_fraction = 0.55;
    std::vector<cal::GemmPoint> pts;
    for (double m : {256.0, 1024.0, 4096.0})
        for (double n : {256.0, 2048.0})
            for (double k : {512.0, 4096.0})
                pts.push_back({"h100", DType::bf16, m, n, k, 2 * m * n * k / g.gemm_seconds(m, n, k, DType::bf16) / 1e12});
    GpuSpec start = g;
    start.gemm.overhead_s = 1e-6;
    start.gemm.bandwidth_fraction = 0.9;
    const auto fit = cal::fit_gemm(start, pts);
    CHECK(fit.model.overhead_s == doctest::Approx(7e-6).epsilon(1e-3));
    CHECK(fit.model.bandwidth_fraction == doctest::Approx(0.55).epsilon(1e-3));
    CHECK(fit.rms_log < 1e-4);
}

TEST_CASE("the GEMM fit on the shipped H100 table reproduces the documented constants") {
    // gpu.hpp: overhead 5.85 us, bandwidth_fraction 0.685, 10.3 % RMS in log space, with max_efficiency 0.803.
    const auto data = cal::load_ground_truth({std::string(DTSIM_CONFIGS) + "/../calibration/data/gemm.json"});
    std::vector<cal::GemmPoint> shapes;
    for (const auto& s : data.gemms)
        if (!s.best_shape) shapes.insert(shapes.end(), s.rows.begin(), s.rows.end());
    REQUIRE(shapes.size() == 23);
    GpuSpec h100;
    h100.name = "H100-SXM";
    h100.peak_flops[static_cast<std::size_t>(DType::bf16)] = 989.4e12;
    h100.memory_bandwidth = 3.35e12;
    const auto fit = cal::fit_gemm(h100, shapes);
    CHECK(fit.model.overhead_s == doctest::Approx(5.85e-6).epsilon(0.03));
    CHECK(fit.model.bandwidth_fraction == doctest::Approx(0.685).epsilon(0.03));
    CHECK(fit.rms_log == doctest::Approx(0.103).epsilon(0.05));
}

TEST_CASE("a measured curve replaces NCCL's model on the group shape measured, under the bound") {
    // doctest::Approx adds an absolute 1e-5 to its tolerance: relative only, for times in seconds.
    auto rel = [](double x) { return doctest::Approx(x).scale(0); };
    Cluster c;
    c.gpu.name = "gpu";
    c.gpus_per_node = 8;
    c.nodes = 4;
    c.intra_node = Link{"nvlink", 370e9, 292e9, 4.8e-6, 0};
    c.inter_node = Link{"ib", 48e9, 48e9, 5e-6, 0};
    c.base_latency = 20e-6;
    const Cluster none = c;  // no curves: NCCL's model
    const GroupShape node = GroupShape::of(c, iota(8)), half = GroupShape::of(c, iota(4));
    const auto before = collective_cost(c, Collective::all_reduce, 1 * kGiB, node);
    CollectiveFit f{"all_reduce", Algorithm::automatic, 8, 1, 8, 0, {{30e-6, 100e9}, {100e-6, 450e9}}, {"set"}};
    c.intra_node.fits.push_back(f);
    // The group measured: the envelope itself, each line held to the bound (NVLink's 370 GB/s here).
    for (double s : {64 * kKiB, 16 * kMiB, 1 * kGiB}) {
        const double x = 1.75 * s;
        CHECK(collective_cost(c, Collective::all_reduce, s, node).seconds ==
              rel(std::min(30e-6 + x / 100e9, 100e-6 + x / 370e9)));
    }
    CHECK(collective_cost(c, Collective::all_reduce, 1 * kGiB, node).seconds > before.seconds);
    CHECK(find_fit(c, "all_reduce", node) != nullptr);
    // Four ranks: another shape, NCCL's model.
    const double s = 1 * kGiB;
    CHECK(find_fit(c, "all_reduce", half) == nullptr);
    CHECK(collective_cost(c, Collective::all_reduce, s, half).seconds ==
          rel(collective_cost(none, Collective::all_reduce, s, half).seconds));
    // Below the smallest size measured the model stands, held under the curve's time there.
    c.intra_node.fits.front().min_bytes = 1 * kMiB;
    const double at_min = std::min(30e-6 + 1.75 * kMiB / 100e9, 100e-6 + 1.75 * kMiB / 370e9);
    CHECK(collective_cost(c, Collective::all_reduce, 64 * kKiB, node).seconds ==
          rel(std::min(collective_cost(none, Collective::all_reduce, 64 * kKiB, node).seconds, at_min)));
    c.intra_node.fits.front().min_bytes = 0;
    // Across nodes, a curve measured on 2 full nodes stands for 2 full nodes (at most NVLink's 370 x 8/7
    // there), not for one member per node.
    Cluster two = c;
    two.inter_node.fits.push_back(CollectiveFit{"all_reduce", Algorithm::automatic, 16, 2, 8, 0, {{50e-6, 470e9}}, {}});
    const GroupShape full = GroupShape::of(c, iota(16)), sparse = GroupShape::of(c, iota(4, 0, 8));
    CHECK(collective_cost(two, Collective::all_reduce, s, full).seconds ==
          rel(50e-6 + 1.875 * s / (370e9 * 8 / 7)));
    CHECK(collective_cost(two, Collective::all_reduce, s, sparse).seconds ==
          rel(collective_cost(none, Collective::all_reduce, s, sparse).seconds));
    // Across nodes nothing was measured: the model as before.
    const GroupShape across = GroupShape::of(c, iota(16));
    CHECK(collective_cost(c, Collective::all_reduce, s, across).seconds ==
          rel(collective_cost(none, Collective::all_reduce, s, across).seconds));
    // A curve measured with NCCL_ALGO=Ring does not stand for a forced tree or NCCL's choice of all-reduce.
    c.intra_node.fits = {CollectiveFit{"all_reduce", Algorithm::ring, 8, 1, 8, 0, {{1e-6, 1e12}}, {}}};
    CHECK(find_fit(c, "all_reduce", node) == nullptr);
    CHECK(find_fit(c, "all_reduce", node, Algorithm::ring) != nullptr);
    // reduce_scatter's curve stands for all_gather; sendrecv's for p2p.
    c.intra_node.fits = {CollectiveFit{"reduce_scatter", Algorithm::ring, 8, 1, 8, 0, {{10e-6, 350e9}}, {}},
                         CollectiveFit{"sendrecv", Algorithm::automatic, 8, 1, 8, 0, {{8e-6, 195e9}}, {}}};
    CHECK(collective_cost(c, Collective::all_gather, s, node).seconds == rel(10e-6 + 0.875 * s / 350e9));
    CHECK(p2p_cost(c, s, true).seconds == rel(8e-6 + s / 195e9));
}

TEST_CASE("validate's arithmetic on a hand-made set") {
    const auto data = cal::load_ground_truth({data_dir + "/small_allreduce.json"});
    REQUIRE(data.collectives.size() == 1);
    cal::ValidateOptions o;
    o.clusters = {data_dir + "/test-cluster.json"};
    const auto sets = cal::validate(data, o);
    REQUIRE(sets.size() == 1);
    const auto& s = sets[0];
    REQUIRE(s.points.size() == 3);
    // All-reduce on 8 GPUs of test-cluster.json, as collective_cost prices it (NCCL's model: ring LL at
    // 512 KiB and 2 MiB, 15 us + S / (141 x 8/14 GB/s); ring LL128 at 8 MiB, 40.6 us + S / (0.92 x
    // 367.0016 x 8/14 GB/s)), against 100, 110 and 162.5 us measured.
    const Cluster cl = cal::make_cluster(cal::read_cluster_file(data_dir + "/test-cluster.json"), "test-cluster.json");
    const GroupShape g{8, 1, 8, 8};
    double predicted[3];
    const double bytes[3] = {512 * kKiB, 2 * kMiB, 8 * kMiB}, measured[3] = {100, 110, 162.5};
    for (int i = 0; i < 3; ++i) {
        predicted[i] = collective_cost(cl, Collective::all_reduce, bytes[i], g).seconds * 1e6;
        CHECK(s.points[static_cast<std::size_t>(i)].predicted == doctest::Approx(predicted[i]));
    }
    CHECK(predicted[1] == doctest::Approx(15 + 2 * kMiB / (141e9 * 8 / 14) * 1e6));
    CHECK(predicted[2] == doctest::Approx(40.6 + 8 * kMiB / (0.92 * 367.0016e9 * 8 / 14) * 1e6));
    CHECK_FALSE(s.points[0].counted);  // 512 KiB < 1 MiB
    const double e1 = predicted[1] / measured[1] - 1, e2 = predicted[2] / measured[2] - 1;
    CHECK(s.points[1].error() == doctest::Approx(e1));
    CHECK(s.points[2].error() == doctest::Approx(e2));
    CHECK(s.counted == 2);
    CHECK(s.median == doctest::Approx((std::abs(e1) + std::abs(e2)) / 2));
    CHECK(s.max == doctest::Approx(std::max(std::abs(e1), std::abs(e2))));

    // Odd counts take the middle value.
    cal::ValidationSet odd;
    for (double e : {0.1, -0.3, 0.2}) odd.points.push_back({"", 0, 100, 100 * (1 + e), "us", true});
    odd.points.push_back({"", 0, 100, 900, "us", false});  // not counted
    cal::summarize(odd);
    CHECK(odd.median == doctest::Approx(0.2));
    CHECK(odd.max == doctest::Approx(0.3));
}

TEST_CASE("calibrate writes a cluster that predicts its own data and marks it in-sample") {
    // Synthetic measurements made of two lines on 8 GPUs of one node.
    const std::vector<FitLine> truth{{25e-6, 60e9}, {80e-6, 300e9}};
    std::string rows;
    for (double s = 64 * kKiB; s <= 1 * kGiB; s *= 4)
        rows += fmt::format("{}{{\"size_bytes\": {}, \"time_us\": {}}}", rows.empty() ? "" : ",", s,
                            envelope(truth, 1.75 * s) / kMicro);
    const std::string file = write_temp("dtsim_synthetic_allreduce.json", fmt::format(R"({{"datasets": [{{"id": "synthetic",
        "source": "test", "hardware": {{"gpu": "H100 test", "gpus_per_node": 8, "nodes": 1}},
        "collective": "all_reduce", "rows": [{}]}}]}})",
                                                                                      rows));
    const auto data = cal::load_ground_truth({file});
    const auto base = cal::read_cluster_file(data_dir + "/test-cluster.json");
    const auto r = cal::calibrate(base, "test-cluster.json", data);
    const auto& fit = r.cluster["cluster"]["links"]["intra_node"]["fits"]["all_reduce"];
    REQUIRE(fit["lines"].size() == 2);
    CHECK(fit["lines"][0][0].get<double>() == doctest::Approx(25).epsilon(1e-4));
    CHECK(fit["lines"][0][1].get<double>() == doctest::Approx(60).epsilon(1e-4));
    CHECK(fit["lines"][1][0].get<double>() == doctest::Approx(80).epsilon(1e-4));
    CHECK(fit["lines"][1][1].get<double>() == doctest::Approx(300).epsilon(1e-4));
    CHECK(fit["datasets"][0] == "synthetic");

    const std::string out = write_temp("dtsim_calibrated_cluster.json", r.cluster.dump(2));
    cal::ValidateOptions o;
    o.clusters = {out};
    const auto sets = cal::validate(data, o);
    REQUIRE(sets.size() == 1);
    CHECK(sets[0].max < 1e-4);
    CHECK(sets[0].fit.find("in-sample") != std::string::npos);
    CHECK(sets[0].held_counted == 0);  // every point in-sample
    // Held out, there is nothing else to fit: the base config's alpha-beta model, far off.
    o.holdout = true;
    const auto held = cal::validate(data, o);
    CHECK(held[0].fit.find("held out") != std::string::npos);
    CHECK(held[0].held_counted == held[0].counted);
    CHECK(held[0].max > 0.1);
}

TEST_CASE("bad files are rejected with the file, the JSON path and what was found") {
    try {
        (void)cal::load_ground_truth({data_dir + "/bad_time.json"});
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK(e.path == "$.datasets[0].rows[1].time_us");
        CHECK(std::string(e.what()).find("expected a positive number, found \"fast\" (a string)") != std::string::npos);
        CHECK(e.file.find("bad_time.json") != std::string::npos);
    }
    const std::string bad_alg = write_temp("dtsim_bad_alg.json", R"({"datasets": [{"id": "x", "source": "s",
        "hardware": {"gpu": "H100", "gpus_per_node": 8, "nodes": 1}, "collective": "all_reduce",
        "note": "NCCL_ALGO=CollNet", "rows": [{"size_bytes": 1, "time_us": 1}]}]})");
    CHECK_THROWS_WITH_AS(cal::load_ground_truth({bad_alg}),
                         doctest::Contains("NCCL_ALGO=CollNet is not an algorithm the model has"), ConfigError);
    const std::string bad_shape = write_temp("dtsim_bad_shape.json", R"({"max_achievable": {"source": "s",
        "rows": [{"gpu": "H100", "dtype": "bf16", "tflops": 1, "shape": "12x34"}]}})");
    CHECK_THROWS_WITH_AS(cal::load_ground_truth({bad_shape}),
                         doctest::Contains("$.max_achievable.rows[0].shape: expected a shape \"MxNxK\", found \"12x34\""),
                         ConfigError);
    // A curve in a cluster config with a bad line.
    const std::string bad_fit = write_temp("dtsim_bad_fit.json", R"({"cluster": {"name": "x",
        "gpu": {"name": "H100-X", "peak_tflops": {"bf16": 1}, "hbm_GiB": 1, "hbm_TBps": 1},
        "gpus_per_node": 8, "nodes": 1, "links": {"intra_node": {"bandwidth_GBps": 1, "hop_latency_us": 1,
        "fits": {"all_reduce": {"ranks": 8, "lines": [[1, 0]]}}}}}})");
    CHECK_THROWS_WITH_AS(cal::make_cluster(cal::read_cluster_file(bad_fit), bad_fit),
                         doctest::Contains("$.cluster.links.intra_node.fits.all_reduce.lines[0]: expected "
                                           "[latency_us >= 0, bus_bandwidth_GBps > 0], found [1,0]"),
                         ConfigError);
}

TEST_CASE("the harness's GEMM output is read as the published table is") {
    // The layout dtsim-gemm writes (calibration/host/gemm_shapes.cpp gemm_json).
    const std::string file = write_temp("dtsim_harness_gemm.json", R"({"description": "d", "meta": {},
        "max_achievable": {"source": "measured", "rows": [{"gpu": "NVIDIA H100 80GB HBM3", "dtype": "bf16",
            "tflops": 700.5, "shape": "2048x8192x4096"}]},
        "nvidia_h100_80gb_hbm3_bf16_by_shape": {"source": "measured", "gpu": "NVIDIA H100 80GB HBM3", "dtype": "bf16",
            "columns": ["m", "n", "k", "tflops", "time_us", "name", "layout"],
            "rows": [[2048, 12288, 4096, 650.25, 317.1, "qkv", "NT"], [2048, 4096, 4096, 600, 114.5, "proj", "NT"]]}})");
    const auto data = cal::load_ground_truth({file});
    REQUIRE(data.gemms.size() == 2);
    for (const auto& g : data.gemms) {
        REQUIRE_FALSE(g.rows.empty());
        CHECK(cal::same_family(g.rows[0].gpu, "H100"));
        CHECK(g.rows[0].dtype == DType::bf16);
    }
    CHECK(data.gemms[1].rows[1].n == 4096);
    CHECK(data.gemms[1].rows[1].tflops == 600);
}

TEST_CASE("a held-out Megatron row through dtsim::hw::simulate on the shipped A100 cluster") {
    // SC21 Table 1, 18B: 48 heads, hidden 6144, 40 layers, TP 8, 256 GPUs, batch 1024, microbatch 8: 135 TFLOP/s.
    // Not among the rows the shipped fp16 ceiling was fitted to (1.7B, 3.6B, 7.5B): the target is 15 %.
    cal::MegatronRow row;
    row.model = "18B";
    row.heads = 48, row.hidden = 6144, row.layers = 40, row.tp = 8, row.pp = 1, row.gpus = 256;
    row.global_batch = 1024, row.micro_batch = 8, row.tflops_per_gpu = 135;
    row.ddp = "torch";  // run_table_1.sh: DDP=torch, the gradient all-reduce overlaps the backward
    const std::string file = std::string(DTSIM_CONFIGS) + "/clusters/selene-a100.json";
    const auto cluster = cal::read_cluster_file(file);
    const auto& ds = cluster["cluster"]["gpu"]["gemm"]["datasets"];
    CHECK(std::find(ds.begin(), ds.end(), "megatron_a100_sc21:18B") == ds.end());
    const double predicted = cal::predict_megatron(row, cluster, file);
    CHECK(std::abs(predicted / 135 - 1) < 0.15);
    // The config validate builds: Megatron's layout on 32 nodes.
    const auto cfg = parse_config(cal::megatron_config(row, cluster), "row");
    CHECK(cfg.cluster.nodes == 32);
    CHECK(cfg.strategy.dp == 32);
    CHECK(cfg.strategy.recompute == Recompute::full);
    CHECK(cfg.model.spec.dtype == DType::fp16);
    CHECK(cfg.strategy.overlap);
}

TEST_CASE("a held-out interleaved Megatron row (76B) through dtsim::hw::simulate on the shipped A100 cluster") {
    // SC21 Table 1, 76B: 80 heads, hidden 10240, 60 layers, TP 8, PP 4, 1024 GPUs, batch 1792,
    // microbatch 2: 140 TFLOP/s; run_table_1.sh: --num-layers-per-virtual-pipeline-stage 5, DDP local.
    cal::MegatronRow row;
    row.model = "76B";
    row.heads = 80, row.hidden = 10240, row.layers = 60, row.tp = 8, row.pp = 4, row.gpus = 1024;
    row.global_batch = 1792, row.micro_batch = 2, row.tflops_per_gpu = 140;
    row.layers_per_virtual_stage = 5, row.ddp = "local";
    CHECK(row.dp() == 32);
    CHECK(row.microbatches() == 28);
    CHECK(row.chunks() == 3);  // 60 / (4 x 5)
    CHECK(cal::megatron_schedule_label(row) == "interleaved 1F1B v=3");
    const std::string file = std::string(DTSIM_CONFIGS) + "/clusters/selene-a100.json";
    const auto cluster = cal::read_cluster_file(file);
    const auto& ds = cluster["cluster"]["gpu"]["gemm"]["datasets"];
    CHECK(std::find(ds.begin(), ds.end(), "megatron_a100_sc21:76B") == ds.end());
    const auto cfg = parse_config(cal::megatron_config(row, cluster), "row");
    CHECK(cfg.strategy.name == "interleaved");
    CHECK(cfg.strategy.chunks == 3);
    CHECK(cfg.strategy.microbatch_group == 4);
    CHECK_FALSE(cfg.strategy.overlap);
    const double predicted = cal::predict_megatron(row, cluster, file);
    CHECK(std::abs(predicted / 140 - 1) < 0.15);
}

TEST_CASE("Megatron rows: schedule and gradient overlap from the run script's settings") {
    cal::MegatronRow row;
    row.model = "x";
    row.heads = 8, row.hidden = 1024, row.layers = 24, row.tp = 1, row.pp = 4, row.gpus = 8;
    row.global_batch = 16, row.micro_batch = 1;  // dp 2, 8 microbatches
    CHECK(cal::megatron_strategy(row)["name"] == "1f1b");
    CHECK(cal::megatron_schedule_label(row) == "1F1B");
    CHECK(cal::megatron_strategy(row)["overlap"] == false);
    row.ddp = "torch";
    CHECK(cal::megatron_strategy(row)["overlap"] == true);
    row.layers_per_virtual_stage = 3;  // 24 / (4 x 3) = 2 chunks
    const auto s = cal::megatron_strategy(row);
    CHECK(s["name"] == "interleaved");
    CHECK(s["chunks"] == 2);
    CHECK(s["microbatch_group"] == 4);
    row.global_batch = 12;  // 6 microbatches: SC21-era Megatron needs a multiple of pp
    CHECK_THROWS_WITH_AS(cal::megatron_strategy(row, "t.json"),
                         doctest::Contains("6 microbatches are not a multiple of pp = 4"), ConfigError);
    row.global_batch = 16;
    row.layers_per_virtual_stage = 5;  // 24 % 20
    CHECK_THROWS_WITH_AS(cal::megatron_strategy(row, "t.json"), doctest::Contains("not a multiple of pp x layers"),
                         ConfigError);
    row.layers_per_virtual_stage = 6;  // one chunk
    CHECK_THROWS_WITH_AS(cal::megatron_strategy(row, "t.json"), doctest::Contains("single model chunk"), ConfigError);
    row.pp = 1, row.layers_per_virtual_stage = 0;
    CHECK(cal::megatron_schedule_label(row) == "no pipeline");
}

TEST_CASE("the shipped Megatron table: each row's schedule as run_table_1.sh ran it") {
    const auto data = cal::load_ground_truth({std::string(DTSIM_CONFIGS) + "/../calibration/data/megatron_a100_sc21.json"});
    REQUIRE(data.megatron.size() == 1);
    std::map<std::string, std::string> label;
    for (const auto& r : data.megatron[0].rows) {
        label[r.model] = cal::megatron_schedule_label(r);
        CHECK(r.ddp == (r.pp == 1 ? "torch" : "local"));
        (void)cal::megatron_strategy(r);  // the interleaved rows meet Megatron's constraints
    }
    CHECK(label["18B"] == "no pipeline");
    CHECK(label["39B"] == "1F1B");
    CHECK(label["76B"] == "interleaved 1F1B v=3");
    CHECK(label["145B"] == "interleaved 1F1B v=2");
    CHECK(label["310B"] == "interleaved 1F1B v=2");
    CHECK(label["530B"] == "interleaved 1F1B v=3");
    CHECK(label["1T"] == "1F1B");
}

TEST_CASE("gpu families and Megatron's FLOP count") {
    CHECK(cal::gpu_family("H100 SXM 80GB") == "H100");
    CHECK(cal::gpu_family("H100 (p5.48xlarge)") == "H100");
    CHECK(cal::gpu_family("A100-SXM-80GB") == "A100");
    CHECK(cal::gpu_family("NVIDIA A100") == "A100");
    CHECK(cal::same_family("h100", "H100"));
    CHECK(cal::gpu_family("gpu") == "");
    // SC21 eq. 3 for GPT-3 175B, batch 1536: 4.51e18 FLOPs per iteration; Megatron-LM's README: about
    // 32 s per iteration on 1024 A100s at 138 TFLOP/s per GPU (megatron_a100_sc21.json "also").
    const double f = cal::megatron_flops(1536, 2048, 96, 12288, 51200);
    CHECK(f == doctest::Approx(4.511e18).epsilon(0.001));
    CHECK(f / 1024 / 32 == doctest::Approx(138e12).epsilon(0.01));
}

TEST_CASE("torchtitan's complex rotary embedding: its bytes are the medians of its timed kernels at the H100's rate") {
    // kComplexRopeForwardBytes and kComplexRopeBackwardBytes, recomputed from their source: the
    // "rotary_torchtitan" rows of the H100 kernel file, each time over the elements at the shipped
    // H100 cluster's memory_seconds rate.
    std::ifstream in(std::string(DTSIM_CONFIGS) + "/../calibration/data/h100_dtsim_torch_kernels.json");
    const auto file = nlohmann::json::parse(in);
    const auto& section = file.at("elementwise");
    std::map<std::string, std::size_t> at;
    for (std::size_t i = 0; i < section.at("columns").size(); ++i) at[section.at("columns")[i].get<std::string>()] = i;
    const GpuSpec gpu = cal::make_cluster(cal::read_cluster_file(std::string(DTSIM_CONFIGS) + "/clusters/dgx-h100.json"),
                                          "dgx-h100.json")
                            .gpu;
    const double rate = gpu.memory_seconds(1.0);  // seconds a byte
    std::vector<double> forward, backward;
    for (const auto& r : section.at("rows")) {
        if (r[at["kernel"]] != "rotary_torchtitan") continue;
        const double elements = r[at["tokens"]].get<double>() * r[at["width"]].get<double>();
        const double fwd = r[at["fwd_us"]].get<double>() * 1e-6, both = r[at["fwd_bwd_us"]].get<double>() * 1e-6;
        forward.push_back(fwd / rate / elements);
        backward.push_back((both - fwd) / rate / elements);
    }
    REQUIRE(forward.size() == 8);
    const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    };
    // The constants are the medians rounded to 0.01 byte, as dtsim calibrate fits them.
    CHECK(std::abs(median(forward) - kComplexRopeForwardBytes) <= 0.005);
    CHECK(std::abs(median(backward) - kComplexRopeBackwardBytes) <= 0.005);
    const auto data = cal::load_ground_truth({std::string(DTSIM_CONFIGS) + "/../calibration/data/h100_dtsim_torch_kernels.json"});
    REQUIRE(data.eager.size() == 1);
    const EagerKernelBytes fitted = cal::fit_eager_kernels({&data.eager[0]}, 1 / rate, EagerKernelBytes{});
    CHECK(fitted.rope.forward == kComplexRopeForwardBytes);
    CHECK(fitted.rope.backward == kComplexRopeBackwardBytes);
}

TEST_CASE("the shipped DGX B200 cluster is what calibrate writes from the published B200 kernels") {
    // docs/calibration.md's command: the GEMM tables (the best-shape burst held out) and cuDNN's
    // and PyTorch's FlashAttention-2 times, on the shipped config as base; the figures and the
    // sources come back unchanged.
    const std::string dir = std::string(DTSIM_CONFIGS) + "/../calibration/data/";
    const auto data = cal::load_ground_truth({dir + "b200_gemm_published.json", dir + "b200_cudnn_frontend_attention.json"});
    nlohmann::json shipped;
    std::ifstream(std::string(DTSIM_CONFIGS) + "/clusters/dgx-b200.json") >> shipped;
    cal::CalibrateOptions o;
    o.exclude = {"b200_gemm_published:max_achievable"};
    const auto r = cal::calibrate(shipped, "dgx-b200.json", data, o);
    CHECK(r.cluster == shipped);
    const GpuSpec b200 = cal::make_cluster(shipped, "dgx-b200.json").gpu;
    CHECK(b200.attention.find("cudnn", 128) != nullptr);
    CHECK(b200.attention.find("flash2", 128) != nullptr);
}

TEST_CASE("the shipped GB200 NVL72 cluster: attention calibrated from GB200 kernels, GEMMs the B200's at the bursts' ratio") {
    // docs/calibration.md's command: the GB200 attention times on the shipped config as base; the
    // GEMM curve is no fit of calibrate's, and comes back unchanged.
    const std::string configs(DTSIM_CONFIGS);
    const auto data = cal::load_ground_truth({configs + "/../calibration/data/gb200_cudnn_frontend_attention.json"});
    nlohmann::json shipped, b200;
    std::ifstream(configs + "/clusters/gb200-nvl72.json") >> shipped;
    std::ifstream(configs + "/clusters/dgx-b200.json") >> b200;
    const auto r = cal::calibrate(shipped, "gb200-nvl72.json", data, {});
    CHECK(r.cluster == shipped);
    const Cluster gb = cal::make_cluster(shipped, "gb200-nvl72.json");
    const Cluster b = cal::make_cluster(b200, "dgx-b200.json");
    CHECK(gb.gpus_per_node == 72);
    CHECK(gb.gpu.attention.find("cudnn", 128) != nullptr);
    CHECK(gb.gpu.attention.find("flash2", 128) != nullptr);
    // The ceilings: the B200's in TFLOP/s times the ratio of the two GPUs' best shapes in
    // stas00/ml-engineering's MAMF table, as the published data files hold them.
    const auto bursts = cal::load_ground_truth({configs + "/../calibration/data/gb200_gemm_published.json",
                                                configs + "/../calibration/data/b200_gemm_published.json"});
    auto best = [&](const std::string& gpu, DType dtype) {
        for (const auto& g : bursts.gemms)
            if (g.best_shape)
                for (const auto& row : g.rows)
                    if (row.gpu == gpu && row.dtype == dtype) return row.tflops;
        FAIL("no best shape of " << gpu);
        return 0.0;
    };
    auto ceiling = [](const Cluster& c, DType d) { return c.gpu.gemm.efficiency(d) * c.gpu.peak(d); };
    for (DType d : {DType::bf16, DType::fp8}) {
        CAPTURE(dtype_name(d));
        CHECK(ceiling(gb, d) ==
              doctest::Approx(ceiling(b, d) * best("GB200", d) / best("B200", d)).epsilon(1e-4));
    }
    // NVLink5 as on the B200 (ring, NVLS, point to point).
    CHECK(gb.intra_node.bandwidth == b.intra_node.bandwidth);
    CHECK(gb.intra_node.nvls_bandwidth == b.intra_node.nvls_bandwidth);
    CHECK(gb.intra_node.p2p_bandwidth == b.intra_node.p2p_bandwidth);
}

TEST_CASE("a kernel file's memory-bound kernels: fitted into gpu.eager_kernels, validated, and wrong rows named") {
    const std::string file = std::string(DTSIM_CONFIGS) + "/../calibration/data/h200_dtsim_torch_kernels.json";
    const auto data = cal::load_ground_truth({file});
    REQUIRE(data.eager.size() == 1);
    const cal::EagerKernelSet& s = data.eager[0];
    CHECK(s.gpu == "NVIDIA H200");
    // Calibrated into the H200 cluster with its table removed: the shipped one comes back, named.
    nlohmann::json shipped, base;
    std::ifstream(std::string(DTSIM_CONFIGS) + "/clusters/dgx-h200.json") >> shipped;
    base = shipped;
    base["cluster"]["gpu"].erase("eager_kernels");
    const auto r = cal::calibrate(base, "dgx-h200.json", data, {});
    CHECK(r.cluster["cluster"]["gpu"]["eager_kernels"] == shipped["cluster"]["gpu"]["eager_kernels"]);
    int lines = 0;
    for (const auto& src : r.cluster["cluster"]["source"]) lines += src.get<std::string>().starts_with("gpu.eager_kernels");
    CHECK(lines == 1);
    CHECK(std::any_of(r.log.begin(), r.log.end(), [](const std::string& l) {
        return l.starts_with("eager kernels: bytes an element at 4144.8 GB/s, norm 7 / 16.35") &&
               l.find("from 47 timed rows of h200_dtsim_torch_kernels:eager_kernels") != std::string::npos;
    }));
    // At another streaming rate the same times are other bytes: twice the rate, twice the bytes.
    const GpuSpec h200 = cal::make_cluster(shipped, "dgx-h200.json").gpu;
    const EagerKernelBytes twice = cal::fit_eager_kernels({&s}, 2 / h200.memory_seconds(1.0), EagerKernelBytes{});
    CHECK(twice.norm.backward ==
          doctest::Approx(2 * shipped["cluster"]["gpu"]["eager_kernels"]["norm"]["backward"].get<double>()).epsilon(0.001));
    // A file with the optimizer's rows alone refits Adam; the other kinds, and their set, stay.
    nlohmann::json only_adam;
    std::ifstream(file) >> only_adam;
    for (const char* k : {"attention", "gemm", "launch", "elementwise", "cross_entropy"}) only_adam.erase(k);
    const auto adam_data = cal::load_ground_truth({write_temp("dtsim_only_adam.json", only_adam.dump())});
    REQUIRE(adam_data.eager.size() == 1);
    CHECK(adam_data.kernels.empty());
    const auto adam = cal::calibrate(shipped, "dgx-h200.json", adam_data, {});
    const auto& ek = adam.cluster["cluster"]["gpu"]["eager_kernels"];
    CHECK(ek["adam"] == shipped["cluster"]["gpu"]["eager_kernels"]["adam"]);
    CHECK(ek["norm"] == shipped["cluster"]["gpu"]["eager_kernels"]["norm"]);
    CHECK(ek["datasets"] == nlohmann::json::array({"dtsim_only_adam:eager_kernels", "h200_dtsim_torch_kernels:eager_kernels"}));
    CHECK(adam.log.back().ends_with("kept from the base: norm, dropout, rope, loss"));
    // Excluded, nothing of it is fitted and the base's table stays.
    cal::CalibrateOptions o;
    o.exclude = {"h200_dtsim_torch_kernels:eager_kernels"};
    const auto without = cal::calibrate(shipped, "dgx-h200.json", data, o);
    CHECK(without.cluster["cluster"]["gpu"]["eager_kernels"] == shipped["cluster"]["gpu"]["eager_kernels"]);
    // Validated: the timed kinds in-sample, the counted ones (residual adds, GeLU, SwiGLU) held out.
    cal::ValidateOptions vo;
    vo.data_dir = std::string(DTSIM_CONFIGS) + "/..";
    std::vector<cal::ValidationSet> sets = cal::validate(data, vo);
    const auto v = std::find_if(sets.begin(), sets.end(), [](const auto& x) { return x.kind == "eager"; });
    REQUIRE(v != sets.end());
    CHECK(v->fit.starts_with("in-sample where timed"));
    int in_sample = 0, held = 0;
    for (const auto& p : v->points) {
        const bool counted_kind = p.label.starts_with("residual_add") || p.label.starts_with("gelu_tanh") || p.label.starts_with("swiglu");
        CHECK(p.in_sample == !counted_kind);
        (p.in_sample ? in_sample : held) += 1;
    }
    CHECK(held == 40);  // 8 residual adds (forward only), 8 GeLU and 8 SwiGLU each way
    CHECK(in_sample == v->counted - held);
    CHECK(v->held_median < 0.06);
    // With --holdout each timed row is priced by the medians of its kind's other rows: nothing in-sample,
    // the counted kinds as before, and a timed row's price moves (by at most the step between two medians).
    vo.holdout = true;
    const std::vector<cal::ValidationSet> held_sets = cal::validate(data, vo);
    const auto h = std::find_if(held_sets.begin(), held_sets.end(), [](const auto& x) { return x.kind == "eager"; });
    REQUIRE(h != held_sets.end());
    REQUIRE(h->points.size() == v->points.size());
    CHECK(h->fit.starts_with("held out: each timed row"));
    int moved = 0;
    for (std::size_t i = 0; i < h->points.size(); ++i) {
        CHECK_FALSE(h->points[i].in_sample);
        if (!v->points[i].in_sample) CHECK(h->points[i].predicted == v->points[i].predicted);
        moved += h->points[i].predicted != v->points[i].predicted;
    }
    CHECK(moved > 0);
    CHECK(h->median > v->median);
    // Every row names its kernel and size; a forward timed as a step for Adam.
    CHECK(std::any_of(v->points.begin(), v->points.end(), [](const auto& p) { return p.label == "adamw fused 1e+08 parameters step"; }));

    // Wrong rows are named at their JSON path.
    nlohmann::json doc;
    std::ifstream(file) >> doc;
    const auto error = [&](const nlohmann::json& d) -> std::string {
        try {
            cal::load_ground_truth({write_temp("dtsim_eager_bad.json", d.dump())});
        } catch (const ConfigError& e) {
            return e.what();
        }
        return "no error";
    };
    nlohmann::json bad = doc;
    bad["elementwise"]["rows"][0][0] = "rms_nrom";
    CHECK(error(bad).find("$.elementwise.rows[0][0]: expected one of") != std::string::npos);
    bad = doc;
    bad["elementwise"]["rows"][0][4] = 1.0;  // fwd_bwd_us under fwd_us
    CHECK(error(bad).find("$.elementwise.rows[0]: fwd_bwd_us (1) must exceed fwd_us") != std::string::npos);
    bad = doc;
    bad["optimizer"]["rows"][0][2] = "bf16";
    CHECK(error(bad).find("$.optimizer.rows[0][2]: expected") != std::string::npos);
}

TEST_CASE("every shipped data file loads; only the datasheets and the documentation-only files are skipped") {
    const auto files = cal::shipped_data_files(std::string(DTSIM_CONFIGS) + "/..");
    REQUIRE(files.size() >= 4);
    const auto data = cal::load_ground_truth(files);
    CHECK_FALSE(data.collectives.empty());
    // gemm.json's two sections; per dtsim-gemm file, its best shape and its table(s) by shape; per
    // kernel file (H100, H200), a bf16 and an fp8 table; the published A100 tables (square, skinny);
    // the published B200 best shapes and its bf16 and fp8 tables; the GB200 best shapes and
    // Azure's GB200 fp8 table.
    int best = 0, by_shape = 0;
    for (const auto& g : data.gemms) (g.best_shape ? best : by_shape) += 1;
    CHECK(best == 1 + 4 + 1 + 1);
    CHECK(by_shape == 1 + 5 + 2 * 2 + 2 + 1 + 2 + 1);  // and the published 500 W H100 table
    CHECK(data.megatron.size() == 1);
    // The published FlashAttention charts (A100, H100: the causal FlashAttention 1 and 2 rows, 12
    // each), the kernel files of calibration/pytorch/dtsim_kernels.py (H100, H200), the
    // FlashAttention-3 paper's forward chart (its causal FlashAttention-2 and cuDNN rows, 18 each)
    // and the cuDNN frontend's H200 tables (2024: 5 causal shapes of each backend; 2026: 5 of
    // cuDNN; their passes apart) and B200 and GB200 tables (9 causal lengths of cuDNN and of PyTorch's FlashAttention-2), by file name.
    const std::pair<std::string_view, std::size_t> attention_sets[] = {
        {"a100_attention_published:attention", 24},          {"b200_cudnn_frontend_attention:attention", 18},
        {"gb200_cudnn_frontend_attention:attention", 18},
        {"h100_attention_published:attention", 24},          {"h100_dtsim_torch_kernels:attention", 60},
        {"h100_flash3_paper_attention:attention", 36},       {"h200_cudnn_frontend_2024_05_attention:attention", 10},
        {"h200_cudnn_frontend_2024_09_attention:attention", 10}, {"h200_cudnn_frontend_2026_03_attention:attention", 5}};
    REQUIRE(data.kernels.size() == std::size(attention_sets) + 1);
    for (std::size_t i = 0; i < std::size(attention_sets); ++i) {
        CHECK(data.kernels[i].id == attention_sets[i].first);
        CHECK(data.kernels[i].attention.size() == attention_sets[i].second);
    }
    CHECK(data.kernels[9].gpu == "NVIDIA H200");
    // Their memory-bound kernels: 56 element-wise rows, 12 of the loss, 3 of fused AdamW each.
    REQUIRE(data.eager.size() == 2);
    CHECK(data.eager[0].id == "h100_dtsim_torch_kernels:eager_kernels");
    CHECK(data.eager[1].id == "h200_dtsim_torch_kernels:eager_kernels");
    for (const auto& e : data.eager) CHECK(e.rows.size() == 56 + 12 + 3);
    // The end-to-end runs: 16 sets on A100 and H100, the 4 on B200, the 6 on GB200 and the 14 of DGX
    // Cloud's recipes, then the harness's one-GPU steps (H100, H200); each row dtsim cannot express
    // yet is a line of data.skipped.
    REQUIRE(data.end_to_end.size() == 42);
    CHECK(std::count_if(data.end_to_end.begin(), data.end_to_end.end(), [](const auto& s) { return s.harness(); }) == 2);
    CHECK(data.end_to_end[40].id == "h100_dtsim_torch_steps");
    CHECK(data.end_to_end[40].rows.size() == 9);
    CHECK(data.end_to_end[41].id == "h200_dtsim_torch_steps");
    CHECK(data.end_to_end[41].rows.size() == 4);
    std::size_t rows_skipped = 0;
    // The harness's blocks: their times (10 rows) and what they keep (16 rows).
    REQUIRE(data.layers.size() == 2);
    CHECK(data.layers[0].id == "h100_dtsim_torch_layers:layers");
    CHECK(data.layers[0].rows.size() == 10);
    CHECK_FALSE(data.layers[0].memory);
    CHECK(data.layers[1].id == "h100_dtsim_torch_memory:memory");
    CHECK(data.layers[1].rows.size() == 16);
    CHECK(data.layers[1].memory);
    // Not predicted (yet): the datasheets, the bandwidth sweeps, compiled blocks, the output
    // layer's memory and kernels beside held SMs.
    std::vector<std::string> skipped;
    for (const auto& line : data.skipped) {
        if (line.find(": not expressible yet: ") != std::string::npos) {
            ++rows_skipped;
            continue;
        }
        skipped.push_back(std::filesystem::path(line.substr(0, line.find(':'))).filename().string());
    }
    CHECK(rows_skipped == 0);  // every published row runs
    CHECK(skipped == std::vector<std::string>{"a100_membw_published.json", "gpus.json", "h100_dtsim_torch_compile.json",
                                              "h100_dtsim_torch_output_layer.json", "h200_dtsim_sustained.json"});
}

namespace {
// `data` validated on the shipped clusters, one set expected.
cal::ValidationSet validated_alone(const cal::GroundTruth& data) {
    cal::ValidateOptions o;
    o.data_dir = std::string(DTSIM_CONFIGS) + "/..";
    auto v = cal::validate(data, o);
    REQUIRE(v.size() == 1);
    return v[0];
}
}  // namespace

TEST_CASE("dtsim-membw's bandwidth file: read, fitted into gpu.stream_fraction, and validated against it") {
    const auto data = cal::load_ground_truth({std::string(DTSIM_CONFIGS) + "/../calibration/data/h100_dtsim_membw.json"});
    REQUIRE(data.streams.size() == 1);
    const cal::StreamSet& s = data.streams[0];
    CHECK(s.id == "h100_dtsim_membw");
    CHECK(s.rows.size() == 26);
    CHECK(cal::data_set_ids(data) == std::vector<std::string>{"h100_dtsim_membw"});
    // The median of the 14 rows with arrays of 64 MiB and more: 2,892.79 GB/s of 3.35 TB/s.
    CHECK(cal::stream_fraction(s, 3.35e12) == doctest::Approx(2892.795 / 3350).epsilon(1e-5));
    cal::StreamSet small = s;
    std::erase_if(small.rows, [](const cal::StreamPoint& p) { return p.array_bytes >= cal::kStreamMinArrayBytes; });
    CHECK(cal::stream_fraction(small, 3.35e12) == 0);
    // Calibrated into a cluster of its family, as written to four digits, with the set named.
    nlohmann::json base;
    std::ifstream(std::string(DTSIM_CONFIGS) + "/clusters/dgx-h100.json") >> base;
    base["cluster"]["gpu"]["stream_fraction"] = 0.5;
    base["cluster"]["gpu"].erase("stream_datasets");
    const auto r = cal::calibrate(base, "dgx-h100.json", data, {});
    const auto& gpu = r.cluster["cluster"]["gpu"];
    CHECK(gpu["stream_fraction"].get<double>() == 0.8635);
    CHECK(gpu["stream_datasets"] == nlohmann::json::array({"h100_dtsim_membw"}));
    CHECK(r.fitted == 1);
    int lines = 0;
    for (const auto& src : r.cluster["cluster"]["source"]) lines += src.get<std::string>().starts_with("gpu.stream_fraction");
    CHECK(lines == 1);
    CHECK(r.log.end()[-2].find("stream fraction: 0.8635 of 3.35 TB/s (median 2892.8 GB/s), from 14 rows") != std::string::npos);
    // The base's timed kernel bytes were bytes at its rate (0.5 of HBM): the same times at the
    // fitted rate are 0.8635 / 0.5 of them, and they keep their sets.
    CHECK(r.log.back().starts_with("eager kernels: the base's table moved to the streaming rate fitted here"));
    CHECK(gpu["eager_kernels"]["norm"]["forward"].get<double>() ==
          doctest::Approx(kNormForwardBytes * kStreamFraction / 0.5).epsilon(0.001));
    CHECK(gpu["eager_kernels"]["adam"].get<double>() == doctest::Approx(kAdamKernelBytes * kStreamFraction / 0.5).epsilon(0.005));
    CHECK(gpu["eager_kernels"]["datasets"] == base["cluster"]["gpu"]["eager_kernels"]["datasets"]);
    // With the kernel file in the same run, its rows are priced at the fitted rate: the shipped table.
    const auto kernels = cal::load_ground_truth(
        {std::string(DTSIM_CONFIGS) + "/../calibration/data/h100_dtsim_membw.json",
         std::string(DTSIM_CONFIGS) + "/../calibration/data/h100_dtsim_torch_kernels.json"});
    cal::CalibrateOptions eager_only;
    eager_only.only = {"h100_dtsim_membw", "h100_dtsim_torch_kernels:eager_kernels"};
    const auto both = cal::calibrate(base, "dgx-h100.json", kernels, eager_only);
    nlohmann::json shipped;
    std::ifstream(std::string(DTSIM_CONFIGS) + "/clusters/dgx-h100.json") >> shipped;
    CHECK(both.cluster["cluster"]["gpu"]["eager_kernels"] == shipped["cluster"]["gpu"]["eager_kernels"]);
    // A cluster of another family fits nothing from it.
    nlohmann::json a100;
    std::ifstream(std::string(DTSIM_CONFIGS) + "/clusters/selene-a100.json") >> a100;
    CHECK_THROWS_AS(cal::calibrate(a100, "selene-a100.json", data, {}), std::invalid_argument);
    // Validated on the shipped H100 cluster, in-sample: the 14 large rows counted against 2.89 TB/s.
    const cal::ValidationSet v = validated_alone(data);
    CHECK(v.kind == "stream");
    CHECK(v.counted == 14);
    CHECK(v.fit.starts_with("in-sample"));
    CHECK(v.points[0].predicted == doctest::Approx(3350 * 0.8635));
    CHECK(v.median < 0.02);
}

namespace {
// A dtsim-membw file of `gpu` with one copy row of 64 MiB per bandwidth given (GB/s), and a 1 MiB row.
std::string membw_file(const std::string& name, const std::string& gpu, const std::vector<double>& gbps) {
    std::string rows = R"({"kernel": "copy", "bytes_per_array": 1048576, "GBps": 500})";
    for (double g : gbps) rows += fmt::format(R"(, {{"kernel": "copy", "bytes_per_array": 67108864, "GBps": {}}})", g);
    return write_temp(name, fmt::format(R"({{"memory_bandwidth": {{"gpu": "{}", "rows": [{}]}}}})", gpu, rows));
}

nlohmann::json shipped_cluster(const std::string& name) {
    nlohmann::json doc;
    std::ifstream(std::string(DTSIM_CONFIGS) + "/clusters/" + name) >> doc;
    return doc;
}

int stream_source_lines(const nlohmann::json& cluster, const std::string& text) {
    int n = 0;
    for (const auto& src : cluster["cluster"]["source"]) {
        const std::string line = src.get<std::string>();
        n += line.starts_with("gpu.stream_fraction") && line.find(text) != std::string::npos;
    }
    return n;
}
}  // namespace

TEST_CASE("the streaming fraction's fit: pooled sets, --only, provenance, and what it refuses") {
    const auto two = cal::load_ground_truth({membw_file("dtsim_h200_a.json", "NVIDIA H200", {4000, 4100}),
                                             membw_file("dtsim_h200_b.json", "NVIDIA H200", {4200})});
    // Pooled: the median of 4,000, 4,100 and 4,200 GB/s over the H200's 4.8 TB/s, to four digits.
    const auto both = cal::calibrate(shipped_cluster("dgx-h200.json"), "dgx-h200.json", two, {});
    CHECK(both.cluster["cluster"]["gpu"]["stream_fraction"].get<double>() == 0.8542);
    CHECK(both.cluster["cluster"]["gpu"]["stream_datasets"] ==
          nlohmann::json::array({"dtsim_h200_a", "dtsim_h200_b"}));
    // The H200 cluster's hand-written line (the H100's fraction carried) gives way to the fit's.
    CHECK(stream_source_lines(shipped_cluster("dgx-h200.json"), "the H100's") == 1);
    CHECK(stream_source_lines(both.cluster, "the H100's") == 0);
    CHECK(stream_source_lines(both.cluster, "dtsim calibrate on dtsim_h200_a, dtsim_h200_b") == 1);
    cal::CalibrateOptions only;
    only.only = {"dtsim_h200_b"};
    CHECK(cal::calibrate(shipped_cluster("dgx-h200.json"), "dgx-h200.json", two, only)
              .cluster["cluster"]["gpu"]["stream_fraction"]
              .get<double>() == 0.875);
    // A base fitted before keeps its sets named when this calibration fits other things only.
    nlohmann::json base = shipped_cluster("dgx-h100.json");
    const auto gemm = cal::load_ground_truth({std::string(DTSIM_CONFIGS) + "/../calibration/data/gemm.json"});
    cal::CalibrateOptions some;
    some.only = {"gemm:h100_bf16_by_shape"};
    const auto other = cal::calibrate(base, "dgx-h100.json", gemm, some);
    CHECK(other.cluster["cluster"]["gpu"]["stream_datasets"] == nlohmann::json::array({"h100_dtsim_membw"}));
    CHECK(stream_source_lines(other.cluster, "dtsim calibrate on h100_dtsim_membw") == 1);
    // Faster than the datasheet's HBM: the base's hbm_TBps is named.
    const auto fast = cal::load_ground_truth({membw_file("dtsim_h200_fast.json", "NVIDIA H200", {5000})});
    try {
        (void)cal::calibrate(shipped_cluster("dgx-h200.json"), "dgx-h200.json", fast, {});
        FAIL("no error");
    } catch (const ConfigError& e) {
        const std::string what = e.what();
        CHECK(what.find("dgx-h200.json: $.cluster.gpu.hbm_TBps") != std::string::npos);
        CHECK(what.find("1.0417 of this HBM bandwidth (4.8 TB/s)") != std::string::npos);
    }
    // No row past the L2: skipped, and with nothing else to fit, nothing is fitted.
    const auto small = cal::load_ground_truth({membw_file("dtsim_h200_small.json", "NVIDIA H200", {})});
    try {
        (void)cal::calibrate(shipped_cluster("dgx-h200.json"), "dgx-h200.json", small, {});
        FAIL("no error");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("skipped dtsim_h200_small: no row with arrays of 64 MiB or more") !=
              std::string::npos);
    }
}

TEST_CASE("calibrate's source list: the base's lines stay but those about a parameter it refits") {
    const nlohmann::json base = shipped_cluster("dgx-h100.json");
    std::vector<std::string> before;
    for (const auto& src : base["cluster"]["source"]) before.push_back(src.get<std::string>());
    const auto refit = [&](const std::string& file, const std::vector<std::string>& only) {
        cal::CalibrateOptions o;
        o.only = only;
        const auto r = cal::calibrate(base, "dgx-h100.json",
                                      cal::load_ground_truth({std::string(DTSIM_CONFIGS) + "/../calibration/data/" + file}), o);
        std::vector<std::string> after;
        for (const auto& src : r.cluster["cluster"]["source"]) after.push_back(src.get<std::string>());
        return after;
    };
    // Each shipped line about a fitted parameter, whole: one of them is replaced at a time.
    const auto expect = [&](const std::string& key, const std::string& line) {
        std::vector<std::string> want;
        int replaced = 0;
        for (const auto& l : before) {
            if (l.starts_with(key + ":") || l.starts_with(key + " ")) ++replaced;
            else want.push_back(l);
        }
        CHECK(replaced == 1);
        want.push_back(line);
        return want;
    };
    CHECK(refit("h100_dtsim_membw.json", {}) ==
          expect("gpu.stream_fraction", "gpu.stream_fraction: dtsim calibrate on h100_dtsim_membw"));
    // One curve of four: the other curves', the attention's and the power law's lines are the base's.
    CHECK(refit("nccl_tests.json", {"h100x8-nvls-allreduce"}) ==
          expect("links.intra_node.fits.all_reduce", "links.intra_node.fits.all_reduce: dtsim calibrate on h100x8-nvls-allreduce"));
    const auto attention = refit("h100_attention_published.json", {});
    CHECK(std::count_if(attention.begin(), attention.end(),
                        [](const std::string& l) { return l.starts_with("gpu.attention:"); }) == 1);
    CHECK(std::find(attention.begin(), attention.end(),
                    "gpu.attention: dtsim calibrate on h100_attention_published:attention, "
                    "h100_dtsim_torch_kernels:attention") != attention.end());
    // A key is not about a longer one: refitting the inter-node all-reduce keeps the ring's line.
    const auto inter = refit("nccl_tests.json", {"h100x16-2node-ib400-allreduce", "h100x16-2node-ib400-allreduce-b"});
    CHECK(std::count_if(inter.begin(), inter.end(), [](const std::string& l) {
              return l == "links.inter_node.fits.all_reduce@ring: dtsim calibrate on h100x16-2node-ib400-allreduce-ring";
          }) == 1);
    // A table moved to a refitted streaming rate is another table: its line is the fit's, not the
    // base's (which names the rate it was at).
    const auto h200 = cal::calibrate(shipped_cluster("dgx-h200.json"), "dgx-h200.json",
                                     cal::load_ground_truth({membw_file("dtsim_h200_rate.json", "NVIDIA H200", {4100})}), {});
    std::vector<std::string> eager;
    for (const auto& src : h200.cluster["cluster"]["source"])
        if (src.get<std::string>().starts_with("gpu.eager_kernels")) eager.push_back(src.get<std::string>());
    CHECK(eager == std::vector<std::string>{"gpu.eager_kernels: dtsim calibrate on h200_dtsim_torch_kernels:eager_kernels"});
    // What the shipped clusters say about their GEMM fits starts with the key a refit replaces.
    for (const char* name : {"dgx-h100.json", "dgx-h200.json", "h100-roce.json", "h200-roce.json", "p5-h100-efa.json",
                             "selene-a100.json"}) {
        const nlohmann::json cluster = shipped_cluster(name);
        REQUIRE(cluster["cluster"]["source"].size() > 3);
        for (const auto& src : cluster["cluster"]["source"]) {
            CAPTURE(name);
            CHECK_FALSE(src.get<std::string>().starts_with("gemm"));
        }
    }
}

TEST_CASE("a bandwidth set is held out on a cluster not fitted to it, and a GPU without a cluster is named") {
    const auto data = cal::load_ground_truth({membw_file("dtsim_h100_other.json", "NVIDIA H100 80GB HBM3", {2800, 2900})});
    const cal::ValidationSet v = validated_alone(data);
    CHECK(v.fit == "held out");
    CHECK(v.counted == 2);
    CHECK(v.points.size() == 3);
    CHECK_FALSE(v.points[0].counted);  // the 1 MiB row
    const auto odd = cal::load_ground_truth({membw_file("dtsim_h800.json", "NVIDIA H800", {2800})});
    try {
        (void)validated_alone(odd);
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK(std::string(e.what()).find("$.memory_bandwidth.gpu: no cluster config for GPU family \"H800\"") !=
              std::string::npos);
    }
}

TEST_CASE("a bandwidth file that is wrong says where") {
    const auto error = [](const std::string& text) -> std::string {
        try {
            cal::load_ground_truth({write_temp("dtsim_bad_membw.json", text)});
        } catch (const ConfigError& e) {
            return e.what();
        }
        return "no error";
    };
    const std::string row = R"({"kernel": "copy", "bytes_per_array": 67108864, "GBps": 2800})";
    CHECK(error(R"({"memory_bandwidth": {"gpu": "NVIDIA H100 80GB HBM3", "rows": [)" + row + "]}}") == "no error");
    CHECK(error(R"({"memory_bandwidth": {"gpu": "NVIDIA H100 80GB HBM3", "rows": [)" + row +
                R"(, {"kernel": "copy", "bytes_per_array": 67108864, "GBps": -1}]}})")
              .find("$.memory_bandwidth.rows[1].GBps") != std::string::npos);
    CHECK(error(R"({"memory_bandwidth": {"gpu": "NVIDIA H100 80GB HBM3", "rows": [{"kernel": "scale", "bytes_per_array": 1, "GBps": 1}]}})")
              .find("$.memory_bandwidth.rows[0].kernel") != std::string::npos);
    CHECK(error(R"({"memory_bandwidth": {"gpu": "some gpu", "rows": [)" + row + "]}}").find("$.memory_bandwidth.gpu") !=
          std::string::npos);
    CHECK(error(R"({"memory_bandwidth": {"gpu": "NVIDIA H100 80GB HBM3", "rows": []}})").find("$.memory_bandwidth.rows") !=
          std::string::npos);
    CHECK(error(R"({"memory_bandwith": {}})").find("did you mean \"memory_bandwidth\"") != std::string::npos);
}

TEST_CASE("the harness's collective sweep is read as the published tables are") {
    // The layout dtsim-collectives writes (calibration/host/sweep.cpp sweep_json).
    const std::string file = write_temp("dtsim_harness_sweep.json", R"({"description": "d",
        "meta": {"gpu": "NVIDIA H100 80GB HBM3", "command": "dtsim-collectives"},
        "datasets": [{"id": "measured-1x8-all_reduce-out-of-place", "source": "measured",
            "hardware": {"gpu": "NVIDIA H100 80GB HBM3", "gpus_per_node": 8, "nodes": 1},
            "collective": "all_reduce", "note": "out-of-place; NCCL_ALGO=Ring", "in_place": false, "wrong": 0,
            "rows": [{"size_bytes": 1048576, "count": 262144, "time_us": 20.5, "algbw_GBps": 51.15, "busbw_GBps": 89.51}]}]})");
    const auto data = cal::load_ground_truth({file});
    REQUIRE(data.collectives.size() == 1);
    CHECK(data.collectives[0].algorithm == Algorithm::ring);
    CHECK(data.collectives[0].rows[0].seconds == doctest::Approx(20.5e-6));
}

TEST_CASE("a typo in a ground-truth file is rejected with a did-you-mean, not ignored") {
    // A misspelt optional key (here the hardware's network) would otherwise read as absent.
    try {
        (void)cal::load_ground_truth({data_dir + "/typo_inter.json"});
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK(e.path == "$.datasets[0].hardware.iner");
        CHECK(std::string(e.what()).ends_with("typo_inter.json: $.datasets[0].hardware.iner: unknown key \"iner\"; did "
                                              "you mean \"inter\"?"));
    }
    const std::string gemm = write_temp("dtsim_typo_gemm.json", R"({"max_achievable": {"source": "s",
        "rows": [{"gpu": "H100", "dtype": "bf16", "tflops": 1, "shape": "1x2x3", "peek": 989}]}})");
    CHECK_THROWS_WITH_AS(cal::load_ground_truth({gemm}),
                         doctest::Contains("$.max_achievable.rows[0].peek: unknown key \"peek\"; did you mean \"peak\"?"),
                         ConfigError);
    const std::string section = write_temp("dtsim_typo_section.json", R"({"max_achievable": {"source": "s",
        "rows": [{"gpu": "H100", "dtype": "bf16", "tflops": 1, "shape": "1x2x3"}]},
        "h100_bf16_by_shap": {"source": "s", "columns": ["m", "n", "k", "tflops"], "rows": [[1, 2, 3, 4]]}})");
    CHECK_THROWS_WITH_AS(cal::load_ground_truth({section}),
                         doctest::Contains("$.h100_bf16_by_shap: unknown key \"h100_bf16_by_shap\"; the keys here are: "
                                           "description, meta, max_achievable, <gpu>_<dtype>_by_shape"),
                         ConfigError);
    const std::string column = write_temp("dtsim_typo_column.json", R"({"h100_bf16_by_shape": {"source": "s",
        "columns": ["m", "n", "k", "tflop"], "rows": [[1, 2, 3, 4]]}})");
    CHECK_THROWS_WITH_AS(cal::load_ground_truth({column}),
                         doctest::Contains("$.h100_bf16_by_shape.columns[3]: unknown column \"tflop\"; did you mean "
                                           "\"tflops\"?"),
                         ConfigError);
    const std::string sources = write_temp("dtsim_typo_sources.json", R"({"source": "s",
        "columns": ["heads", "hidden", "layers", "tp", "pp", "gpus", "global_batch", "micro_batch", "tflops_per_gpu"],
        "column_sources": {"micro_bach": "the script"}, "rows": []})");
    CHECK_THROWS_WITH_AS(cal::load_ground_truth({sources}),
                         doctest::Contains("$.column_sources.micro_bach: unknown key \"micro_bach\"; did you mean "
                                           "\"micro_batch\"?"),
                         ConfigError);
}

// A GPU name without a family ("some gpu") matched no cluster config: its data set was predicted
// with 0 points, and validate said its targets were met.
TEST_CASE("a GPU whose family cannot be told is an error at its name") {
    const std::string file = write_temp("dtsim_no_family.json", R"({"datasets": [{"id": "x", "source": "s",
        "hardware": {"gpu": "some gpu", "gpus_per_node": 8, "nodes": 1}, "collective": "all_reduce",
        "rows": [{"size_bytes": 1048576, "time_us": 10}]}]})");
    CHECK_THROWS_WITH_AS(cal::load_ground_truth({file}),
                         doctest::Contains("dtsim_no_family.json: $.datasets[0].hardware.gpu: cannot tell the GPU family "
                                           "of \"some gpu\""),
                         ConfigError);
    const std::string gemm = write_temp("dtsim_no_family_gemm.json", R"({"max_achievable": {"source": "s",
        "rows": [{"gpu": "gpu", "dtype": "bf16", "tflops": 1, "shape": "1x2x3"}]}})");
    CHECK_THROWS_WITH_AS(cal::load_ground_truth({gemm}),
                         doctest::Contains("$.max_achievable.rows[0].gpu: cannot tell the GPU family of \"gpu\""),
                         ConfigError);
}

TEST_CASE("validate: data no cluster config can predict is an error, not a set of 0 points") {
    const std::string file = write_temp("dtsim_z900.json", R"({"datasets": [{"id": "z", "source": "s",
        "hardware": {"gpu": "Z900", "gpus_per_node": 8, "nodes": 1}, "collective": "all_reduce",
        "rows": [{"size_bytes": 1048576, "time_us": 10}]}]})");
    cal::ValidateOptions o;
    o.clusters = {data_dir + "/test-cluster.json"};
    CHECK_THROWS_WITH_AS(cal::validate(cal::load_ground_truth({file}), o),
                         doctest::Contains("dtsim_z900.json: $.datasets[0].hardware.gpu: no cluster config for GPU "
                                           "family \"Z900\", so data set \"z\" cannot be predicted; give one with --cluster"),
                         ConfigError);
    const std::string gemm = write_temp("dtsim_z900_gemm.json", R"({"max_achievable": {"source": "s",
        "rows": [{"gpu": "Z900", "dtype": "bf16", "tflops": 1, "shape": "1x2x3"}]}})");
    CHECK_THROWS_WITH_AS(cal::validate(cal::load_ground_truth({gemm}), o),
                         doctest::Contains("$.max_achievable: none of the 1 rows of data set "
                                           "\"dtsim_z900_gemm:max_achievable\" can be predicted: no cluster config for GPU "
                                           "family \"Z900\""),
                         ConfigError);
}

TEST_CASE("collective data over RoCE is predicted on the RoCE cluster of its family; a link read from a set is in-sample") {
    const std::string root = std::string(DTSIM_CONFIGS) + "/..";
    CHECK(cal::network_kind("RoCE (GPUDirect-RDMA on a3-ultragpu-8g)") == "RoCE");
    CHECK(cal::network_kind("400 Gb/s RDMA per GPU, RoCE by NCCL_IB_GID_INDEX=3") == "RoCE");
    CHECK(cal::network_kind("8x ConnectX-7 IB 400Gb/s per node") == "InfiniBand");
    const auto file = [&](const std::string& fam, const std::string& net) {
        return std::filesystem::path(cal::shipped_cluster_for(root, fam, net)).filename().string();
    };
    CHECK(file("H100", "RoCE 400 Gb/s") == "h100-roce.json");
    CHECK(file("H200", "RoCE 400 Gb/s") == "h200-roce.json");
    CHECK(file("H200", "InfiniBand") == "dgx-h200.json");
    CHECK(file("H100", "EFA") == "p5-h100-efa.json");
    CHECK(file("B200", "") == "dgx-b200.json");
    CHECK(file("GB200", "") == "gb200-nvl72.json");
    CHECK(file("GB300", "").empty());  // no GB300 cluster is shipped
    // Every shipped cluster config loads.
    for (const auto& e : std::filesystem::directory_iterator(std::string(DTSIM_CONFIGS) + "/clusters"))
        CHECK_NOTHROW(cal::make_cluster(cal::read_cluster_file(e.path().string()), e.path().string()));
    // The H200 RoCE cluster: dgx-h200's GPU, h100-roce's link between nodes, no curve there.
    const Cluster roce = cal::make_cluster(cal::read_cluster_file(std::string(DTSIM_CONFIGS) + "/clusters/h200-roce.json"), "");
    const Cluster ib = cal::make_cluster(cal::read_cluster_file(std::string(DTSIM_CONFIGS) + "/clusters/dgx-h200.json"), "");
    const Cluster h100 = cal::make_cluster(cal::read_cluster_file(std::string(DTSIM_CONFIGS) + "/clusters/h100-roce.json"), "");
    CHECK(roce.gpu.memory_bytes == ib.gpu.memory_bytes);
    CHECK(roce.inter_node.bandwidth == h100.inter_node.bandwidth);
    CHECK(roce.inter_node.fits.empty());

    cal::ValidateOptions o;
    o.data_dir = root;
    const auto sets = cal::validate(cal::load_ground_truth({root + "/calibration/data/nccl_tests_2node_clouds.json",
                                                            root + "/calibration/data/nccl_tests_multinode.json"}),
                                    o);
    int seen = 0;
    for (const auto& s : sets) {
        const std::string cluster = std::filesystem::path(s.cluster).filename().string();
        if (s.id.rfind("h200x16-2node-roce-gcp-allgather", 0) == 0) {
            ++seen;
            CHECK(cluster == "h200-roce.json");
            CHECK(s.fit.rfind("no curve", 0) == 0);
            CHECK(s.held_counted == s.counted);
        } else if (s.id == "h100x1024-128node-allreduce-ring-ll128") {
            ++seen;
            // h100-roce's RoCE bandwidth was read from this set's plateau: its points are not held out.
            CHECK(cluster == "h100-roce.json");
            CHECK(s.fit.rfind("in-sample", 0) == 0);
            CHECK(s.counted > 0);
            CHECK(s.held_counted == 0);
        } else if (s.id == "h100x32-4node-ib400-allreduce") {
            ++seen;
            CHECK(cluster == "dgx-h100.json");
            CHECK(s.fit.rfind("no curve", 0) == 0);
        }
    }
    CHECK(seen == 4);
}

// calibrate wrote the base cluster unchanged, with exit status 0.
TEST_CASE("calibrate: nothing to fit is an error that says why") {
    const auto base = cal::read_cluster_file(data_dir + "/test-cluster.json");
    const std::string z900 = write_temp("dtsim_z900.json", R"({"datasets": [{"id": "z", "source": "s",
        "hardware": {"gpu": "Z900", "gpus_per_node": 8, "nodes": 1}, "collective": "all_reduce",
        "rows": [{"size_bytes": 1048576, "time_us": 10}, {"size_bytes": 2097152, "time_us": 20}]}]})");
    CHECK_THROWS_WITH_AS(cal::calibrate(base, "test-cluster.json", cal::load_ground_truth({z900})),
                         "nothing to fit: no data set is of the GPU family of test-cluster.json (H100); the data sets "
                         "used: z (Z900)",
                         std::invalid_argument);
    const auto data = cal::load_ground_truth({data_dir + "/small_allreduce.json"});
    cal::CalibrateOptions o;
    o.min_bytes = 1e15;
    CHECK_THROWS_WITH_AS(cal::calibrate(base, "test-cluster.json", data, o),
                         "nothing was fitted to test-cluster.json: skipped all_reduce (small_allreduce): fewer than 2 "
                         "rows of 1000000000000000 bytes or more",
                         std::invalid_argument);
    CHECK(cal::data_set_ids(data) == std::vector<std::string>{"small_allreduce"});
    CHECK(cal::calibrate(base, "test-cluster.json", data).fitted == 1);
}

// Sizes were read with nlohmann's value() before the cluster was checked: "[json.exception.type_error.302]
// type must be number, but is string".
TEST_CASE("a cluster file with a bad size or section is an error at its path, not nlohmann's text") {
    nlohmann::json doc = cal::read_cluster_file(data_dir + "/test-cluster.json");
    doc["cluster"]["nodes"] = "x";
    CHECK_THROWS_WITH_AS(cal::make_cluster(doc, "c.json"),
                         "c.json: $.cluster.nodes: expected a positive integer, found \"x\" (a string)", ConfigError);
    doc["cluster"] = 5;
    CHECK_THROWS_WITH_AS(cal::make_cluster(doc, "c.json"), "c.json: $.cluster: expected an object, found 5", ConfigError);
    cal::MegatronRow row;
    row.model = "m";
    row.heads = row.hidden = row.layers = 8;
    CHECK_THROWS_WITH_AS(cal::predict_megatron(row, doc, "c.json"),
                         "c.json (Megatron row m): $.cluster: expected an object, found 5", ConfigError);
}

TEST_CASE("a GEMM table without a best-shape row fits the ceiling with the curve; bandwidth_fraction only where some shape is memory-bound") {
    const auto base = cal::read_cluster_file(data_dir + "/test-cluster.json");
    GpuSpec truth = cal::make_cluster(base, "test-cluster.json").gpu;
    truth.gemm.max_efficiency = 0.7;
    truth.gemm.overhead_s = 6e-6;
    truth.gemm.bandwidth_fraction = 0.6;  // the base has 0.5
    auto set_of = [&](const std::vector<std::array<double, 3>>& shapes) {
        cal::GroundTruth data;
        cal::GemmSet s;
        s.id = "synthetic:h100_bf16_by_shape";
        s.source = "test";
        for (const auto& [m, n, k] : shapes)
            s.rows.push_back({"H100 test", DType::bf16, m, n, k,
                              2 * m * n * k / truth.gemm_seconds(m, n, k, DType::bf16) / kTera});
        data.gemms.push_back(s);
        return data;
    };
    // Large shapes and small, memory-bound ones (intensity 43 to 85 FLOP/byte, below the ridge).
    const auto both = cal::calibrate(base, "test-cluster.json",
                                     set_of({{256, 256, 256}, {512, 256, 512}, {256, 512, 256}, {4096, 4096, 4096},
                                             {8192, 8192, 8192}, {8192, 4096, 14336}, {2048, 6144, 4096}}));
    const auto& g = both.cluster["cluster"]["gpu"]["gemm"];
    CHECK(g["max_efficiency"].get<double>() == doctest::Approx(0.7).epsilon(0.01));
    CHECK(g["bandwidth_fraction"].get<double>() == doctest::Approx(0.6).epsilon(0.02));
    CHECK(g["overhead_us"].get<double>() == doctest::Approx(6).epsilon(0.05));
    // Large shapes only: the fraction cannot be told and stays the base's.
    const double base_fraction = cal::make_cluster(base, "test-cluster.json").gpu.gemm.bandwidth_fraction;
    const auto large = cal::calibrate(base, "test-cluster.json",
                                      set_of({{4096, 4096, 4096}, {8192, 8192, 8192}, {8192, 4096, 14336}, {2048, 6144, 4096}}));
    CHECK(large.cluster["cluster"]["gpu"]["gemm"]["bandwidth_fraction"].get<double>() == doctest::Approx(base_fraction));
    CHECK(large.cluster["cluster"]["gpu"]["gemm"]["max_efficiency"].get<double>() == doctest::Approx(0.7).epsilon(0.01));
}

TEST_CASE("the GEMM fit: one shape near the ridge does not set bandwidth_fraction; the fitted type's old override goes") {
    auto base = cal::read_cluster_file(data_dir + "/test-cluster.json");
    GpuSpec truth = cal::make_cluster(base, "test-cluster.json").gpu;
    truth.gemm.max_efficiency = 0.7;
    truth.gemm.overhead_s = 6e-6;
    truth.gemm.bandwidth_fraction = 0.3;  // a fit that took the fraction would move it from the base's
    cal::GroundTruth data;
    cal::GemmSet s;
    s.id = "synthetic:h100_bf16_by_shape";
    s.source = "test";
    // Square shapes, the smallest (intensity 170 FLOP/byte) near the base's ridge, none below half of it.
    for (double n : {512.0, 1024.0, 2048.0, 8192.0})
        s.rows.push_back({"H100 test", DType::bf16, n, n, n, 2 * n * n * n / truth.gemm_seconds(n, n, n, DType::bf16) / kTera});
    data.gemms.push_back(s);
    // A base config with an earlier ceiling for the fitted type (as --fit-megatron writes one).
    base["cluster"]["gpu"]["gemm"]["efficiency_by_dtype"] = {{"bf16", 0.5}};
    const double base_fraction = cal::make_cluster(base, "test-cluster.json").gpu.gemm.bandwidth_fraction;
    const auto r = cal::calibrate(base, "test-cluster.json", data);
    const auto& g = r.cluster["cluster"]["gpu"]["gemm"];
    CHECK(g["bandwidth_fraction"].get<double>() == doctest::Approx(base_fraction));
    // (the smallest shape's time, bound by the truth's lower bandwidth, pulls the ceiling a little)
    CHECK(g["max_efficiency"].get<double>() == doctest::Approx(0.7).epsilon(0.05));
    CHECK_FALSE(g.contains("efficiency_by_dtype"));
    CHECK(cal::make_cluster(r.cluster, "c.json").gpu.gemm.efficiency(DType::bf16) ==
          doctest::Approx(g["max_efficiency"].get<double>()));
}

TEST_CASE("the power-law fit recovers the exponent GEMMs at a power limit were made with") {
    GpuSpec g = test_gpu(989.4e12, 2.4e12, 0.75, 5e-6);
    g.tdp_watts = 700;
    g.power_limit_watts = 500;
    g.power_exponent = 0.45;
    // (5/7)^0.45 = exp(0.45 x -0.336472) = exp(-0.151412) = 0.859493.
    CHECK(g.tensor_clock_scale() == doctest::Approx(0.859493).epsilon(1e-5));
    std::vector<cal::GemmPoint> pts;
    for (double m : {1024.0, 4096.0, 16384.0})
        for (double n : {1792.0, 6656.0})
            pts.push_back({"h100", DType::bf16, m, n, 8192, 2 * m * n * 8192 / g.gemm_seconds(m, n, 8192, DType::bf16) / 1e12});
    GpuSpec start = g;
    start.power_exponent = 0;  // the datasheets' 0.302 to start from
    const auto fit = cal::fit_power_exponent(start, pts);
    CHECK(fit.exponent == doctest::Approx(0.45).epsilon(1e-4));
    CHECK(fit.rms_log < 1e-5);
    // Without the fixed overhead, measured 5 % slower everywhere: the exponent that makes (5/7)^k 5 %
    // smaller, ln(0.95) / ln(5/7) = 0.152443 more.
    g.gemm.overhead_s = start.gemm.overhead_s = 0;
    for (auto& p : pts) p.tflops = 0.95 * 2 * p.m * p.n * p.k / g.gemm_seconds(p.m, p.n, p.k, DType::bf16) / 1e12;
    CHECK(cal::fit_power_exponent(start, pts).exponent == doctest::Approx(0.45 + 0.152443).epsilon(1e-4));
    start.power_limit_watts = 0;
    CHECK_THROWS_AS(cal::fit_power_exponent(start, pts), std::invalid_argument);
    start.power_limit_watts = 500;
    CHECK_THROWS_AS(cal::fit_power_exponent(start, {}), std::invalid_argument);
}

TEST_CASE("a GEMM table of another part: gpu_overrides gives its memory and power limit; calibrate fits only the power law to it") {
    const std::string text = R"({"h100_capped_bf16_by_shape": {"source": "s", "gpu": "H100", "dtype": "bf16",
        "gpu_overrides": {"hbm_TBps": 2.4, "power_limit_W": LIMIT},
        "columns": ["m", "n", "k", "tflops"], "rows": [[8192, 8192, 8192, 600], [4096, 4096, 4096, 550], [1024, 1024, 1024, 300]]}})";
    const auto with_limit = [&](const std::string& limit) {
        std::string t = text;
        t.replace(t.find("LIMIT"), 5, limit);
        return write_temp("dtsim_capped_gemm.json", t);
    };
    const std::string file = with_limit("500");
    const auto data = cal::load_ground_truth({file});
    REQUIRE(data.gemms.size() == 1);
    CHECK(data.gemms[0].hbm_TBps == 2.4);
    CHECK(data.gemms[0].power_limit_W == 500);
    cal::ValidateOptions o;
    const std::string h100 = std::string(DTSIM_CONFIGS) + "/clusters/dgx-h100.json";
    o.clusters = {h100};
    const auto sets = cal::validate(data, o);
    REQUIRE(sets.size() == 1);
    REQUIRE(sets[0].points.size() == 3);
    CHECK(sets[0].cluster.find("with the section's gpu_overrides") != std::string::npos);
    // The prediction is the shipped H100's at 2.4 TB/s and 500 W of its 700.
    GpuSpec gpu = cal::make_cluster(cal::read_cluster_file(h100), h100).gpu;
    const double nominal = 2.0 * 8192 * 8192 * 8192 / gpu.gemm_seconds(8192, 8192, 8192, DType::bf16) / 1e12;
    gpu.memory_bandwidth = 2.4e12;
    gpu.power_limit_watts = 500;
    const double capped = 2.0 * 8192 * 8192 * 8192 / gpu.gemm_seconds(8192, 8192, 8192, DType::bf16) / 1e12;
    CHECK(sets[0].points[0].predicted == doctest::Approx(capped));
    CHECK(capped < 0.91 * nominal);  // compute-bound: x0.855 with the shipped exponent, 0.4666
    // A limit above the config's TDP (700 W) is an error at the limit's JSON path.
    CHECK_THROWS_WITH_AS(cal::validate(cal::load_ground_truth({with_limit("800")}), o),
                         doctest::Contains("$.h100_capped_bf16_by_shape.gpu_overrides.power_limit_W: a power limit of "
                                           "800 W needs a part of at least that TDP, but"),
                         ConfigError);
    const std::string typo = write_temp("dtsim_capped_typo.json", R"({"h100_capped_bf16_by_shape": {"source": "s",
        "gpu_overrides": {"hbm_TBs": 2.4}, "columns": ["m", "n", "k", "tflops"], "rows": [[1, 2, 3, 4]]}})");
    CHECK_THROWS_WITH_AS(cal::load_ground_truth({typo}),
                         doctest::Contains("$.h100_capped_bf16_by_shape.gpu_overrides.hbm_TBs: unknown key \"hbm_TBs\"; "
                                           "did you mean \"hbm_TBps\"?"),
                         ConfigError);
    // calibrate fits nothing to it on a part with no TDP; the same table without overrides sets the shape curve.
    const auto base = cal::read_cluster_file(data_dir + "/test-cluster.json");
    CHECK_THROWS_WITH_AS(cal::calibrate(base, "test-cluster.json", data),
                         doctest::Contains("measured at 500 W, not below the base's TDP (none given)"),
                         std::invalid_argument);
    // With the TDP it fits the tensor clock's power law alone, and validate calls the table in-sample.
    auto rated = base;
    rated["cluster"]["gpu"]["tdp_W"] = 700;
    const auto fitted = cal::calibrate(rated, "test-cluster.json", data);
    CHECK(fitted.fitted == 1);
    const auto& clock = fitted.cluster["cluster"]["gpu"]["power_clock"];
    CHECK(clock["datasets"] == nlohmann::json::array({"dtsim_capped_gemm:h100_capped_bf16_by_shape"}));
    const double k = clock["exponent"].get<double>();
    CHECK(k > 0);
    CHECK(k <= 4);
    CHECK(fitted.cluster["cluster"]["gpu"]["gemm"] == rated["cluster"]["gpu"]["gemm"]);  // the curve is the TDP's
    GpuSpec at_limit = cal::make_cluster(fitted.cluster, "fitted").gpu;
    at_limit.memory_bandwidth = 2.4e12;
    at_limit.power_limit_watts = 500;
    CHECK(at_limit.tensor_clock_scale() == doctest::Approx(std::pow(500.0 / 700, k)));
    const std::string fitted_file = write_temp("dtsim_fitted_cluster.json", fitted.cluster.dump());
    cal::ValidateOptions fo;
    fo.clusters = {fitted_file};
    const auto own = cal::validate(data, fo);
    CHECK(own[0].fit == "in-sample: the tensor clock's power law was fitted to this table");
    fo.holdout = true;
    CHECK(cal::validate(data, fo)[0].fit.starts_with("held out: each shape predicted with the power law fitted to the other"));
    std::string plain = text;
    plain.erase(plain.find("\"gpu_overrides\""), plain.find("\"columns\"") - plain.find("\"gpu_overrides\""));
    CHECK(cal::calibrate(base, "test-cluster.json", cal::load_ground_truth({write_temp("dtsim_plain_gemm.json", plain)}))
              .fitted >= 1);
    // A base with a power limit would have it twice: in the fitted efficiencies and in every prediction.
    auto limited = base;
    limited["cluster"]["gpu"]["tdp_W"] = 700;
    limited["cluster"]["gpu"]["power_limit_W"] = 500;
    CHECK_THROWS_WITH_AS(cal::calibrate(limited, "test-cluster.json", data),
                         doctest::Contains("$.cluster.gpu.power_limit_W: calibrate fits the part as measured at its TDP"),
                         ConfigError);
}

TEST_CASE("published_evidence: the shipped runs most like a config, each as dtsim validate predicts it") {
    const std::string data = std::string(DTSIM_CONFIGS) + "/..";
    const std::string runs = std::string(DTSIM_CONFIGS) + "/runs/";
    std::vector<std::string> end_to_end;
    for (const auto& f : cal::shipped_data_files(data))
        if (std::filesystem::path(f).filename().string().rfind("end_to_end", 0) == 0) end_to_end.push_back(f);
    // torchtitan's 2D layout on H100: PyTorch's own parallelism with tensor parallelism (tokens/s rows).
    const Config tp2 = load_config(runs + "llama3-8b-16xh100-fsdp-tp2.json");
    const cal::Evidence e = cal::published_evidence(tp2, data);
    // Predicted 3 at once: the same rows, errors and figures.
    CHECK(cal::to_json(cal::published_evidence(tp2, data, 3)).dump() == cal::to_json(e).dump());
    // An interleaved Megatron-LM layout with the overlap: among its rows some measured as step
    // times (DGX Cloud's recipes), where dtsim's shorter step is the error's positive side.
    const Config gpt3 = load_config(runs + "llama3-70b-64xh100-interleaved.json",
                                    {parse_override("strategy.tp_comm_overlap=true")});
    const cal::Evidence g = cal::published_evidence(gpt3, data);
    // Traits no published run of the family shares are let go, the least telling first, until
    // enough rows are left; the GPU and framework never are. Rows predicted out of memory say so.
    const Config odd = load_config(runs + "llama3-70b-64xh100-zbh1.json",
                                   {parse_override("strategy.recompute=selective"), parse_override("strategy.cp=2"),
                                    parse_override("strategy.dp=1"), parse_override("strategy.fp8=te")});
    const cal::Evidence o = cal::published_evidence(odd, data);
    // Published runs only: the harness's one-GPU steps (H100, PyTorch, no tensor parallelism, some
    // with full recompute, as this data-parallel run) are not among them.
    const cal::Evidence ddp = cal::published_evidence(load_config(runs + "llama3-8b-16xh100-ddp.json"), data);
    REQUIRE(ddp.rows.size() >= 5);
    for (const auto& r : ddp.rows) CHECK(r.set.find("dtsim_torch_steps") == std::string::npos);
    // validate on the data sets those rows come from (all of them would take minutes under the sanitizers).
    std::set<std::string> wanted;
    for (const auto* ev : {&e, &g, &o})
        for (const auto& r : ev->rows) wanted.insert(r.set);
    cal::GroundTruth truth = cal::load_ground_truth(end_to_end);
    std::erase_if(truth.end_to_end, [&](const auto& set) { return !wanted.count(set.id); });
    REQUIRE(truth.end_to_end.size() == wanted.size());
    cal::ValidateOptions options;
    options.data_dir = data;
    const auto sets = cal::validate(truth, options);
    // validate's point for a row: its error is predicted / measured - 1 in the row's own unit.
    auto point = [&](const cal::EvidenceRow& r) {
        const auto s = std::find_if(sets.begin(), sets.end(), [&](const auto& v) { return v.id == r.set; });
        REQUIRE(s != sets.end());
        const auto p = std::find_if(s->points.begin(), s->points.end(),
                                    [&](const auto& q) { return q.label.rfind(r.row + " [", 0) == 0; });
        REQUIRE(p != s->points.end());
        return *p;
    };
    auto check_rows = [&](const cal::Evidence& ev) {
        std::vector<double> errors;
        for (const auto& r : ev.rows) {
            CAPTURE(r.set);
            CAPTURE(r.row);
            const auto p = point(r);
            // Positive when dtsim is fast: more throughput than measured, or a shorter step.
            if (p.unit == "s")
                CHECK(r.error == doctest::Approx(1 / (1 + p.error()) - 1));
            else
                CHECK(r.error == doctest::Approx(p.error()));
            CHECK(r.out_of_memory == (p.label.find("(dtsim: out of memory)") != std::string::npos));
            errors.push_back(r.error);
        }
        // The median, lowest and highest, sorted here.
        std::sort(errors.begin(), errors.end());
        REQUIRE(!errors.empty());
        const std::size_t n = errors.size();
        CHECK(ev.median == doctest::Approx(n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2));
        CHECK(ev.low == errors.front());
        CHECK(ev.high == errors.back());
    };
    REQUIRE(e.rows.size() >= 5);
    CHECK(std::find(e.traits.begin(), e.traits.end(), "H100") != e.traits.end());
    CHECK(std::find(e.traits.begin(), e.traits.end(), "PyTorch's own parallelism") != e.traits.end());
    check_rows(e);
    const bool step_rows = std::any_of(g.rows.begin(), g.rows.end(), [&](const auto& r) { return point(r).unit == "s"; });
    CHECK(step_rows);
    check_rows(g);
    CHECK_FALSE(o.relaxed.empty());
    CHECK(o.rows.size() >= 5);
    CHECK(std::find(o.traits.begin(), o.traits.end(), "Megatron-LM's (or DeepSpeed's) code") != o.traits.end());
    check_rows(o);
    CHECK(std::any_of(o.rows.begin(), o.rows.end(), [](const auto& r) { return r.out_of_memory; }));
    // A GPU family with no published run: none, said by its GPU and framework, and null figures in JSON.
    const Config other = load_config(runs + "llama3-8b-16xh100-fsdp.json", {parse_override("cluster.gpu.name=MI300X")});
    const cal::Evidence none = cal::published_evidence(other, data);
    CHECK(none.rows.empty());
    CHECK(none.traits == std::vector<std::string>{"MI300", "PyTorch's own parallelism"});
    CHECK(cal::to_json(none)["median_error"].is_null());
}

namespace {

// Calibrating `base_file`'s GPU with the kernel file `fitted` and the check `check` beside it gives
// the attention curves `fitted` gives alone, and does not list `check`'s set among their data.
void check_fits_nothing(const std::string& base_file, const std::string& fitted, const std::string& check,
                        const std::string& check_id) {
    const nlohmann::json base = cal::read_cluster_file(base_file);
    const auto both = cal::load_ground_truth({fitted, check});
    const auto alone = cal::load_ground_truth({fitted});
    const auto with = cal::calibrate(base, base_file, both, {}).cluster["cluster"]["gpu"]["attention"];
    const auto without = cal::calibrate(base, base_file, alone, {}).cluster["cluster"]["gpu"]["attention"];
    CHECK(with == without);
    const auto& ids = with["datasets"];
    CHECK(std::find(ids.begin(), ids.end(), check_id) == ids.end());
}

}  // namespace

TEST_CASE("a published chart of forwards alone checks the curves: calibrating with it fits and claims nothing") {
    const std::string data = std::string(DTSIM_CONFIGS) + "/../calibration/data/";
    const std::string base_file = std::string(DTSIM_CONFIGS) + "/clusters/dgx-h100.json";
    const nlohmann::json base = cal::read_cluster_file(base_file);
    const auto chart = cal::load_ground_truth({data + "h100_flash3_paper_attention.json"});
    CHECK_THROWS_WITH_AS(cal::calibrate(base, base_file, chart, {}),
                         doctest::Contains("skipped attention (h100_flash3_paper_attention:attention): forwards timed "
                                           "alone check the curves, none is fitted to them"),
                         std::invalid_argument);
    // Together with the data the curves were fitted to, the same curves, and its id not among their data.
    check_fits_nothing(base_file, data + "h100_dtsim_torch_kernels.json", data + "h100_flash3_paper_attention.json",
                       "h100_flash3_paper_attention:attention");
    // In validate its points are all held out, forward only, and named so with --holdout too.
    cal::ValidateOptions o;
    o.data_dir = std::string(DTSIM_CONFIGS) + "/..";
    for (const bool holdout : {false, true}) {
        o.holdout = holdout;
        const auto v = cal::validate(chart, o);
        REQUIRE(v.size() == 1);
        CHECK(v[0].fit == "held out: curves fitted to h100_attention_published:attention, "
                          "h100_dtsim_torch_kernels:attention");
        CHECK(v[0].points.size() == 36);
        for (const auto& p : v[0].points) {
            CHECK_FALSE(p.in_sample);
            CHECK(p.label.find(" fwd ") != std::string::npos);
        }
    }
}

TEST_CASE("a published table its file holds out (another cuDNN) checks both passes of the curves and fits none") {
    const std::string data = std::string(DTSIM_CONFIGS) + "/../calibration/data/";
    const std::string base_file = std::string(DTSIM_CONFIGS) + "/clusters/dgx-h200.json";
    const nlohmann::json base = cal::read_cluster_file(base_file);
    const std::string table = data + "h200_cudnn_frontend_2024_09_attention.json";
    const auto held = cal::load_ground_truth({table});
    REQUIRE(held.kernels.size() == 1);
    CHECK(held.kernels[0].held_out.find("cuDNN 9.4.0") != std::string::npos);
    CHECK_THROWS_WITH_AS(cal::calibrate(base, base_file, held, {}),
                         doctest::Contains("skipped attention (h200_cudnn_frontend_2024_09_attention:attention): its "
                                           "file holds it out (cuDNN 9.4.0"),
                         std::invalid_argument);
    // Beside the data the curves were fitted to: the same curves, and not among their data.
    check_fits_nothing(base_file, data + "h200_dtsim_torch_kernels.json", table,
                       "h200_cudnn_frontend_2024_09_attention:attention");
    // validate predicts each shape's forward and backward apart, all held out, and says why.
    cal::ValidateOptions o;
    o.data_dir = std::string(DTSIM_CONFIGS) + "/..";
    for (const bool holdout : {false, true}) {
        o.holdout = holdout;
        const auto v = cal::validate(held, o);
        REQUIRE(v.size() == 1);
        CHECK(v[0].fit == "held out: curves fitted to h200_dtsim_torch_kernels:attention");
        CHECK(v[0].note.find("its file fits no curve: cuDNN 9.4.0") != std::string::npos);
        REQUIRE(v[0].points.size() == 20);
        std::size_t forwards = 0, backwards = 0;
        for (const auto& p : v[0].points) {
            CHECK_FALSE(p.in_sample);
            forwards += p.label.find(" fwd ") != std::string::npos;
            backwards += p.label.find(" bwd ") != std::string::npos;
        }
        CHECK(forwards == 10);
        CHECK(backwards == 10);
    }
}

TEST_CASE("a published chart of forward + backward sums neither replaces nor claims curves fitted to passes apart") {
    const std::string data = std::string(DTSIM_CONFIGS) + "/../calibration/data/";
    const std::string base_file = std::string(DTSIM_CONFIGS) + "/clusters/dgx-h100.json";
    const nlohmann::json base = cal::read_cluster_file(base_file);
    // Calibrating with the H100 chart alone: FlashAttention-2 and cuDNN keep the base's curves and
    // the data they were fitted to; FlashAttention 1, which only the chart has, comes from it.
    const auto chart = cal::load_ground_truth({data + "h100_attention_published.json"});
    const cal::CalibrateResult r = cal::calibrate(base, base_file, chart, {});
    const auto& before = base["cluster"]["gpu"]["attention"];
    const auto& after = r.cluster["cluster"]["gpu"]["attention"];
    CHECK(after["flash2"] == before["flash2"]);
    CHECK(after["cudnn"] == before["cudnn"]);
    CHECK(after["flash1"] == before["flash1"]);
    for (const auto& k : after["flash1"]) CHECK(k["from_sums"] == true);
    CHECK(std::find(after["datasets"].begin(), after["datasets"].end(), "h100_dtsim_torch_kernels:attention") !=
          after["datasets"].end());
    // In validate, the chart's FlashAttention-2 rows are held out (their curve was fitted to passes
    // measured apart), its FlashAttention 1 rows in-sample.
    cal::ValidateOptions o;
    o.data_dir = std::string(DTSIM_CONFIGS) + "/..";
    for (const bool holdout : {false, true}) {
        o.holdout = holdout;
        const auto v = cal::validate(chart, o);
        REQUIRE(v.size() == 1);
        int flash1 = 0, flash2 = 0;
        for (const auto& p : v[0].points) {
            const bool is_flash2 = p.label.rfind("flash2", 0) == 0;
            (is_flash2 ? flash2 : flash1) += 1;
            CHECK(p.in_sample == (!holdout && !is_flash2));
        }
        CHECK(flash1 == 12);
        CHECK(flash2 == 12);
    }
}

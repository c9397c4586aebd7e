// Fused attention as a kernel of its own (GpuSpec::attention_seconds, AttentionModel): the
// formula against a hand computation, the fit recovering a known curve, the limits (never
// faster than the GPU's peak, slower per FLOP at short sequences), the layer's pricing, and
// the shipped H100 curves against the measured kernels they were fitted to.
#include "dtsim/hw/calibrate.hpp"
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/workload.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace dtsim::hw;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
    const auto p = std::filesystem::temp_directory_path() / name;
    std::ofstream(p) << text;
    return p.string();
}

GpuSpec h100_like() {
    GpuSpec g;
    g.name = "H100-SXM";
    g.peak_flops[static_cast<std::size_t>(DType::bf16)] = 989.4e12;
    g.memory_bytes = 80e9;
    g.memory_bandwidth = 3.35e12;
    AttentionKernel k;
    k.head_dim = 128;
    k.forward = {0.32, 600};
    k.backward = {0.30, 1300};
    g.attention.backends["flash2"].push_back(k);
    return g;
}

}  // namespace

TEST_CASE("attention_seconds: the formula by hand") {
    const GpuSpec g = h100_like();
    // 32 heads of 128 over 8,192 tokens, forward: F = 2 x 32 x 8192^2 x 128 = 5.497558e11 FLOPs
    // at 989.4e12 x 0.32 x 8192 / (8192 + 600) = 2.9595e14 FLOP/s: 1.8576 ms.
    const double f = 2.0 * 32 * 8192.0 * 8192.0 * 128;
    CHECK(f == doctest::Approx(5.497558e11).epsilon(1e-6));
    const double rate = 989.4e12 * 0.32 * 8192 / (8192 + 600);
    CHECK(*g.attention_seconds("flash2", 32, 8192, 128, DType::bf16, false) == doctest::Approx(f / rate));
    CHECK(*g.attention_seconds("flash2", 32, 8192, 128, DType::bf16, false) == doctest::Approx(1.8576e-3).epsilon(1e-3));
    // Backward: 2.5 F at 0.30 with half at 1,300 tokens.
    CHECK(*g.attention_seconds("flash2", 32, 8192, 128, DType::bf16, true) ==
          doctest::Approx(2.5 * f / (989.4e12 * 0.30 * 8192 / (8192 + 1300))));
    // No curve for a backend: nullopt (the caller prices the core as GEMMs).
    CHECK_FALSE(g.attention_seconds("cudnn", 32, 8192, 128, DType::bf16, false).has_value());
    // Under a 500 W limit on a 700 W part the tensor clock is x0.903343 (GpuSpec::tensor_clock_scale).
    GpuSpec capped = g;
    capped.tdp_watts = 700;
    capped.power_limit_watts = 500;
    CHECK(*capped.attention_seconds("flash2", 32, 8192, 128, DType::bf16, false) ==
          doctest::Approx(f / rate / 0.903343).epsilon(1e-5));
    // The nearest head dimension by ratio: 96 is nearer 128 than 64 is... only one here.
    CHECK(g.attention.find("flash2", 64) == &g.attention.backends.at("flash2")[0]);
}

TEST_CASE("attention_seconds: never faster than the peak, and slower per FLOP at shorter sequences") {
    const GpuSpec g = h100_like();
    double last_rate = 0;
    for (double s : {128.0, 512.0, 2048.0, 8192.0, 32768.0, 131072.0}) {
        for (const bool bwd : {false, true}) {
            const double t = *g.attention_seconds("flash2", 8, s, 128, DType::bf16, bwd);
            const double flops = (bwd ? 2.5 : 1.0) * 2 * 8 * s * s * 128;
            CHECK(flops / t <= 989.4e12);
        }
        const double rate = 2 * 8 * s * s * 128 / *g.attention_seconds("flash2", 8, s, 128, DType::bf16, false);
        CHECK(rate > last_rate);
        last_rate = rate;
    }
}

TEST_CASE("fit_attention recovers a known curve from exact points") {
    std::vector<calib::AttentionPoint> pts;
    const double peak = 989.4e12;
    for (double s : {1024.0, 2048.0, 4096.0, 8192.0, 16384.0}) {
        calib::AttentionPoint p;
        p.backend = "cudnn";
        p.batch = 1;
        p.heads = 32;
        p.head_dim = 128;
        p.seq = s;
        const double f = 2 * 32 * s * s * 128;
        const double fwd = f / (peak * 0.6 * s / (s + 550));
        const double bwd = 2.5 * f / (peak * 0.55 * s / (s + 1400));
        p.forward_us = fwd * 1e6;
        p.forward_backward_us = (fwd + bwd) * 1e6;
        pts.push_back(p);
    }
    const AttentionModel m = calib::fit_attention(pts, peak);
    REQUIRE(m.backends.count("cudnn") == 1);
    const AttentionKernel& k = m.backends.at("cudnn").at(0);
    CHECK(k.head_dim == 128);
    CHECK(k.forward.efficiency == doctest::Approx(0.6).epsilon(1e-3));
    CHECK(k.forward.half_seq == doctest::Approx(550).epsilon(2e-3));
    CHECK(k.backward.efficiency == doctest::Approx(0.55).epsilon(1e-3));
    CHECK(k.backward.half_seq == doctest::Approx(1400).epsilon(2e-3));
    // One point per group cannot fix two unknowns: that group is left out.
    const AttentionModel one = calib::fit_attention({pts.front()}, peak);
    CHECK(one.backends.empty());
}

TEST_CASE("a published chart's causal FlashAttention rows are read as forward + backward times") {
    auto file = [](const std::string& rows) {
        return write_temp("dtsim_attention_published.json",
                          R"({"source": "s", "meta": {"gpu": "NVIDIA A100-SXM4-80GB"}, "attention_published": {
            "columns": ["backend", "causal", "head_dim", "seq", "batch", "heads", "direction", "tflops"],
            "rows": [)" + rows + "]}}");
    };
    const auto data = calib::load_ground_truth({file(R"(["flash_attention_2", true, 128, 4096, 4, 16, "fwd_bwd", 173],
        ["flash_attention_1", true, 64, 512, 32, 32, "fwd_bwd", 58],
        ["flash_attention_2", false, 128, 4096, 4, 16, "fwd_bwd", 196],
        ["pytorch_standard", true, 128, 4096, 4, 16, "fwd_bwd", 61],
        ["flash_attention_triton", true, 128, 4096, 4, 16, "fwd_bwd", 74])")});
    REQUIRE(data.kernels.size() == 1);
    const auto& pts = data.kernels[0].attention;
    REQUIRE(pts.size() == 2);  // the row without a mask, unfused PyTorch and Triton's tutorial kernel are left out
    CHECK(data.kernels[0].id == "dtsim_attention_published:attention");
    CHECK(pts[0].backend == "flash2");
    CHECK(pts[1].backend == "flash1");
    CHECK(pts[0].combined);
    // 3.5 x (4 x 4 x 4096^2 x 16 x 128 / 2) = 9.6207267e11 FLOPs at 173e12 FLOP/s: 5,561.11 us.
    CHECK(pts[0].forward_backward_us == doctest::Approx(5561.11).epsilon(1e-5));
    CHECK(calib::attention_passes(pts[0]) == std::vector<calib::AttentionPass>{calib::AttentionPass::both});
    CHECK(calib::attention_measured_seconds(pts[0], calib::AttentionPass::both) == doctest::Approx(5561.11e-6).epsilon(1e-5));
    CHECK_THROWS_WITH_AS(calib::load_ground_truth({file(R"(["flash_attention_2", true, 128, 4096, 4, 16, "back", 173])")}),
                         doctest::Contains("fwd_bwd"), ConfigError);
    CHECK_THROWS_WITH_AS(calib::load_ground_truth({file(R"(["flash_attention_4", true, 128, 4096, 4, 16, "fwd_bwd", 173])")}),
                         doctest::Contains("flash_attention_2"), ConfigError);
    // Backends dtsim names no kernel for are read and left out: a file of nothing else has no point.
    CHECK_THROWS_WITH_AS(calib::load_ground_truth({file(R"(["pytorch_standard", true, 128, 4096, 4, 16, "fwd_bwd", 61],
        ["flash_attention_3", true, 128, 4096, 4, 16, "fwd", 579])")}),
                         doctest::Contains("expected at least one causal row"), ConfigError);
}

TEST_CASE("a published chart's forward rows check the forward curve and fit none") {
    const std::string file = write_temp("dtsim_attention_forward.json", R"({"source": "s",
            "meta": {"gpu": "NVIDIA H100 80GB HBM3"}, "attention_published": {
            "columns": ["backend", "causal", "head_dim", "seq", "batch", "heads", "direction", "tflops"],
            "rows": [["cudnn", true, 128, 4096, 4, 16, "fwd", 518], ["cudnn", true, 128, 8192, 2, 16, "fwd", 529],
                     ["flash_attention_3", true, 128, 4096, 4, 16, "fwd", 579]]}})");
    const auto data = calib::load_ground_truth({file});
    REQUIRE(data.kernels.size() == 1);
    const auto& pts = data.kernels[0].attention;
    REQUIRE(pts.size() == 2);  // FlashAttention-3 has no kernel in dtsim
    CHECK(pts[0].backend == "cudnn");
    CHECK(pts[0].forward_only);
    CHECK_FALSE(pts[0].combined);
    // The forward alone: 4 x 4 x 4096^2 x 16 x 128 / 2 = 2.7487791e11 FLOPs at 518e12 FLOP/s: 530.652 us.
    CHECK(pts[0].forward_us == doctest::Approx(530.652).epsilon(1e-5));
    CHECK(calib::attention_passes(pts[0]) == std::vector<calib::AttentionPass>{calib::AttentionPass::forward});
    // Predicted by the forward curve alone: with efficiency 0.5 and half at 1,000 tokens, at 8,192
    // tokens 2 x 2 x 8192^2 x 16 x 128 / 2 = 5.4975581e11 FLOPs at 989.4e12 x 0.5 x 8192 / 9192 FLOP/s.
    GpuSpec g;
    g.peak_flops[static_cast<std::size_t>(DType::bf16)] = 989.4e12;
    AttentionKernel k;
    k.head_dim = 128;
    k.forward = {0.5, 1000};
    k.backward = {0.1, 1000};
    g.attention.backends["cudnn"].push_back(k);
    const auto t = calib::attention_predicted_seconds(g, pts[1], calib::AttentionPass::forward, DType::bf16);
    REQUIRE(t);
    CHECK(*t == doctest::Approx(5.4975581e11 / (989.4e12 * 0.5 * 8192 / 9192)).epsilon(1e-6));
    // No curve comes of forwards alone (nothing is known of the backward), nor do they move one
    // fitted to passes measured apart, which does not count them as its own.
    CHECK(calib::fit_attention(pts, 989.4e12).backends.empty());
    std::vector<calib::AttentionPoint> apart;
    for (double s : {2048.0, 8192.0}) {
        calib::AttentionPoint p = pts[0];
        p.forward_only = p.check_only = false;
        p.batch = 1;
        p.heads = 32;
        p.seq = s;
        const double f = 2 * 32 * s * s * 128;
        p.forward_us = f / (989.4e12 * 0.6 * s / (s + 550)) * 1e6;
        p.forward_backward_us = p.forward_us + 2.5 * f / (989.4e12 * 0.55 * s / (s + 1400)) * 1e6;
        apart.push_back(p);
    }
    std::vector<calib::AttentionPoint> both = apart;
    both.insert(both.end(), pts.begin(), pts.end());
    const AttentionModel m = calib::fit_attention(both, 989.4e12);
    REQUIRE(m.backends.count("cudnn") == 1);
    CHECK(m.backends.at("cudnn").at(0).forward.efficiency == doctest::Approx(0.6).epsilon(1e-3));
    CHECK(m.backends.at("cudnn").at(0).forward.half_seq == doctest::Approx(550).epsilon(2e-3));
    CHECK(calib::attention_fitted_from(m, apart[0]));
    CHECK_FALSE(calib::attention_fitted_from(m, pts[0]));
}

TEST_CASE("a published table's backward row joins its forward row: one point, the passes timed apart") {
    auto file = [](const std::string& held_out, const std::string& rows) {
        return write_temp("dtsim_attention_passes.json",
                          R"({"source": "s", )" + held_out + R"("meta": {"gpu": "NVIDIA H200"}, "attention_published": {
            "columns": ["backend", "causal", "head_dim", "seq", "batch", "heads", "direction", "tflops"],
            "rows": [)" + rows + "]}}");
    };
    const std::string rows = R"(["cudnn", true, 128, 8192, 2, 16, "fwd", 500], ["cudnn", true, 128, 8192, 2, 16, "bwd", 400],
        ["cudnn", false, 128, 8192, 2, 16, "bwd", 450], ["flash_attention_2", true, 128, 8192, 2, 16, "fwd", 300],
        ["cudnn", true, 128, 16384, 1, 16, "bwd", 410], ["cudnn", true, 128, 16384, 1, 16, "fwd", 520])";
    const auto data = calib::load_ground_truth({file("", rows)});
    REQUIRE(data.kernels.size() == 1);
    CHECK(data.kernels[0].held_out.empty());
    const auto& pts = data.kernels[0].attention;
    REQUIRE(pts.size() == 3);  // the row without a mask is left out; a backward may come before its forward
    // 2 x 16 x 8192^2 x 128 x 2 / 2 = 5.4975581e11 FLOPs: the forward at 500e12 FLOP/s takes
    // 1,099.51 us, the backward (2.5 times the FLOPs) at 400e12 3,435.97 us.
    CHECK(pts[0].backend == "cudnn");
    CHECK_FALSE(pts[0].forward_only);
    CHECK_FALSE(pts[0].combined);
    CHECK_FALSE(pts[0].check_only);
    CHECK(pts[0].forward_us == doctest::Approx(1099.51).epsilon(1e-5));
    CHECK(calib::attention_measured_seconds(pts[0], calib::AttentionPass::backward) ==
          doctest::Approx(3435.97e-6).epsilon(1e-5).scale(0));
    CHECK(calib::attention_passes(pts[0]) ==
          std::vector<calib::AttentionPass>{calib::AttentionPass::forward, calib::AttentionPass::backward});
    CHECK(pts[1].backend == "flash2");
    CHECK(pts[1].forward_only);  // no backward row: a check of the forward curve
    CHECK(pts[1].check_only);
    CHECK(pts[2].seq == 16384);
    CHECK_FALSE(pts[2].forward_only);
    // Two shapes of passes apart fit a cuDNN curve; the lone forward fits none.
    const AttentionModel fitted = calib::fit_attention(pts, 989.4e12);
    CHECK(fitted.backends.count("cudnn") == 1);
    CHECK(fitted.backends.count("flash2") == 0);
    CHECK(calib::attention_fitted_from(fitted, pts[0]));
    // The same rows in a file that says why it is held out: every point a check, none fitted.
    const auto held = calib::load_ground_truth({file(R"("held_out": "another cuDNN", )", rows)});
    REQUIRE(held.kernels.size() == 1);
    CHECK(held.kernels[0].held_out == "another cuDNN");
    for (const auto& p : held.kernels[0].attention) CHECK(p.check_only);
    CHECK(calib::fit_attention(held.kernels[0].attention, 989.4e12).backends.empty());
    CHECK_FALSE(calib::attention_fitted_from(fitted, held.kernels[0].attention[0]));
    // A backward without its forward, a pass twice, and a held_out without a reason are errors.
    CHECK_THROWS_WITH_AS(calib::load_ground_truth({file("", R"(["cudnn", true, 128, 8192, 2, 16, "bwd", 400],
        ["cudnn", true, 128, 16384, 1, 16, "fwd", 520])")}),
                         doctest::Contains("a backward row needs the forward row (\"fwd\") of the same backend and shape"),
                         ConfigError);
    CHECK_THROWS_WITH_AS(calib::load_ground_truth({file("", R"(["cudnn", true, 128, 8192, 2, 16, "fwd", 500],
        ["cudnn", true, 128, 8192, 2, 16, "fwd", 510])")}),
                         doctest::Contains("repeats the forward of an earlier row"), ConfigError);
    CHECK_THROWS_WITH_AS(calib::load_ground_truth({file("", R"(["cudnn", true, 128, 8192, 2, 16, "fwd", 500],
        ["cudnn", true, 128, 8192, 2, 16, "bwd", 400], ["cudnn", true, 128, 8192, 2, 16, "bwd", 410])")}),
                         doctest::Contains("repeats the backward of an earlier row"), ConfigError);
    CHECK_THROWS_WITH_AS(calib::load_ground_truth({file(R"("held_out": "", )", rows)}),
                         doctest::Contains("$.held_out"), ConfigError);
    // A call of no tokens is no timing: its row is named.
    CHECK_THROWS_WITH_AS(calib::load_ground_truth({file("", R"(["cudnn", true, 128, 0, 2, 16, "fwd", 500])")}),
                         doctest::Contains("$.attention_published.rows[0][3]"), ConfigError);
}

TEST_CASE("attention's tile term: a hand computation, and fit_attention finds it where tile counts differ") {
    // 8 heads (batch 1) at 8,192 tokens: 8 x ceil(8192 / 128) = 512 query tiles. With efficiency
    // 0.6, half at 500 tokens and at 200 tiles on a 989.4 TFLOP/s peak, the forward's
    // 2 x 8 x 8192^2 x 128 = 1.37438953e11 FLOPs take 1.37438953e11 / (989.4e12 x 0.6 x 8192 / 8692
    // x 512 / 712) = 3.41607e-4 s.
    GpuSpec g;
    const double peak = 989.4e12;
    g.peak_flops[static_cast<std::size_t>(DType::bf16)] = peak;
    AttentionKernel k;
    k.head_dim = 128;
    k.forward = {0.6, 500, 200};
    k.backward = {0.55, 1200, 100};
    g.attention.backends["cudnn"].push_back(k);
    const auto t = g.attention_seconds("cudnn", 8, 8192, 128, DType::bf16, false);
    REQUIRE(t);
    CHECK(*t == doctest::Approx(3.41607e-4).epsilon(1e-5).scale(0));
    // 64 heads at 8,192 tokens are 4,096 tiles: 4,296 / 4,096 times the time without the tile term.
    AttentionKernel none = k;
    none.forward.half_tiles = 0;
    GpuSpec g0 = g;
    g0.attention.backends["cudnn"] = {none};
    CHECK(*g.attention_seconds("cudnn", 64, 8192, 128, DType::bf16, false) /
              *g0.attention_seconds("cudnn", 64, 8192, 128, DType::bf16, false) ==
          doctest::Approx(4296.0 / 4096).epsilon(1e-9));
    // A part of a tile counts as a tile: 100 tokens are one tile per head.
    CHECK(*g.attention_seconds("cudnn", 8, 100, 128, DType::bf16, false) /
              *g0.attention_seconds("cudnn", 8, 100, 128, DType::bf16, false) ==
          doctest::Approx(1 + 200.0 / 8).epsilon(1e-9));
    // Exact points of several head counts and lengths give the three parameters back, to the grid's 10 tiles.
    std::vector<calib::AttentionPoint> pts;
    for (double heads : {8.0, 16.0, 32.0})
        for (double s : {1024.0, 4096.0, 16384.0}) {
            calib::AttentionPoint p;
            p.backend = "cudnn";
            p.heads = heads;
            p.seq = s;
            p.forward_us = *g.attention_seconds("cudnn", heads, s, 128, DType::bf16, false) * 1e6;
            p.forward_backward_us = p.forward_us + *g.attention_seconds("cudnn", heads, s, 128, DType::bf16, true) * 1e6;
            pts.push_back(p);
        }
    const AttentionModel m = calib::fit_attention(pts, peak);
    REQUIRE(m.backends.count("cudnn") == 1);
    const AttentionKernel& f = m.backends.at("cudnn").at(0);
    CHECK(f.min_tiles == 64);  // 8 heads at 1,024 tokens, the fewest tiles fitted to
    CHECK(calib::attention_json(m)["cudnn"][0]["min_tiles"] == 64);
    CHECK(f.forward.half_tiles == 200);
    CHECK(f.backward.half_tiles == 100);
    CHECK(f.forward.efficiency == doctest::Approx(0.6).epsilon(1e-3));
    CHECK(f.forward.half_seq == doctest::Approx(500).epsilon(2e-3));
    CHECK(f.backward.half_seq == doctest::Approx(1200).epsilon(2e-3));
    // One tile count throughout (16k tokens a call, as the published charts time them) cannot tell
    // the tile term from the efficiency: it stays 0.
    std::vector<calib::AttentionPoint> same;
    for (double s : {1024.0, 4096.0, 16384.0}) {
        calib::AttentionPoint p;
        p.backend = "cudnn";
        p.heads = 16;
        p.batch = 16384 / s;
        p.seq = s;
        p.forward_us = *g.attention_seconds("cudnn", p.batch * 16, s, 128, DType::bf16, false) * 1e6;
        p.forward_backward_us =
            p.forward_us + *g.attention_seconds("cudnn", p.batch * 16, s, 128, DType::bf16, true) * 1e6;
        same.push_back(p);
    }
    const AttentionModel ms = calib::fit_attention(same, peak);
    REQUIRE(ms.backends.count("cudnn") == 1);
    CHECK(ms.backends.at("cudnn").at(0).forward.half_tiles == 0);
    CHECK(ms.backends.at("cudnn").at(0).backward.half_tiles == 0);
    CHECK(ms.backends.at("cudnn").at(0).min_tiles == 0);  // no tile term: nothing to extrapolate
    CHECK_FALSE(calib::attention_json(ms)["cudnn"][0].contains("min_tiles"));
    // Nor where the tile count follows the length, one call shape a length (16 heads, batch 1, at
    // 4,096 to 32,768 tokens: 512 to 4,096 tiles): the term would only bend the length's curve.
    std::vector<calib::AttentionPoint> follows;
    for (double s : {4096.0, 8192.0, 16384.0, 32768.0}) {
        calib::AttentionPoint p;
        p.backend = "cudnn";
        p.heads = 16;
        p.seq = s;
        p.forward_us = *g.attention_seconds("cudnn", 16, s, 128, DType::bf16, false) * 1e6;
        p.forward_backward_us = p.forward_us + *g.attention_seconds("cudnn", 16, s, 128, DType::bf16, true) * 1e6;
        follows.push_back(p);
    }
    const AttentionModel mf = calib::fit_attention(follows, peak);
    REQUIRE(mf.backends.count("cudnn") == 1);
    CHECK(mf.backends.at("cudnn").at(0).forward.half_tiles == 0);
    CHECK(mf.backends.at("cudnn").at(0).backward.half_tiles == 0);
}

TEST_CASE("fit_attention: forward + backward sums give one curve for both passes; passes measured apart win") {
    const double peak = 312e12;
    std::vector<calib::AttentionPoint> sums, apart;
    for (double s : {512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0}) {
        calib::AttentionPoint p;
        p.backend = "flash1";
        p.heads = 16;
        p.batch = 16384 / s;
        p.head_dim = 128;
        p.seq = s;
        p.combined = true;
        const double f = 2 * p.batch * 16 * s * s * 128;
        p.forward_backward_us = 3.5 * f / (peak * 0.26 * s / (s + 270)) * 1e6;
        sums.push_back(p);
        calib::AttentionPoint q = p;
        q.combined = false;
        q.forward_us = f / (peak * 0.4 * s / (s + 500)) * 1e6;
        q.forward_backward_us = q.forward_us + 2.5 * f / (peak * 0.3 * s / (s + 900)) * 1e6;
        apart.push_back(q);
    }
    const AttentionModel m = calib::fit_attention(sums, peak);
    REQUIRE(m.backends.count("flash1") == 1);
    const AttentionKernel& k = m.backends.at("flash1").at(0);
    CHECK(k.forward.efficiency == doctest::Approx(0.26).epsilon(1e-3));
    CHECK(k.forward.half_seq == doctest::Approx(270).epsilon(5e-3));
    CHECK(k.backward.efficiency == k.forward.efficiency);
    CHECK(k.backward.half_seq == k.forward.half_seq);
    // The curve gives the sum back: forward + backward = 3.5 F at the chart's throughput.
    GpuSpec g;
    g.peak_flops[static_cast<std::size_t>(DType::bf16)] = peak;
    g.attention = m;
    for (const auto& p : sums)
        CHECK(*calib::attention_predicted_seconds(g, p, calib::AttentionPass::both, DType::bf16) ==
              doctest::Approx(p.forward_backward_us * 1e-6).epsilon(5e-3));
    // With both kinds for one kernel and head dimension, the passes measured apart are fitted.
    std::vector<calib::AttentionPoint> both = sums;
    both.insert(both.end(), apart.begin(), apart.end());
    const AttentionModel mb = calib::fit_attention(both, peak);
    const AttentionKernel& kb = mb.backends.at("flash1").at(0);
    CHECK(kb.forward.efficiency == doctest::Approx(0.4).epsilon(1e-3));
    CHECK(kb.backward.efficiency == doctest::Approx(0.3).epsilon(1e-3));
}

TEST_CASE("the shipped A100 cluster's attention curves predict the published chart") {
    const Config c = load_config(std::string(DTSIM_CONFIGS) + "/runs/gpt3-175b-1024xa100-sc21.json");
    const auto data = calib::load_ground_truth({std::string(DTSIM_CONFIGS) + "/../calibration/data/a100_attention_published.json"});
    REQUIRE(data.kernels.size() == 1);
    std::vector<double> errors;
    for (const auto& p : data.kernels[0].attention) {
        const auto t = calib::attention_predicted_seconds(c.cluster.gpu, p, calib::AttentionPass::both, DType::fp16);
        REQUIRE(t.has_value());
        errors.push_back(std::abs(*t / calib::attention_measured_seconds(p, calib::AttentionPass::both) - 1));
    }
    std::sort(errors.begin(), errors.end());
    CHECK(errors.size() == 24);
    // In-sample, as dtsim calibrate reported when it wrote the curves (selene-a100.json's source).
    CHECK(errors[errors.size() / 2] < 0.04);
    CHECK(errors.back() < 0.06);
    // FlashAttention 1 is the slower kernel at every shape of the chart (causal, head dims 64 and 128).
    for (const auto& p : data.kernels[0].attention)
        CHECK(*calib::attention_predicted_seconds(c.cluster.gpu, {p.gpu, "flash1", p.batch, p.heads, p.head_dim, p.seq, 0, 0, true},
                                                  calib::AttentionPass::both, DType::bf16) >
              *calib::attention_predicted_seconds(c.cluster.gpu, {p.gpu, "flash2", p.batch, p.heads, p.head_dim, p.seq, 0, 0, true},
                                                  calib::AttentionPass::both, DType::bf16));
}

TEST_CASE("a layer with a measured attention curve prices its core as that kernel") {
    TransformerSpec m;
    m.layers = 32;
    m.hidden = 4096;
    m.heads = 32;
    m.kv_heads = 8;
    m.ffn = 14336;
    m.seq = 8192;
    m.vocab = 128256;
    m.mlp = Mlp::swiglu;
    m.dtype = DType::bf16;
    LayerSplit split;
    split.flash_attention = true;
    split.attention_kernel = "flash2";
    GpuSpec with = h100_like();
    GpuSpec without = with;
    without.attention = {};
    const Workload a = make_workload(m, split, with);
    const Workload b = make_workload(m, split, without);
    CHECK(a.measured_attention);
    CHECK_FALSE(b.measured_attention);
    const double fwd = *with.attention_seconds("flash2", 32, 8192, 128, DType::bf16, false);
    const double bwd = *with.attention_seconds("flash2", 32, 8192, 128, DType::bf16, true);
    // The same layer but for the core: the difference is the core's, forward and backward.
    const double gemm_core = b.layer.attention_recompute.seconds;  // 0: no recompute
    CHECK(gemm_core == 0);
    const double d_fwd = a.layer.attention_forward.seconds - b.layer.attention_forward.seconds;
    const double d_bwd = a.layer.attention_backward.seconds - b.layer.attention_backward.seconds;
    // b's core forward (GEMM-priced, causal half) is what a's replaces.
    const double core_b = 0.5 * (without.gemm_seconds(8192.0 * 32, 8192, 128, DType::bf16) +
                                 without.gemm_seconds(8192.0 * 32, 128, 8192, DType::bf16));
    CHECK(d_fwd == doctest::Approx(fwd - core_b));
    CHECK(d_bwd == doctest::Approx(bwd - 2 * core_b));
    // The weight-gradient GEMMs do not include the core: the input-gradient part carries it.
    CHECK(a.layer.attention_backward_weight.seconds == doctest::Approx(b.layer.attention_backward_weight.seconds));
    CHECK(a.layer.attention_backward_input.seconds - b.layer.attention_backward_input.seconds ==
          doctest::Approx(bwd - 2 * core_b));
    // Selective recompute re-runs the measured forward kernel.
    split.recompute = Recompute::selective;
    CHECK(make_workload(m, split, with).layer.attention_recompute.seconds == doctest::Approx(fwd));
}

TEST_CASE("selective recompute without a fused kernel runs the scores' softmax and dropout again") {
    // Megatron-LM checkpoints CoreAttention whole: both products over the full s x s scores and
    // the masked softmax and dropout between them (9 bytes a score through HBM).
    TransformerSpec m;
    m.layers = 48;
    m.hidden = 6144;
    m.heads = 64;
    m.kv_heads = 64;
    m.ffn = 4 * 6144;
    m.seq = 2048;
    m.vocab = 51200;
    m.mlp = Mlp::gelu;
    m.dtype = DType::fp16;
    m.dropout = true;
    LayerSplit split;
    split.tp = 8;
    split.micro_batch = 4;
    split.sequence_parallel = true;
    split.recompute = Recompute::selective;
    GpuSpec g = h100_like();
    g.peak_flops[static_cast<std::size_t>(DType::fp16)] = 989.4e12;
    const Work r = make_workload(m, split, g).layer.attention_recompute;
    const double rows = 2048.0 * 4 * 64 / 8;  // S x (b a / t)
    const double gemms = g.gemm_seconds(rows, 2048, 96, DType::fp16) + g.gemm_seconds(rows, 96, 2048, DType::fp16);
    const double scores = 9.0 * 4 * (64 / 8) * 2048.0 * 2048.0;
    CHECK(r.bytes == doctest::Approx(scores));
    CHECK(r.seconds == doctest::Approx(gemms + g.memory_seconds(scores)));
    CHECK(r.seconds > gemms * 1.05);  // the softmax's share is not negligible at this shape
    // The forward holds the same scores' traffic: the recompute never exceeds the forward.
    CHECK(r.seconds < make_workload(m, split, g).layer.attention_forward.seconds);
}

TEST_CASE("the shipped H100 cluster's attention curves predict the measured kernels") {
    const Config c = load_config(std::string(DTSIM_CONFIGS) + "/runs/llama3-8b-16xh100-fsdp.json");
    const auto data = calib::load_ground_truth({std::string(DTSIM_CONFIGS) + "/../calibration/data/h100_dtsim_torch_kernels.json"});
    REQUIRE(data.kernels.size() == 1);
    std::vector<double> errors;
    for (const auto& p : data.kernels[0].attention)
        for (const auto pass : calib::attention_passes(p)) {
            const auto t = calib::attention_predicted_seconds(c.cluster.gpu, p, pass, DType::bf16);
            REQUIRE(t.has_value());
            errors.push_back(std::abs(*t / calib::attention_measured_seconds(p, pass) - 1));
        }
    std::sort(errors.begin(), errors.end());
    CHECK(errors.size() == 120);
    // In-sample, as dtsim calibrate reported when it wrote the curves (docs/calibration.md).
    CHECK(errors[errors.size() / 2] < 0.08);
    CHECK(errors.back() < 0.25);
}

TEST_CASE("config: attention_kernel names a known kernel; a curve's keys and ranges are checked") {
    const std::string run = std::string(DTSIM_CONFIGS) + "/runs/llama3-8b-16xh100-fsdp.json";
    CHECK_THROWS_WITH_AS(load_config(run, {parse_override("strategy.attention_kernel=flash3x")}),
                         doctest::Contains("flash2"), ConfigError);
    CHECK(load_config(run, {parse_override("strategy.attention_kernel=cudnn")}).strategy.attention_kernel == "cudnn");
    CHECK(load_config(run, {parse_override("strategy.attention_kernel=flash1")}).strategy.attention_kernel == "flash1");
    auto curve = [](const std::string& forward) {
        return parse_override("cluster.gpu.attention={\"flash2\": [{\"head_dim\": 128, \"forward\": " + forward +
                              ", \"backward\": {\"efficiency\": 0.3, \"half_seq\": 1000}}]}");
    };
    CHECK_NOTHROW(load_config(run, {curve(R"({"efficiency": 0.3, "half_seq": 600})")}));
    CHECK_THROWS_WITH_AS(load_config(run, {curve(R"({"efficiency": 1.5, "half_seq": 600})")}),
                         doctest::Contains("$.cluster.gpu.attention.flash2[0].forward.efficiency"), ConfigError);
    CHECK_THROWS_AS(load_config(run, {curve(R"({"efficiency": 0.3, "half_seq": -1})")}), ConfigError);
    CHECK_THROWS_WITH_AS(load_config(run, {curve(R"({"efficiency": 0.3, "half_sq": 600})")}),
                         doctest::Contains("half_seq"), ConfigError);
    // The tile term is optional (0 without it) and not negative.
    CHECK(load_config(run, {curve(R"({"efficiency": 0.3, "half_seq": 600, "half_tiles": 150})")})
              .cluster.gpu.attention.backends.at("flash2").at(0).forward.half_tiles == 150);
    CHECK(load_config(run, {curve(R"({"efficiency": 0.3, "half_seq": 600})")})
              .cluster.gpu.attention.backends.at("flash2").at(0).forward.half_tiles == 0);
    CHECK_THROWS_WITH_AS(load_config(run, {curve(R"({"efficiency": 0.3, "half_seq": 600, "half_tiles": -5})")}),
                         doctest::Contains("$.cluster.gpu.attention.flash2[0].forward.half_tiles"), ConfigError);
    // The fewest tiles a curve was fitted to, a key of the kernel beside head_dim.
    const auto tiles = [](const std::string& min) {
        return parse_override(R"(cluster.gpu.attention={"flash2": [{"head_dim": 128, "min_tiles": )" + min +
                              R"(, "forward": {"efficiency": 0.3, "half_seq": 300, "half_tiles": 100}, "backward": {"efficiency": 0.3, "half_seq": 300}}]})");
    };
    CHECK(load_config(run, {tiles("512")}).cluster.gpu.attention.backends.at("flash2").at(0).min_tiles == 512);
    CHECK_THROWS_WITH_AS(load_config(run, {tiles("-1")}), doctest::Contains("$.cluster.gpu.attention.flash2[0].min_tiles"),
                         ConfigError);
    // A curve fitted to forward + backward sums says so, as a boolean.
    const auto sums = [](const std::string& flag) {
        return parse_override(R"(cluster.gpu.attention={"flash1": [{"head_dim": 128, "from_sums": )" + flag +
                              R"(, "forward": {"efficiency": 0.3, "half_seq": 300}, "backward": {"efficiency": 0.3, "half_seq": 300}}]})");
    };
    CHECK(load_config(run, {sums("true")}).cluster.gpu.attention.backends.at("flash1").at(0).from_sums);
    CHECK_THROWS_WITH_AS(load_config(run, {sums("\"yes\"")}),
                         doctest::Contains("$.cluster.gpu.attention.flash1[0].from_sums"), ConfigError);
}

TEST_CASE("a run whose allocated peak is within the allocator's measured reserve of capacity says it may not fit") {
    auto report = [](const std::string& run, const std::vector<std::string>& sets) {
        std::vector<Override> o;
        for (const auto& t : sets) o.push_back(parse_override(t));
        return simulate(load_config(std::string(DTSIM_CONFIGS) + "/runs/" + run, o), {.keep_trace = false}).report;
    };
    auto says = [](const RunReport& r) {
        return std::any_of(r.caveats.begin(), r.caveats.end(),
                           [](const std::string& s) { return s.find("the run may not fit") != std::string::npos; });
    };
    // ZeRO-1 with a straggler: 78.1 of 80 GiB allocated, 1.9 GiB left, under the 9.8 GiB measured.
    const RunReport tight = report("llama3-8b-16xh100-zero1-straggler.json", {});
    REQUIRE_FALSE(tight.oom);
    CHECK(tight.capacity - tight.peak.bytes < 9.8 * kGiB);
    CHECK(says(tight));
    CHECK(tight.tight_memory);
    CHECK(to_json(tight)["memory"]["tight"] == true);
    // The same with 16 GiB more memory: 17.9 GiB left, no word.
    const RunReport roomy = report("llama3-8b-16xh100-zero1-straggler.json", {"cluster.gpu.hbm_GiB=96"});
    CHECK(roomy.capacity - roomy.peak.bytes > 9.8 * kGiB);
    CHECK_FALSE(says(roomy));
    CHECK_FALSE(roomy.tight_memory);
    CHECK(to_json(roomy)["memory"]["tight"] == false);
    // Out of memory is not tight: 60 GiB.
    const RunReport over = report("llama3-8b-16xh100-zero1-straggler.json", {"cluster.gpu.hbm_GiB=60"});
    REQUIRE(over.oom);
    CHECK_FALSE(over.tight_memory);
    CHECK_FALSE(says(over));
}

TEST_CASE("a run says where its prediction is weakest") {
    auto caveats = [](const std::string& run, const std::vector<std::string>& sets) {
        std::vector<Override> o;
        for (const auto& t : sets) o.push_back(parse_override(t));
        const Config c = load_config(std::string(DTSIM_CONFIGS) + "/runs/" + run, o);
        return prediction_caveats(c, make_workload(c.model.spec, layer_split(c), c.cluster.gpu));
    };
    auto has = [](const std::vector<std::string>& v, const std::string& part) {
        return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return s.find(part) != std::string::npos; });
    };
    // Data parallelism: its collectives take SMs from the compute beside them, a model not measured,
    // said as such; and said where nothing is taken.
    const std::string sms = "compute beside a collective runs on the SMs its NCCL kernel leaves (of 132, one per channel)";
    CHECK(has(caveats("llama3-8b-16xh100-fsdp.json", {}), sms));
    CHECK(has(caveats("llama3-8b-16xh100-fsdp.json", {"cluster.gpu.collectives_take_sms=false"}),
              "NCCL's collectives beside compute take nothing from it (cluster.gpu.collectives_take_sms false)"));
    CHECK_FALSE(has(caveats("llama3-8b-16xh100-fsdp.json", {"strategy.dp=1", "cluster.nodes=1", "cluster.gpus_per_node=1",
                                                            "training.global_batch=4"}),
                    "beside compute"));
    const auto without_sms = [&](const std::string& run, const std::vector<std::string>& sets) {
        auto out = caveats(run, sets);
        std::erase_if(out, [&](const std::string& s) { return s.starts_with(sms); });
        return out;
    };
    // Measured attention, GEMMs fitted to kernels, curves on 2 nodes for a 2-node cluster: nothing to
    // say but the early stop of its full recompute, taken as PyTorch 2.1's, said unless given.
    const auto fsdp = without_sms("llama3-8b-16xh100-fsdp.json", {});
    REQUIRE(fsdp.size() == 1);
    CHECK(fsdp[0].find("recompute_early_stop false") != std::string::npos);
    CHECK(without_sms("llama3-8b-16xh100-fsdp.json", {"strategy.recompute_early_stop=true"}).empty());
    CHECK(without_sms("llama3-8b-16xh100-fsdp.json", {"strategy.recompute_early_stop=false"}).empty());
    CHECK_FALSE(has(caveats("llama3-70b-64xh100-1f1b.json", {"strategy.recompute=full"}), "recompute_early_stop"));
    // PyTorch's context-parallel ring: counted from its code, compiled as Inductor would fuse it;
    // not said of Megatron's (Transformer Engine's) ring.
    const std::string torch_ring = "context parallelism by PyTorch's ring: its fp32 merges and gradient sums counted";
    CHECK(has(caveats("llama3-8b-16xh100-fsdp.json", {"strategy.cp=2", "strategy.dp=8"}), torch_ring));
    CHECK_FALSE(has(caveats("llama3-8b-16xh100-fsdp.json", {"strategy.cp=2", "strategy.dp=8"}), "Inductor"));
    CHECK(has(caveats("llama3-8b-16xh100-fsdp.json", {"strategy.cp=2", "strategy.dp=8", "strategy.compile=true"}),
              "as Inductor would fuse them (not measured)"));
    CHECK_FALSE(has(caveats("llama3-8b-8xh100-megatron.json", {"strategy.cp=2", "strategy.dp=1"}), torch_ring));
    CHECK_FALSE(has(caveats("llama3-8b-16xh100-fsdp.json", {}), torch_ring));
    // What a cluster config says of itself (cluster.caveats), as the shipped DGX B200 does: curves
    // from kernels timed briefly, runs slower than predicted; not said of an H100, nor by name.
    const std::string b200 = "B200-SXM: GEMM and attention curves from published kernels timed briefly";
    {
        const auto run = std::filesystem::temp_directory_path() / "dtsim-caveats-b200.json";
        std::ofstream(run) << R"({"include": [")" << DTSIM_CONFIGS << R"(/clusters/dgx-b200.json", ")" << DTSIM_CONFIGS
                           << R"(/models/llama3-8b.json"], "training": {"global_batch": 8, "micro_batch": 1},
                               "strategy": {"name": "megatron", "flash_attention": true}})";
        const Config c = load_config(run.string(), {});
        std::filesystem::remove(run);
        CHECK(has(prediction_caveats(c, make_workload(c.model.spec, layer_split(c), c.cluster.gpu)), b200));
    }
    CHECK_FALSE(has(caveats("llama3-8b-8xh100-megatron.json", {"cluster.gpu.name=\"B200-SXM\""}), b200));
    CHECK(has(caveats("llama3-8b-8xh100-megatron.json", {R"(cluster.caveats=["our NICs are slower"])"}),
              "our NICs are slower"));
    CHECK_THROWS_WITH(caveats("llama3-8b-8xh100-megatron.json", {R"(cluster.caveats=["", "x"])"}),
                      doctest::Contains("$.cluster.caveats[0]: expected a sentence (a non-empty string)"));
    CHECK_FALSE(has(caveats("llama3-8b-8xh100-megatron.json", {}), b200));
    // Without the attention curves, the core is priced as GEMMs, and the run says so.
    CHECK(has(caveats("llama3-8b-16xh100-fsdp.json", {"cluster.gpu.attention={}"}), "fused attention priced as two GEMMs"));
    // 8 nodes against curves measured on 2.
    CHECK(has(caveats("llama3-70b-64xh100-1f1b.json", {}), "measured on at most 2 nodes, the cluster has 8"));
    // Fewer query tiles a call than the attention curve was measured at (DGX H100's flash2 at head
    // dimension 128: from 512, half at 230 forward and 140 backward): 8 heads of 70B at TP 8 and
    // 2,048 tokens are 8 x 16 = 128 tiles, x(1 + 230/128) = x2.80 forward, x2.09 backward; at
    // 8,192 tokens 512, no longer fewer.
    CHECK(has(caveats("llama3-70b-64xh100-1f1b.json", {"model.seq=2048"}),
              "attention calls of 128 query tiles (batch x heads on a GPU x ceil(seq / 128)), fewer than the 512 the "
              "\"flash2\" curve was measured at: the slowdown of few tiles (forward x2.80, backward x2.09) extrapolated"));
    CHECK_FALSE(has(caveats("llama3-70b-64xh100-1f1b.json", {}), "query tiles"));
    // Tensor parallelism: userbuffers' overlap on the SMs its configuration takes, AsyncTP's as
    // free; the backward's collectives beside the first
    // linear's GEMMs priced on the SMs their kernels leave (with sequence parallelism, also the
    // input's second gather), or free where nothing is taken; nothing where they block (Megatron-LM
    // before its asynchronous all-reduce, torchtitan's TP).
    CHECK(has(caveats("llama3-70b-64xh100-1f1b.json", {"strategy.tp_comm_overlap=true"}),
              "overlapped with their GEMMs by Transformer Engine's userbuffers: each takes the SMs"));
    CHECK(has(caveats("llama3-8b-16xh100-fsdp-tp2.json", {"strategy.tp_comm_overlap=true"}),
              "overlapped with their GEMMs (AsyncTP) at no cost"));
    CHECK(has(caveats("llama3-70b-64xh100-1f1b.json", {"strategy.tp_comm_overlap=true"}),
              "Transformer Engine 2's defaults"));
    CHECK(has(caveats("llama3-8b-16xh100-fsdp-tp2.json",
                      {"strategy.tp_comm_overlap=true", R"(strategy.tp_comm_overlap_cfg={"defaults": "te1"})"}),
              "strategy.tp_comm_overlap_cfg unused: this strategy's tensor parallelism is PyTorch's"));
    CHECK(has(caveats("llama3-70b-64xh100-1f1b.json", {R"(strategy.tp_comm_overlap_cfg={"defaults": "te1"})"}),
              "strategy.tp_comm_overlap_cfg unused: no userbuffers overlap here"));
    const auto plain_tp = caveats("llama3-8b-8xh100-megatron.json", {"strategy.tp=2", "strategy.dp=4", "strategy.sequence_parallel=false"});
    CHECK(has(plain_tp, "the backward's tensor-parallel all-reduces run beside the GEMMs on the SMs their NCCL kernels leave them"));
    CHECK(has(caveats("llama3-8b-8xh100-megatron.json", {"strategy.tp=2", "strategy.dp=4", "strategy.sequence_parallel=false",
                                                         "cluster.gpu.collectives_take_sms=false"}),
              "the backward's tensor-parallel all-reduces run beside the GEMMs at no cost to them"));
    CHECK_FALSE(has(plain_tp, "re-gathers"));
    CHECK(has(caveats("llama3-70b-64xh100-1f1b.json", {}), "re-gathers and reduce-scatters run beside the GEMMs"));
    CHECK_FALSE(has(caveats("llama3-70b-64xh100-1f1b.json", {"strategy.tp_async_backward=false"}), "tensor-parallel"));
    CHECK_FALSE(has(caveats("llama3-70b-64xh100-zbh1.json", {}), "tensor-parallel"));  // a split backward blocks
    CHECK(has(caveats("llama3-70b-32xh100-schedule-file.json", {}), "where the schedule's backward is whole"));
    CHECK_FALSE(has(caveats("llama3-8b-16xh100-fsdp-tp2.json", {}), "tensor-parallel"));  // torchtitan's TP
    // The A100's GEMMs are fitted to kernels; its network has no measured curve.
    const auto a100 = caveats("gpt3-175b-1024xa100-sc21.json", {});
    CHECK_FALSE(has(a100, "fitted end to end"));
    CHECK(has(a100, "no measured curve"));
    // A100 attention from a chart of forward + backward sums: the split is an assumption, said;
    // the H100's flash2 curves measure the passes apart.
    CHECK(has(caveats("gpt3-175b-1024xa100-sc21.json", {"strategy.flash_attention=true"}), "fitted to forward + backward times together"));
    CHECK_FALSE(has(caveats("llama3-8b-16xh100-fsdp.json", {}), "fitted to forward + backward"));
    CHECK(has(caveats("llama3-8b-16xh100-fsdp.json", {"strategy.attention_kernel=flash1"}), "\"flash1\" attention fitted"));
    // A ceiling for the run's dtype fitted to training runs (dtsim calibrate --fit-megatron) is said.
    const auto fitted = caveats("gpt3-175b-1024xa100-sc21.json", {"cluster.gpu.gemm.efficiency_by_dtype={\"fp16\": 0.68}",
                                                                    "cluster.gpu.gemm.datasets=[\"megatron_a100_sc21:1.7B\"]"});
    CHECK(has(fitted, "the fp16 GEMM ceiling of A100-SXM-80GB was fitted end to end"));
}

// The loss is priced and sized op by op (loss_bytes_per_logit, loss_memory_per_logit), nothing fitted to it: PyTorch's fp32
// cross-entropy measured 17.8 ms forward and backward at 8,192 x 128,256 on an H100
// (calibration/data/h100_dtsim_torch_kernels.json, cross_entropy: 8.76 ms forward); eager PyTorch
// kept 4.06 bytes a logit and peaked at 10.06 and 12.06 (h100_dtsim_torch_output_layer.json).
TEST_CASE("the loss: PyTorch's fp32 cross-entropy against its measured time and memory") {
    Config c = load_config(std::string(DTSIM_CONFIGS) + "/runs/llama3-8b-16xh100-fsdp.json",
                           {parse_override("training.micro_batch=1")});
    const Workload w = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
    REQUIRE(c.model.spec.seq == 8192);
    REQUIRE(c.model.spec.vocab == 128256);
    const double logits = 8192.0 * 128256;
    CHECK(w.edge.loss_forward.seconds == doctest::Approx(8.756e-3).epsilon(0.10));
    CHECK(w.edge.loss_forward.seconds + w.edge.loss_backward.seconds == doctest::Approx(17.807e-3).epsilon(0.05));
    CHECK(w.edge.logits_activation_bytes == doctest::Approx(4 * logits));
    CHECK(w.edge.logits_activation_bytes + w.edge.loss_forward_extra_bytes == doctest::Approx(10 * logits));
    CHECK(w.edge.logits_activation_bytes + w.edge.loss_backward_extra_bytes == doctest::Approx(12 * logits));
    // Megatron's in place: 6 bytes at both peaks; fsdp takes PyTorch's, the tensor-parallel strategies Megatron's.
    c.strategy.cross_entropy = CrossEntropy::megatron;
    const Workload m = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
    CHECK(m.edge.logits_activation_bytes + m.edge.loss_forward_extra_bytes == doctest::Approx(6 * logits));
    CHECK(m.edge.logits_activation_bytes + m.edge.loss_backward_extra_bytes == doctest::Approx(6 * logits));
    // flash-attn's fused loss keeps the bf16 logits (2) and allocates their bf16 gradient in the
    // backward (4 at its peak); it reads them once forward (2), reads and writes backward (4).
    c.strategy.cross_entropy = CrossEntropy::fused;
    const Workload f = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
    CHECK(f.edge.logits_activation_bytes == doctest::Approx(2 * logits));
    CHECK(f.edge.loss_forward_extra_bytes == 0);
    CHECK(f.edge.logits_activation_bytes + f.edge.loss_backward_extra_bytes == doctest::Approx(4 * logits));
    CHECK(f.edge.loss_forward.bytes == doctest::Approx(2 * logits));
    CHECK(f.edge.loss_backward.bytes == doctest::Approx(4 * logits));
    c.strategy.cross_entropy.reset();
    CHECK(layer_split(c).cross_entropy == CrossEntropy::pytorch);
    c.strategy.name = "megatron";
    CHECK(layer_split(c).cross_entropy == CrossEntropy::megatron);
}

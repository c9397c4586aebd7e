#include "host/cli.hpp"
#include "host/gemm_shapes.hpp"

#include <doctest/doctest.h>

#include <fstream>

using namespace dtsim::harness;

namespace {
const GemmShape& find(const std::vector<GemmShape>& shapes, const std::string& name) {
    for (const auto& s : shapes)
        if (s.name == name) return s;
    FAIL("no shape named " << name);
    return shapes.front();
}
}  // namespace

TEST_CASE("a GPT layer of Megatron's 7.5B model (h 4096, tp 4, seq 2048, micro-batch 1) has these GEMMs") {
    // SC21 Table 1's 7.5B row: hidden 4096, tp 4; ffn = 4h.
    const auto shapes = transformer_gemm_shapes({4096, 0, 2048, 1, 4});
    REQUIRE(shapes.size() == 12);
    CHECK(find(shapes, "qkv.fwd") == GemmShape{"qkv.fwd", 2048, 3072, 4096, 'N', 'T'});
    CHECK(find(shapes, "qkv.bwd_data") == GemmShape{"qkv.bwd_data", 2048, 4096, 3072, 'N', 'N'});
    CHECK(find(shapes, "qkv.bwd_weight") == GemmShape{"qkv.bwd_weight", 3072, 4096, 2048, 'T', 'N'});
    CHECK(find(shapes, "proj.fwd") == GemmShape{"proj.fwd", 2048, 4096, 1024, 'N', 'T'});
    CHECK(find(shapes, "mlp_up.fwd") == GemmShape{"mlp_up.fwd", 2048, 4096, 4096, 'N', 'T'});
    CHECK(find(shapes, "mlp_down.fwd") == GemmShape{"mlp_down.fwd", 2048, 4096, 4096, 'N', 'T'});
    CHECK(find(shapes, "mlp_down.bwd_weight") == GemmShape{"mlp_down.bwd_weight", 4096, 4096, 2048, 'T', 'N'});
}

TEST_CASE("each backward GEMM does the forward's work, so a layer's backward costs twice its forward") {
    const auto shapes = transformer_gemm_shapes({2304, 0, 2048, 16, 1});
    double fwd = 0, bwd = 0;
    for (const auto& s : shapes) (s.name.find(".fwd") != std::string::npos ? fwd : bwd) += gemm_flops(s);
    CHECK(bwd == doctest::Approx(2 * fwd));
    // 24 * b * s * h^2 forward FLOPs in the four linear layers (Megatron's formula, without attention).
    CHECK(fwd == doctest::Approx(24.0 * 16 * 2048 * 2304.0 * 2304.0));
}

TEST_CASE("tensor parallelism must divide hidden and ffn") {
    CHECK_THROWS_WITH_AS(transformer_gemm_shapes({4096, 0, 2048, 1, 3}), doctest::Contains("not divisible by --tp 3"),
                         ArgError);
    CHECK_THROWS_AS(transformer_gemm_shapes({0, 0, 2048, 1, 1}), ArgError);
    CHECK(transformer_gemm_shapes({4096, 11008, 4096, 1, 2})[6].n == 5504);  // an explicit ffn (LLaMA-7B)
}

TEST_CASE("--shapes takes M,N,K triples separated by ';' or spaces") {
    const auto shapes = parse_gemm_shapes("1024,1024,1024;8192x1024x4096  16,32,64");
    REQUIRE(shapes.size() == 3);
    CHECK(shapes[0] == GemmShape{"user", 1024, 1024, 1024, 'N', 'N'});
    CHECK(shapes[1].m == 8192);
    CHECK(shapes[1].k == 4096);
    CHECK(shapes[2].n == 32);
    CHECK_THROWS_WITH_AS(parse_gemm_shapes("1024,1024"), doctest::Contains("\"1024,1024\""), ArgError);
    CHECK_THROWS_AS(parse_gemm_shapes("1,2,3,4"), ArgError);
    CHECK_THROWS_AS(parse_gemm_shapes("1,-2,3"), ArgError);
    CHECK_THROWS_AS(parse_gemm_shapes(";"), ArgError);
}

TEST_CASE("the GEMM file has gemm.json's sections, the by-shape columns starting m, n, k, tflops") {
    std::ifstream f(std::string(DTSIM_CALIB_DATA_DIR) + "/gemm.json");
    REQUIRE(f.good());
    const auto ref = nlohmann::json::parse(f);
    std::vector<GemmResult> results = {{{"qkv.fwd", 2048, 3072, 4096, 'N', 'T'}, 100e-6},
                                       {{"user", 1024, 1024, 1024, 'N', 'N'}, 10e-6}};
    const auto out = gemm_json({{"gpu", "NVIDIA H100 80GB HBM3"}}, "NVIDIA H100 80GB HBM3", "bf16", results, 989.4);
    CHECK(out.contains("description"));
    REQUIRE(out.contains("max_achievable"));
    const auto& max_row = out["max_achievable"]["rows"][0];
    for (const auto& [k, v] : ref["max_achievable"]["rows"][0].items()) {
        CAPTURE(k);
        REQUIRE(max_row.contains(k));
        CHECK(max_row[k].is_number() == v.is_number());
        CHECK(max_row[k].is_string() == v.is_string());
    }
    CHECK(max_row["shape"] == "2048x3072x4096");
    CHECK(max_row["tflops"].get<double>() == doctest::Approx(2.0 * 2048 * 3072 * 4096 / 100e-6 / 1e12).epsilon(1e-3));
    const auto& table = out["nvidia_h100_80gb_hbm3_bf16_by_shape"];
    const auto& ref_cols = ref["h100_bf16_by_shape"]["columns"];
    for (std::size_t i = 0; i < ref_cols.size(); ++i) CHECK(table["columns"][i] == ref_cols[i]);
    CHECK(table["rows"][1][0] == 1024);
    CHECK(table["rows"][1][3].get<double>() == doctest::Approx(214.75));
    CHECK(table["rows"][0][6] == "NT");
}

TEST_CASE("slug makes identifiers from GPU names") {
    CHECK(slug("NVIDIA H100 80GB HBM3") == "nvidia_h100_80gb_hbm3");
    CHECK(slug("A100-SXM4-40GB") == "a100_sxm4_40gb");
    CHECK(slug("--") == "gpu");
}

// The GEMMs of a transformer layer, as one tensor-parallel rank runs them, and the JSON
// that dtsim-gemm writes (the schema of calibration/data/gemm.json). No CUDA here.
//
// Shapes are written in row-major math: C[m, n] = op(A)[m, k] * op(B)[k, n], with the
// operands laid out as PyTorch's nn.Linear has them (weight stored [out, in]):
//   forward      Y[T, out]  = X[T, in] * W^T          A "N" (stored [m,k]), B "T" (stored [n,k])
//   backward dX  dX[T, in]  = dY[T, out] * W           A "N", B "N" (stored [k,n])
//   backward dW  dW[out,in] = dY^T * X                 A "T" (stored [k,m]), B "N"
// with T = micro_batch * seq tokens. Megatron-LM's tensor parallelism splits the QKV and
// MLP-up outputs and the projection and MLP-down inputs by tp.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::harness {

struct GemmShape {
    std::string name;  // e.g. "qkv.fwd", "mlp_down.bwd_weight", "user"
    std::int64_t m = 0, n = 0, k = 0;
    char a_layout = 'N';  // 'N': A stored [m, k]; 'T': stored [k, m]
    char b_layout = 'N';  // 'N': B stored [k, n]; 'T': stored [n, k]
    friend bool operator==(const GemmShape&, const GemmShape&) = default;
};

[[nodiscard]] double gemm_flops(const GemmShape& s);

struct TransformerDims {
    std::int64_t hidden = 0;
    std::int64_t ffn = 0;  // 0 means 4 * hidden
    std::int64_t seq = 0;
    std::int64_t micro_batch = 1;
    std::int64_t tp = 1;
};

// The 12 GEMMs of one layer on one tensor-parallel rank: qkv, proj, mlp_up, mlp_down,
// each .fwd, .bwd_data and .bwd_weight. Throws ArgError (host/cli.hpp) when a dimension is not
// positive or hidden / ffn is not divisible by tp.
std::vector<GemmShape> transformer_gemm_shapes(const TransformerDims& dims);

// "4096,4096,4096;8192,1024,4096" (or "4096x4096x4096", separated by ';' or spaces):
// shapes named "user", layout NN. Throws ArgError naming the bad item.
std::vector<GemmShape> parse_gemm_shapes(std::string_view text);

struct GemmResult {
    GemmShape shape;
    double seconds = 0;  // mean time of one GEMM
    [[nodiscard]] double tflops() const { return seconds > 0 ? gemm_flops(shape) / seconds / 1e12 : 0.0; }
};

// A lower-case identifier made from a GPU name: "NVIDIA H100 80GB HBM3" -> "nvidia_h100_80gb_hbm3".
std::string slug(std::string_view text);

// {"description", "meta", "max_achievable": {"source", "rows": [{gpu, dtype, tflops, shape[, peak]}]},
//  "<gpu>_<dtype>_by_shape": {"source", "columns": ["m","n","k","tflops","time_us","name","layout"],
//  "rows": [[m, n, k, tflops, time_us, name, layout], ...]}} -- the first four columns are
// gemm.json's.
nlohmann::json gemm_json(const nlohmann::json& meta, std::string_view gpu, std::string_view dtype,
                         const std::vector<GemmResult>& results, std::optional<double> peak_tflops);

}  // namespace dtsim::harness

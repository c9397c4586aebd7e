// dtsim-gemm: cuBLAS GEMM throughput over a transformer layer's shapes (calibration/README.md).
//
// Shapes are row-major C[m,n] = op(A)[m,k] op(B)[k,n] (host/gemm_shapes.hpp); cuBLAS is
// column-major, so each GEMM runs as C^T = op(B)^T op(A)^T with m and n swapped. Inputs are
// bf16 or fp16 with fp32 accumulation (or fp32 / tf32), through cublasGemmEx or
// cublasLtMatmul (with its top heuristic algorithm and a 32 MiB workspace).
#include "gpu/cuda_check.hpp"
#include "gpu/kernels.hpp"
#include "host/cli.hpp"
#include "host/gemm_shapes.hpp"

#include <CLI/CLI.hpp>
#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>

namespace dtsim::harness::gpu {
namespace {

struct GemmType {
    std::string name;          // as written in the JSON: bf16, fp16, tf32, fp32
    cudaDataType_t data;       // A, B and C
    cublasComputeType_t compute;
    ElemType elem;
    std::size_t size;
};

GemmType parse_gemm_type(const std::string& s) {
    if (s == "bf16" || s == "bfloat16") return {"bf16", CUDA_R_16BF, CUBLAS_COMPUTE_32F, ElemType::bf16, 2};
    if (s == "fp16" || s == "half") return {"fp16", CUDA_R_16F, CUBLAS_COMPUTE_32F, ElemType::f16, 2};
    if (s == "tf32") return {"tf32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, ElemType::f32, 4};
    if (s == "fp32" || s == "float") return {"fp32", CUDA_R_32F, CUBLAS_COMPUTE_32F, ElemType::f32, 4};
    throw ArgError(fmt::format("--dtype: unknown GEMM type \"{}\" (bf16, fp16, tf32, fp32)", s));
}

// The column-major call for a row-major shape.
struct ColumnMajor {
    cublasOperation_t op_first, op_second;  // applied to B and to A
    std::int64_t m, n, k;                   // cuBLAS's m = shape.n, n = shape.m
    std::int64_t ld_first, ld_second, ld_c;
};

ColumnMajor column_major(const GemmShape& s) {
    ColumnMajor c{};
    c.op_first = s.b_layout == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
    c.op_second = s.a_layout == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
    c.m = s.n;
    c.n = s.m;
    c.k = s.k;
    c.ld_first = s.b_layout == 'N' ? s.n : s.k;   // B stored [k,n] or [n,k], row-major
    c.ld_second = s.a_layout == 'N' ? s.k : s.m;  // A stored [m,k] or [k,m], row-major
    c.ld_c = s.n;
    return c;
}

class Runner {
public:
    Runner(int device, const GemmType& type, bool use_lt, std::size_t max_elems_a, std::size_t max_elems_b,
           std::size_t max_elems_c)
        : type_(type), use_lt_(use_lt) {
        DTSIM_CUDA(cudaSetDevice(device));
        DTSIM_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        DTSIM_CUBLAS(cublasCreate(&blas_));
        DTSIM_CUBLAS(cublasSetStream(blas_, stream_));
        DTSIM_CUBLAS(cublasLtCreate(&lt_));
        DTSIM_CUDA(cudaMalloc(&a_, max_elems_a * type.size));
        DTSIM_CUDA(cudaMalloc(&b_, max_elems_b * type.size));
        DTSIM_CUDA(cudaMalloc(&c_, max_elems_c * type.size));
        DTSIM_CUDA(cudaMalloc(&workspace_, kWorkspace));
        fill_uniform_typed(a_, static_cast<std::int64_t>(max_elems_a), type.elem, 1, 1.0f, stream_);
        fill_uniform_typed(b_, static_cast<std::int64_t>(max_elems_b), type.elem, 2, 1.0f, stream_);
        DTSIM_CUDA(cudaMemsetAsync(c_, 0, max_elems_c * type.size, stream_));
        DTSIM_CUDA(cudaEventCreate(&start_));
        DTSIM_CUDA(cudaEventCreate(&stop_));
        DTSIM_CUDA(cudaStreamSynchronize(stream_));
    }
    ~Runner() {
        cudaStreamSynchronize(stream_);
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
        cudaFree(a_);
        cudaFree(b_);
        cudaFree(c_);
        cudaFree(workspace_);
        cublasLtDestroy(lt_);
        cublasDestroy(blas_);
        cudaStreamDestroy(stream_);
    }
    Runner(const Runner&) = delete;
    Runner& operator=(const Runner&) = delete;

    // Mean seconds per GEMM.
    double time(const GemmShape& s, int warmup, int iters) {
        const ColumnMajor c = column_major(s);
        LtPlan plan;
        if (use_lt_) plan = make_plan(c);
        const auto run_once = [&] {
            if (use_lt_)
                run_lt(c, plan);
            else
                run_gemmex(c);
        };
        for (int i = 0; i < warmup; ++i) run_once();
        DTSIM_CUDA(cudaEventRecord(start_, stream_));
        for (int i = 0; i < iters; ++i) run_once();
        DTSIM_CUDA(cudaEventRecord(stop_, stream_));
        DTSIM_CUDA(cudaEventSynchronize(stop_));
        float ms = 0;
        DTSIM_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
        if (use_lt_) plan.destroy();
        return ms * 1e-3 / iters;
    }

private:
    static constexpr std::size_t kWorkspace = 32u << 20;

    struct LtPlan {
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
        cublasLtMatmulAlgo_t algo{};
        void destroy() {
            if (out) cublasLtMatrixLayoutDestroy(out);
            if (second) cublasLtMatrixLayoutDestroy(second);
            if (first) cublasLtMatrixLayoutDestroy(first);
            if (desc) cublasLtMatmulDescDestroy(desc);
        }
    };

    void run_gemmex(const ColumnMajor& c) {
        const float alpha = 1.0f, beta = 0.0f;
        DTSIM_CUBLAS(cublasGemmEx(blas_, c.op_first, c.op_second, static_cast<int>(c.m), static_cast<int>(c.n),
                                  static_cast<int>(c.k), &alpha, b_, type_.data, static_cast<int>(c.ld_first), a_,
                                  type_.data, static_cast<int>(c.ld_second), &beta, c_, type_.data,
                                  static_cast<int>(c.ld_c), type_.compute, CUBLAS_GEMM_DEFAULT));
    }

    LtPlan make_plan(const ColumnMajor& c) {
        LtPlan p;
        DTSIM_CUBLAS(cublasLtMatmulDescCreate(&p.desc, type_.compute, CUDA_R_32F));
        DTSIM_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.op_first,
                                                    sizeof c.op_first));
        DTSIM_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.op_second,
                                                    sizeof c.op_second));
        // Stored (column-major) shapes: first operand m x k (or k x m), second k x n (or n x k).
        const bool first_n = c.op_first == CUBLAS_OP_N;
        const bool second_n = c.op_second == CUBLAS_OP_N;
        DTSIM_CUBLAS(cublasLtMatrixLayoutCreate(&p.first, type_.data, static_cast<std::uint64_t>(first_n ? c.m : c.k),
                                                static_cast<std::uint64_t>(first_n ? c.k : c.m), c.ld_first));
        DTSIM_CUBLAS(cublasLtMatrixLayoutCreate(&p.second, type_.data, static_cast<std::uint64_t>(second_n ? c.k : c.n),
                                                static_cast<std::uint64_t>(second_n ? c.n : c.k), c.ld_second));
        DTSIM_CUBLAS(cublasLtMatrixLayoutCreate(&p.out, type_.data, static_cast<std::uint64_t>(c.m),
                                                static_cast<std::uint64_t>(c.n), c.ld_c));
        cublasLtMatmulPreference_t pref = nullptr;
        DTSIM_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
        const std::size_t ws = kWorkspace;
        DTSIM_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                          sizeof ws));
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        const cublasStatus_t st =
            cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.first, p.second, p.out, p.out, pref, 1, &result, &found);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            p.destroy();
            throw GpuError(fmt::format("cublasLt has no algorithm for this shape and type ({})",
                                       cublasGetStatusString(st)));
        }
        p.algo = result.algo;
        return p;
    }

    void run_lt(const ColumnMajor&, const LtPlan& p) {
        const float alpha = 1.0f, beta = 0.0f;
        DTSIM_CUBLAS(cublasLtMatmul(lt_, p.desc, &alpha, b_, p.first, a_, p.second, &beta, c_, p.out, c_, p.out,
                                    &p.algo, workspace_, kWorkspace, stream_));
    }

    GemmType type_;
    bool use_lt_;
    cudaStream_t stream_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    cublasLtHandle_t lt_ = nullptr;
    void* a_ = nullptr;
    void* b_ = nullptr;
    void* c_ = nullptr;
    void* workspace_ = nullptr;
    cudaEvent_t start_ = nullptr;
    cudaEvent_t stop_ = nullptr;
};

struct Options {
    std::optional<std::int64_t> hidden;
    std::int64_t ffn = 0;
    std::int64_t seq = 2048;
    std::int64_t micro_batch = 1;
    std::int64_t tp = 1;
    std::string shapes;
    std::vector<std::string> dtypes{"bf16", "fp16"};
    std::string api = "gemmex";
    int iters = 50;
    int warmup = 10;
    int device = 0;
    std::optional<double> peak_tflops;
    std::string out;
};

void add_options(CLI::App& app, Options& o) {
    app.add_option_function<std::int64_t>(
           "--hidden", [&o](std::int64_t h) { o.hidden = h; },
           "model hidden size (default 4096 unless only --shapes is given)")
        ->type_name("H");
    app.add_option("--ffn", o.ffn, "MLP inner size (default 4 * hidden)")->type_name("F");
    app.add_option("--seq", o.seq, "sequence length")->type_name("S")->capture_default_str();
    app.add_option("--micro-batch", o.micro_batch, "micro-batch size")->type_name("B")->capture_default_str();
    app.add_option("--tp", o.tp, "tensor-parallel degree (splits QKV/MLP-up outputs, proj/MLP-down inputs)")
        ->type_name("T")
        ->capture_default_str();
    app.add_option("--shapes", o.shapes, "more shapes: \"M,N,K;M,N,K\" (row-major C[M,N] = A[M,K] B[K,N])")
        ->type_name("LIST");
    app.add_option("--dtype", o.dtypes, "bf16, fp16 (fp32 accumulate), tf32, fp32; comma-separated")
        ->delimiter(',')
        ->type_name("LIST")
        ->default_str("bf16,fp16");
    app.add_option("--api", o.api, "gemmex (cublasGemmEx) or lt (cublasLtMatmul)")
        ->check(CLI::IsMember({"gemmex", "lt"}))
        ->type_name("API")
        ->capture_default_str();
    app.add_option("--iters", o.iters, "timed GEMMs per shape")
        ->check(at_least(1))
        ->type_name("N")
        ->capture_default_str();
    app.add_option("--warmup", o.warmup, "untimed GEMMs per shape")
        ->check(at_least(0))
        ->type_name("N")
        ->capture_default_str();
    app.add_option("--device", o.device, "which GPU")
        ->check(at_least(0))
        ->type_name("GPU")
        ->capture_default_str();
    app.add_option_function<double>(
           "--peak-tflops", [&o](double x) { o.peak_tflops = x; },
           "the GPU's dense peak for the dtype, recorded as max_achievable's peak")
        ->check(CLI::PositiveNumber)
        ->type_name("X");
    app.add_option("--out", o.out, "write JSON (schema of calibration/data/gemm.json)")->type_name("FILE");
}

int run(const Options& o, const std::string& command) {
    std::vector<GemmShape> shapes;
    if (o.hidden || o.shapes.empty()) {
        TransformerDims d;
        d.hidden = o.hidden.value_or(4096);
        d.ffn = o.ffn;
        d.seq = o.seq;
        d.micro_batch = o.micro_batch;
        d.tp = o.tp;
        shapes = transformer_gemm_shapes(d);
    }
    if (!o.shapes.empty()) {
        auto more = parse_gemm_shapes(o.shapes);
        shapes.insert(shapes.end(), more.begin(), more.end());
    }
    if (o.dtypes.empty()) throw ArgError("--dtype: no type given");
    std::vector<GemmType> types;
    for (const auto& name : o.dtypes) types.push_back(parse_gemm_type(name));
    const std::string& api = o.api;
    const int iters = o.iters;
    const int warmup = o.warmup;
    const int device = o.device;
    const std::optional<double> peak = o.peak_tflops;

    std::size_t max_a = 1, max_b = 1, max_c = 1;
    for (const auto& s : shapes) {
        max_a = std::max(max_a, static_cast<std::size_t>(s.m * s.k));
        max_b = std::max(max_b, static_cast<std::size_t>(s.k * s.n));
        max_c = std::max(max_c, static_cast<std::size_t>(s.m * s.n));
    }
    DTSIM_CUDA(cudaSetDevice(device));
    cudaDeviceProp prop{};
    DTSIM_CUDA(cudaGetDeviceProperties(&prop, device));
    const std::string gpu = prop.name;
    fmt::print("# dtsim-gemm on {} (GPU {}), cuBLAS {} via {}, {} warmup + {} timed per shape\n", gpu, device,
               [] {
                   int v = 0;
                   cublasGetProperty(MAJOR_VERSION, &v);
                   int mi = 0;
                   cublasGetProperty(MINOR_VERSION, &mi);
                   return fmt::format("{}.{}", v, mi);
               }(),
               api, warmup, iters);

    nlohmann::json doc;
    for (const GemmType& type : types) {
        Runner runner(device, type, api == "lt", max_a, max_b, max_c);
        std::vector<GemmResult> results;
        fmt::print("#\n# {:<22} {:>7} {:>7} {:>7} {:>6} {:>10} {:>9}\n", fmt::format("{} shape", type.name), "m", "n",
                   "k", "layout", "time(us)", "TFLOP/s");
        for (const auto& s : shapes) {
            GemmResult r{s, runner.time(s, warmup, iters)};
            fmt::print("  {:<22} {:>7} {:>7} {:>7} {:>6} {:>10.2f} {:>9.1f}\n", s.name, s.m, s.n, s.k,
                       fmt::format("{}{}", s.a_layout, s.b_layout), r.seconds * 1e6, r.tflops());
            std::fflush(stdout);
            results.push_back(r);
        }
        nlohmann::json meta = run_meta("dtsim-gemm", gpu, command);
        meta.update({
            {"device", device},
            {"api", api == "lt" ? "cublasLtMatmul" : "cublasGemmEx"},
            {"iters", iters},
            {"warmup", warmup},
            {"dtypes", o.dtypes},
            {"accumulate", "fp32"},
            {"timing", "CUDA events around --iters back-to-back GEMMs; inputs stay in place (L2 not flushed)"},
        });
        auto part = gemm_json(meta, gpu, type.name, results, peak);
        if (doc.is_null()) {
            doc = std::move(part);
        } else {
            for (auto& row : part["max_achievable"]["rows"]) doc["max_achievable"]["rows"].push_back(row);
            for (auto& [key, value] : part.items())
                if (key != "description" && key != "meta" && key != "max_achievable") doc[key] = value;
        }
    }
    if (!o.out.empty()) {
        write_json_file(o.out, doc);
        fmt::print("# wrote {}\n", o.out);
    }
    return 0;
}

}  // namespace
}  // namespace dtsim::harness::gpu

int main(int argc, char** argv) {
    using namespace dtsim::harness;
    CLI::App app{"cuBLAS GEMM throughput over a transformer layer's shapes and given shapes", "dtsim-gemm"};
    app.footer("Exit status: 0 done, 1 a run failed, 2 bad arguments.");
    gpu::Options options;
    gpu::add_options(app, options);
    return run_tool(app, argc, argv, [&] { return gpu::run(options, command_line(argc, argv)); });
}

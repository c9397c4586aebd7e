// dtsim-membw: the bandwidth that memory-bound kernels reach on one GPU (calibration/README.md).
//
// Two streaming kernels over fp32 arrays from --min-bytes to --max-bytes per array (powers of
// two): copy, y = x (2 bytes moved per byte of array), and triad, a = b + s c (3 per byte), as
// in McCalpin's STREAM. Each size: --warmup untimed runs, then the mean of --iters
// back-to-back runs between CUDA events; GB/s = bytes moved / time (GB = 10^9 bytes). This is
// what an element-wise or normalisation kernel of a training step can reach, against the
// datasheet's HBM bandwidth that the cost model takes by default.
#include "gpu/cuda_check.hpp"
#include "gpu/kernels.hpp"
#include "host/cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

namespace dtsim::harness::gpu {
namespace {

struct Options {
    std::int64_t min_bytes = std::int64_t{1} << 20;
    std::int64_t max_bytes = std::int64_t{4} << 30;
    int iters = 20;
    int warmup = 5;
    int device = 0;
    std::string out;
};

struct Row {
    std::string kernel;
    std::int64_t bytes_per_array;
    double bytes_moved;
    double seconds;
};

int run(const Options& o, const std::string& command) {
    if (o.min_bytes < 16 || o.max_bytes < o.min_bytes)
        throw ArgError(fmt::format("--min-bytes {} and --max-bytes {}: expected 16 <= min <= max", o.min_bytes,
                                   o.max_bytes));
    DTSIM_CUDA(cudaSetDevice(o.device));
    cudaDeviceProp prop{};
    DTSIM_CUDA(cudaGetDeviceProperties(&prop, o.device));
    const std::string gpu = prop.name;
    const std::int64_t max_n = o.max_bytes / 4 / 4 * 4;
    float *a = nullptr, *b = nullptr, *c = nullptr;
    DTSIM_CUDA(cudaMalloc(&a, static_cast<std::size_t>(max_n) * 4));
    DTSIM_CUDA(cudaMalloc(&b, static_cast<std::size_t>(max_n) * 4));
    DTSIM_CUDA(cudaMalloc(&c, static_cast<std::size_t>(max_n) * 4));
    cudaStream_t stream = nullptr;
    DTSIM_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t start = nullptr, stop = nullptr;
    DTSIM_CUDA(cudaEventCreate(&start));
    DTSIM_CUDA(cudaEventCreate(&stop));
    fill_uniform(b, max_n, 1, 0, max_n, 1.0f, stream);
    fill_uniform(c, max_n, 2, 0, max_n, 1.0f, stream);
    DTSIM_CUDA(cudaStreamSynchronize(stream));

    fmt::print("# dtsim-membw on {} (GPU {}), {} warmup + {} timed per size\n", gpu, o.device, o.warmup, o.iters);
    fmt::print("# {:<6} {:>14} {:>12} {:>10}\n", "kernel", "bytes/array", "time(us)", "GB/s");
    std::vector<Row> rows;
    for (std::int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
        const std::int64_t n = bytes / 4 / 4 * 4;
        for (const char* kernel : {"copy", "triad"}) {
            const bool copy = std::string(kernel) == "copy";
            auto once = [&] {
                if (copy)
                    stream_copy(b, a, n, stream);
                else
                    stream_triad(b, c, a, n, 3.0f, stream);
            };
            for (int i = 0; i < o.warmup; ++i) once();
            DTSIM_CUDA(cudaEventRecord(start, stream));
            for (int i = 0; i < o.iters; ++i) once();
            DTSIM_CUDA(cudaEventRecord(stop, stream));
            DTSIM_CUDA(cudaEventSynchronize(stop));
            float ms = 0;
            DTSIM_CUDA(cudaEventElapsedTime(&ms, start, stop));
            const Row r{kernel, n * 4, (copy ? 2.0 : 3.0) * static_cast<double>(n) * 4, ms * 1e-3 / o.iters};
            fmt::print("  {:<6} {:>14} {:>12.2f} {:>10.1f}\n", r.kernel, r.bytes_per_array, r.seconds * 1e6,
                       r.bytes_moved / r.seconds / 1e9);
            std::fflush(stdout);
            rows.push_back(r);
        }
        if (bytes > o.max_bytes / 2) break;  // the next doubling would pass --max-bytes
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);

    if (!o.out.empty()) {
        nlohmann::json table = nlohmann::json::array();
        for (const Row& r : rows)
            table.push_back({{"kernel", r.kernel},
                             {"bytes_per_array", r.bytes_per_array},
                             {"bytes_moved", r.bytes_moved},
                             {"time_us", r.seconds * 1e6},
                             {"GBps", r.bytes_moved / r.seconds / 1e9}});
        nlohmann::json meta = run_meta("dtsim-membw", gpu, command);
        meta.update({{"device", o.device},
                     {"memory_bytes", prop.totalGlobalMem},
                     {"iters", o.iters},
                     {"warmup", o.warmup},
                     {"timing", "CUDA events around --iters back-to-back kernels"}});
        const nlohmann::json doc = {
            {"description", "Memory-bound kernel bandwidth measured by dtsim-membw: copy (y = x) and triad "
                            "(a = b + s c) over fp32 arrays; GBps = bytes moved / mean time (GB = 1e9 bytes)"},
            {"meta", meta},
            {"memory_bandwidth", {{"gpu", gpu}, {"rows", table}}},
        };
        write_json_file(o.out, doc);
        fmt::print("# wrote {}\n", o.out);
    }
    return 0;
}

}  // namespace
}  // namespace dtsim::harness::gpu

int main(int argc, char** argv) {
    using namespace dtsim::harness;
    CLI::App app{"The bandwidth memory-bound kernels reach on one GPU (STREAM's copy and triad)", "dtsim-membw"};
    app.footer("Exit status: 0 done, 1 a run failed, 2 bad arguments.");
    gpu::Options o;
    app.add_option("--min-bytes", o.min_bytes, "smallest array (bytes; K, M, G suffixes)")
        ->transform(byte_size())
        ->type_name("SIZE")
        ->capture_default_str();
    app.add_option("--max-bytes", o.max_bytes, "largest array (bytes; three arrays are allocated)")
        ->transform(byte_size())
        ->type_name("SIZE")
        ->capture_default_str();
    app.add_option("--iters", o.iters, "timed runs per size")->check(at_least(1))->type_name("N")->capture_default_str();
    app.add_option("--warmup", o.warmup, "untimed runs per size")->check(at_least(0))->type_name("N")->capture_default_str();
    app.add_option("--device", o.device, "which GPU")->check(at_least(0))->type_name("GPU")->capture_default_str();
    app.add_option("--out", o.out, "write JSON")->type_name("FILE");
    return run_tool(app, argc, argv, [&] { return gpu::run(o, command_line(argc, argv)); });
}

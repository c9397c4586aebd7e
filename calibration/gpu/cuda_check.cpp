#include "gpu/cuda_check.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <ctime>
#include <filesystem>
#include <unistd.h>

namespace dtsim::harness::gpu {
namespace {
std::string where(const char* file, int line) {
    return fmt::format("{}:{}", std::filesystem::path(file).filename().string(), line);
}
}  // namespace

void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
    throw GpuError(fmt::format("{}: {} failed: {} ({})", where(file, line), call, cudaGetErrorString(e),
                               cudaGetErrorName(e)));
}

void throw_nccl(ncclResult_t e, const char* call, const char* file, int line) {
    const char* last = ncclGetLastError(nullptr);
    throw GpuError(fmt::format("{}: {} failed: {}{}{} (set NCCL_DEBUG=WARN for NCCL's own log)", where(file, line),
                               call, ncclGetErrorString(e), last != nullptr && *last != '\0' ? ": " : "",
                               last != nullptr ? last : ""));
}

void throw_cublas(cublasStatus_t e, const char* call, const char* file, int line) {
    throw GpuError(fmt::format("{}: {} failed: {} ({})", where(file, line), call, cublasGetStatusString(e),
                               cublasGetStatusName(e)));
}

std::string nccl_version_string() {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
    // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z since 2.9.
    if (v < 2900) return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
    return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

std::string cuda_runtime_version_string() {
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "unknown";
    return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

std::string cuda_driver_version_string() {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) return "unknown";
    return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

std::string utc_timestamp() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string host_name() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
    return buf;
}

nlohmann::json run_meta(const std::string& tool, const std::string& gpu, const std::string& command) {
    return {{"tool", tool},
            {"gpu", gpu},
            {"cuda_runtime", cuda_runtime_version_string()},
            {"cuda_driver", cuda_driver_version_string()},
            {"date", utc_timestamp()},
            {"host", host_name()},
            {"command", command}};
}

}  // namespace dtsim::harness::gpu

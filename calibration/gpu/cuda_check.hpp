// Error checks for CUDA, NCCL and cuBLAS calls: a failed call throws GpuError whose
// message names the call, the source line and the library's own explanation.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <nlohmann/json_fwd.hpp>

#include <stdexcept>
#include <string>

namespace dtsim::harness::gpu {

class GpuError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_nccl(ncclResult_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t e, const char* call, const char* file, int line);

// "2.28.9" from ncclGetVersion; "CUDA 13.0" style strings for the runtime and driver.
std::string nccl_version_string();
std::string cuda_runtime_version_string();
std::string cuda_driver_version_string();
// The current UTC time as 2025-01-31T12:00:00Z.
std::string utc_timestamp();
std::string host_name();
// What every tool's output records of its run: the tool, the GPU, the CUDA runtime and driver,
// the date, the host and the command line; each tool adds its own fields.
nlohmann::json run_meta(const std::string& tool, const std::string& gpu, const std::string& command);

}  // namespace dtsim::harness::gpu

#define DTSIM_CUDA(call)                                                                              \
    do {                                                                                              \
        const cudaError_t dtsim_e_ = (call);                                                          \
        if (dtsim_e_ != cudaSuccess) ::dtsim::harness::gpu::throw_cuda(dtsim_e_, #call, __FILE__, __LINE__); \
    } while (0)

#define DTSIM_NCCL(call)                                                                              \
    do {                                                                                              \
        const ncclResult_t dtsim_e_ = (call);                                                         \
        if (dtsim_e_ != ncclSuccess) ::dtsim::harness::gpu::throw_nccl(dtsim_e_, #call, __FILE__, __LINE__); \
    } while (0)

#define DTSIM_CUBLAS(call)                                                                            \
    do {                                                                                              \
        const cublasStatus_t dtsim_e_ = (call);                                                       \
        if (dtsim_e_ != CUBLAS_STATUS_SUCCESS)                                                        \
            ::dtsim::harness::gpu::throw_cublas(dtsim_e_, #call, __FILE__, __LINE__);                   \
    } while (0)

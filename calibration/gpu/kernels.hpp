// The harness's few CUDA kernels, behind host-callable launchers (kernels.cu is the only
// file nvcc compiles). Every launcher enqueues on `stream` and returns at once; launch
// errors are thrown (std::runtime_error naming the CUDA error) by the launcher.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dtsim::harness::gpu {

// Element types the sweeps use (nccl-tests' -d names map onto these).
enum class ElemType : std::uint8_t { f32, f16, bf16, f64, i32, i8, u8 };

// p[i] = scale * u(seed, index_offset + i) for index_offset + i < valid_limit, else 0,
// with u a hash-based uniform value in [-1, 1): the same index gives the same value on
// every GPU, so shards loaded on different ranks are pieces of one weight.
void fill_uniform(float* p, std::int64_t n, std::uint64_t seed, std::int64_t index_offset, std::int64_t valid_limit,
                  float scale, cudaStream_t stream);
// The same for GEMM inputs of type f32, f16 or bf16.
void fill_uniform_typed(void* p, std::int64_t n, ElemType type, std::uint64_t seed, float scale, cudaStream_t stream);
// p[i] = value (any type).
void fill_value(void* p, std::int64_t n, ElemType type, double value, cudaStream_t stream);
// Adds to *wrong the number of p[i] that differ from the expected value: `value` for
// all i, or, when segment > 0, (i / segment) % 4 + 1 (an all_gather of the check pattern).
void count_mismatches(const void* p, std::int64_t n, ElemType type, double value, std::int64_t segment,
                      unsigned long long* wrong, cudaStream_t stream);

// The puzzle model's layer: y = relu(x W); backward recomputes z = x W.
void relu_inplace(float* p, std::int64_t n, cudaStream_t stream);
// z <- dy * (z > 0)
void relu_backward(const float* dy, float* z, std::int64_t n, cudaStream_t stream);
// y = a * x
void scale_copy(const float* x, float* y, std::int64_t n, float a, cudaStream_t stream);
// a += b
void add_inplace(float* a, const float* b, std::int64_t n, cudaStream_t stream);

struct AdamParams {
    float lr = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    int step = 1;  // the step being taken (bias correction)
};
// One Adam step on n elements; m and v are the optimizer state's two halves.
void adam_step(float* w, float* m, float* v, const float* g, std::int64_t n, AdamParams params, cudaStream_t stream);

// Memory-bound kernels for dtsim-membw, n a multiple of 4 and the arrays 16-byte aligned
// (cudaMalloc's): y = x (reads n floats, writes n), a = b + s c (reads 2n, writes n).
void stream_copy(const float* x, float* y, std::int64_t n, cudaStream_t stream);
void stream_triad(const float* b, const float* c, float* a, std::int64_t n, float s, cudaStream_t stream);

// What compare_weights accumulates on the device.
struct CompareStats {
    unsigned int max_abs_bits = 0;    // bit pattern of the largest |w - ref| (a non-negative float)
    unsigned int pad = 0;
    unsigned long long mismatches = 0;  // elements with |w - ref| > tolerance
    unsigned long long count = 0;       // elements compared
};
void compare_weights(const float* w, const float* ref, std::int64_t n, float tolerance, CompareStats* stats,
                     cudaStream_t stream);

}  // namespace dtsim::harness::gpu

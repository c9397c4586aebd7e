#include "gpu/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace dtsim::harness::gpu {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(std::int64_t n) {
    const std::int64_t blocks = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 8192 ? 8192 : blocks));
}

__device__ __forceinline__ std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Uniform in [-1, 1) from (seed, index), 24 bits of resolution.
__device__ __forceinline__ float hash_uniform(std::uint64_t seed, std::int64_t index) {
    const std::uint64_t h = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(index)));
    return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

template <typename T> __device__ __forceinline__ T from_float(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <typename T> __device__ __forceinline__ T from_double(double v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_double<__half>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_double<__nv_bfloat16>(double v) {
    return __float2bfloat16(static_cast<float>(v));
}

template <typename T> __device__ __forceinline__ double to_double(T v) { return static_cast<double>(v); }
template <> __device__ __forceinline__ double to_double<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ double to_double<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

#define DTSIM_GRID_STRIDE(i, n)                                                                    \
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__global__ void fill_uniform_kernel(float* p, std::int64_t n, std::uint64_t seed, std::int64_t offset,
                                    std::int64_t limit, float scale) {
    DTSIM_GRID_STRIDE(i, n) {
        const std::int64_t g = offset + i;
        p[i] = g < limit ? scale * hash_uniform(seed, g) : 0.0f;
    }
}

template <typename T>
__global__ void fill_uniform_typed_kernel(T* p, std::int64_t n, std::uint64_t seed, float scale) {
    DTSIM_GRID_STRIDE(i, n) { p[i] = from_float<T>(scale * hash_uniform(seed, i)); }
}

template <typename T> __global__ void fill_value_kernel(T* p, std::int64_t n, double value) {
    const T v = from_double<T>(value);
    DTSIM_GRID_STRIDE(i, n) { p[i] = v; }
}

template <typename T>
__global__ void count_mismatches_kernel(const T* p, std::int64_t n, double value, std::int64_t segment,
                                        unsigned long long* wrong) {
    unsigned long long local = 0;
    DTSIM_GRID_STRIDE(i, n) {
        const double expected = segment > 0 ? static_cast<double>((i / segment) % 4 + 1) : value;
        if (to_double(p[i]) != expected) ++local;
    }
    if (local != 0) atomicAdd(wrong, local);
}

__global__ void relu_kernel(float* p, std::int64_t n) {
    DTSIM_GRID_STRIDE(i, n) { p[i] = p[i] > 0.0f ? p[i] : 0.0f; }
}

__global__ void relu_backward_kernel(const float* dy, float* z, std::int64_t n) {
    DTSIM_GRID_STRIDE(i, n) { z[i] = z[i] > 0.0f ? dy[i] : 0.0f; }
}

__global__ void scale_copy_kernel(const float* x, float* y, std::int64_t n, float a) {
    DTSIM_GRID_STRIDE(i, n) { y[i] = a * x[i]; }
}

__global__ void add_kernel(float* a, const float* b, std::int64_t n) {
    DTSIM_GRID_STRIDE(i, n) { a[i] += b[i]; }
}

__global__ void adam_kernel(float* w, float* m, float* v, const float* g, std::int64_t n, AdamParams p,
                            float bias1, float bias2) {
    DTSIM_GRID_STRIDE(i, n) {
        const float gi = g[i];
        const float mi = p.beta1 * m[i] + (1.0f - p.beta1) * gi;
        const float vi = p.beta2 * v[i] + (1.0f - p.beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] -= p.lr * (mi / bias1) / (sqrtf(vi / bias2) + p.eps);
    }
}

__global__ void compare_kernel(const float* w, const float* ref, std::int64_t n, float tolerance, CompareStats* s) {
    float worst = 0.0f;
    unsigned long long bad = 0;
    unsigned long long seen = 0;
    DTSIM_GRID_STRIDE(i, n) {
        const float d = fabsf(w[i] - ref[i]);
        const float dd = d == d ? d : 3.0e38f;  // NaN counts as the worst difference
        worst = fmaxf(worst, dd);
        if (!(d <= tolerance)) ++bad;
        ++seen;
    }
    if (seen != 0) {
        atomicMax(&s->max_abs_bits, __float_as_uint(worst));
        atomicAdd(&s->mismatches, bad);
        atomicAdd(&s->count, seen);
    }
}

__global__ void copy4_kernel(const float4* __restrict__ x, float4* __restrict__ y, std::int64_t n4) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n4;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        y[i] = x[i];
}

__global__ void triad4_kernel(const float4* __restrict__ b, const float4* __restrict__ c, float4* __restrict__ a,
                              std::int64_t n4, float s) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n4;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float4 u = b[i], v = c[i];
        a[i] = make_float4(u.x + s * v.x, u.y + s * v.y, u.z + s * v.z, u.w + s * v.w);
    }
}

template <typename Kernel, typename... Args>
void launch(Kernel k, std::int64_t n, cudaStream_t stream, Args... args) {
    k<<<grid_for(n), kThreads, 0, stream>>>(args...);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("kernels.cu: kernel launch failed: ") + cudaGetErrorString(e) + " (" +
                                 cudaGetErrorName(e) + ")");
}

}  // namespace

void fill_uniform(float* p, std::int64_t n, std::uint64_t seed, std::int64_t index_offset, std::int64_t valid_limit,
                  float scale, cudaStream_t stream) {
    if (n > 0) launch(fill_uniform_kernel, n, stream, p, n, seed, index_offset, valid_limit, scale);
}

void fill_uniform_typed(void* p, std::int64_t n, ElemType type, std::uint64_t seed, float scale, cudaStream_t stream) {
    if (n <= 0) return;
    switch (type) {
        case ElemType::f16:
            launch(fill_uniform_typed_kernel<__half>, n, stream, static_cast<__half*>(p), n, seed, scale);
            break;
        case ElemType::bf16:
            launch(fill_uniform_typed_kernel<__nv_bfloat16>, n, stream, static_cast<__nv_bfloat16*>(p), n, seed, scale);
            break;
        default: launch(fill_uniform_typed_kernel<float>, n, stream, static_cast<float*>(p), n, seed, scale); break;
    }
}

void fill_value(void* p, std::int64_t n, ElemType type, double value, cudaStream_t stream) {
    if (n <= 0) return;
    switch (type) {
        case ElemType::f32: launch(fill_value_kernel<float>, n, stream, static_cast<float*>(p), n, value); break;
        case ElemType::f16: launch(fill_value_kernel<__half>, n, stream, static_cast<__half*>(p), n, value); break;
        case ElemType::bf16:
            launch(fill_value_kernel<__nv_bfloat16>, n, stream, static_cast<__nv_bfloat16*>(p), n, value);
            break;
        case ElemType::f64: launch(fill_value_kernel<double>, n, stream, static_cast<double*>(p), n, value); break;
        case ElemType::i32:
            launch(fill_value_kernel<std::int32_t>, n, stream, static_cast<std::int32_t*>(p), n, value);
            break;
        case ElemType::i8: launch(fill_value_kernel<std::int8_t>, n, stream, static_cast<std::int8_t*>(p), n, value); break;
        case ElemType::u8:
            launch(fill_value_kernel<std::uint8_t>, n, stream, static_cast<std::uint8_t*>(p), n, value);
            break;
    }
}

void count_mismatches(const void* p, std::int64_t n, ElemType type, double value, std::int64_t segment,
                      unsigned long long* wrong, cudaStream_t stream) {
    if (n <= 0) return;
    switch (type) {
        case ElemType::f32:
            launch(count_mismatches_kernel<float>, n, stream, static_cast<const float*>(p), n, value, segment, wrong);
            break;
        case ElemType::f16:
            launch(count_mismatches_kernel<__half>, n, stream, static_cast<const __half*>(p), n, value, segment, wrong);
            break;
        case ElemType::bf16:
            launch(count_mismatches_kernel<__nv_bfloat16>, n, stream, static_cast<const __nv_bfloat16*>(p), n, value,
                   segment, wrong);
            break;
        case ElemType::f64:
            launch(count_mismatches_kernel<double>, n, stream, static_cast<const double*>(p), n, value, segment, wrong);
            break;
        case ElemType::i32:
            launch(count_mismatches_kernel<std::int32_t>, n, stream, static_cast<const std::int32_t*>(p), n, value,
                   segment, wrong);
            break;
        case ElemType::i8:
            launch(count_mismatches_kernel<std::int8_t>, n, stream, static_cast<const std::int8_t*>(p), n, value,
                   segment, wrong);
            break;
        case ElemType::u8:
            launch(count_mismatches_kernel<std::uint8_t>, n, stream, static_cast<const std::uint8_t*>(p), n, value,
                   segment, wrong);
            break;
    }
}

void relu_inplace(float* p, std::int64_t n, cudaStream_t stream) {
    if (n > 0) launch(relu_kernel, n, stream, p, n);
}

void relu_backward(const float* dy, float* z, std::int64_t n, cudaStream_t stream) {
    if (n > 0) launch(relu_backward_kernel, n, stream, dy, z, n);
}

void scale_copy(const float* x, float* y, std::int64_t n, float a, cudaStream_t stream) {
    if (n > 0) launch(scale_copy_kernel, n, stream, x, y, n, a);
}

void add_inplace(float* a, const float* b, std::int64_t n, cudaStream_t stream) {
    if (n > 0) launch(add_kernel, n, stream, a, b, n);
}

void stream_copy(const float* x, float* y, std::int64_t n, cudaStream_t stream) {
    if (n % 4 != 0) throw std::invalid_argument("stream_copy: n must be a multiple of 4");
    if (n > 0)
        launch(copy4_kernel, n / 4, stream, reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n / 4);
}

void stream_triad(const float* b, const float* c, float* a, std::int64_t n, float s, cudaStream_t stream) {
    if (n % 4 != 0) throw std::invalid_argument("stream_triad: n must be a multiple of 4");
    if (n > 0)
        launch(triad4_kernel, n / 4, stream, reinterpret_cast<const float4*>(b), reinterpret_cast<const float4*>(c),
               reinterpret_cast<float4*>(a), n / 4, s);
}

void adam_step(float* w, float* m, float* v, const float* g, std::int64_t n, AdamParams params, cudaStream_t stream) {
    if (n <= 0) return;
    const float bias1 = 1.0f - powf(params.beta1, static_cast<float>(params.step));
    const float bias2 = 1.0f - powf(params.beta2, static_cast<float>(params.step));
    launch(adam_kernel, n, stream, w, m, v, g, n, params, bias1, bias2);
}

void compare_weights(const float* w, const float* ref, std::int64_t n, float tolerance, CompareStats* stats,
                     cudaStream_t stream) {
    if (n > 0) launch(compare_kernel, n, stream, w, ref, n, tolerance, stats);
}

}  // namespace dtsim::harness::gpu

#include "gpu/puzzle_executor.hpp"

#include "gpu/cuda_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace dtsim::harness::gpu {
namespace {

constexpr std::uint64_t kWeightSeed = 0x5eed000000000000ull;
constexpr std::uint64_t kInputSeed = 0xba7c000000000000ull;

}  // namespace

ReferenceWeights::ReferenceWeights(ReferenceWeights&& other) noexcept
    : layers(std::move(other.layers)), device(other.device) {
    other.layers.clear();
}

ReferenceWeights& ReferenceWeights::operator=(ReferenceWeights&& other) noexcept {
    if (this != &other) {
        std::swap(layers, other.layers);
        std::swap(device, other.device);
    }
    return *this;
}

ReferenceWeights::~ReferenceWeights() {
    if (layers.empty()) return;
    cudaSetDevice(device);
    for (auto& [layer, p] : layers) cudaFree(p);
}

PuzzleExecutor::PuzzleExecutor(LocalRank& rank, const RankProgram& program, const ModelDims& dims,
                               const ExecOptions& options)
    : rank_(rank), program_(program), dims_(dims), options_(options) {
    if (options_.tolerance <= 0) options_.tolerance = options_.adam.lr / 4;
    DTSIM_CUDA(cudaSetDevice(rank_.device));
    // Keep freed memory in the pool: steady-state iterations then never call the driver.
    cudaMemPool_t pool = nullptr;
    DTSIM_CUDA(cudaDeviceGetDefaultMemPool(&pool, rank_.device));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    DTSIM_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));

    DTSIM_CUBLAS(cublasCreate(&blas_));
    DTSIM_CUBLAS(cublasSetStream(blas_, rank_.stream));
    DTSIM_CUBLAS(cublasSetMathMode(blas_, options_.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));

    std::size_t events = 0;
    for (const auto& in : program_.instrs) {
        if (!event_op(in.op).empty()) ++events;
        if (in.op == Op::backward)
            workspace_elems_ = std::max(workspace_elems_,
                                        in.batches.size() * static_cast<std::size_t>(dims_.batch_elems()));
    }
    if (workspace_elems_ > 0) DTSIM_CUDA(cudaMalloc(reinterpret_cast<void**>(&workspace_), workspace_elems_ * sizeof(float)));
    DTSIM_CUDA(cudaMalloc(reinterpret_cast<void**>(&stats_), sizeof(CompareStats)));
    DTSIM_CUDA(cudaMemset(stats_, 0, sizeof(CompareStats)));
    DTSIM_CUDA(cudaMalloc(reinterpret_cast<void**>(&barrier_), sizeof(float)));
    DTSIM_CUDA(cudaMemset(barrier_, 0, sizeof(float)));
    DTSIM_CUDA(cudaEventCreate(&origin_));
    starts_.resize(events);
    stops_.resize(events);
    memory_.resize(events);
    for (std::size_t i = 0; i < events; ++i) {
        DTSIM_CUDA(cudaEventCreate(&starts_[i]));
        DTSIM_CUDA(cudaEventCreate(&stops_[i]));
    }
    ptrs_.assign(program_.buffers.size(), nullptr);
}

PuzzleExecutor::~PuzzleExecutor() {
    cudaSetDevice(rank_.device);
    cudaStreamSynchronize(rank_.stream);
    for (float* p : ptrs_)
        if (p != nullptr) cudaFree(p);
    for (auto e : starts_) cudaEventDestroy(e);
    for (auto e : stops_) cudaEventDestroy(e);
    if (origin_ != nullptr) cudaEventDestroy(origin_);
    cudaFree(workspace_);
    cudaFree(stats_);
    cudaFree(barrier_);
    if (blas_ != nullptr) cublasDestroy(blas_);
}

void PuzzleExecutor::gemm(char a_layout, char b_layout, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                          const float* b, float* c) {
    // cuBLAS is column-major: C^T[n,m] = op(B)^T op(A)^T.
    const float one = 1.0f, zero = 0.0f;
    const cublasOperation_t op_b = b_layout == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
    const cublasOperation_t op_a = a_layout == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
    const auto ld_b = static_cast<int>(b_layout == 'N' ? n : k);
    const auto ld_a = static_cast<int>(a_layout == 'N' ? k : m);
    DTSIM_CUBLAS(cublasSgemm(blas_, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, b,
                             ld_b, a, ld_a, &zero, c, static_cast<int>(n)));
}

std::vector<EventTiming> PuzzleExecutor::run(bool synchronize_ranks, const ReferenceWeights* reference,
                                             ReferenceWeights* keep_final) {
    DTSIM_CUDA(cudaSetDevice(rank_.device));
    std::fill(ptrs_.begin(), ptrs_.end(), nullptr);
    live_bytes_ = 0;
    if (synchronize_ranks) {
        if (rank_.comm == nullptr) throw std::logic_error("PuzzleExecutor::run: no communicator to synchronise with");
        DTSIM_NCCL(ncclAllReduce(barrier_, barrier_, 1, ncclFloat32, ncclSum, rank_.comm, rank_.stream));
    }
    DTSIM_CUDA(cudaEventRecord(origin_, rank_.stream));
    std::size_t e = 0;
    for (const Instr& in : program_.instrs) {
        if (in.live_bytes != live_bytes_)
            throw std::logic_error(fmt::format("rank {}: {} expects {} live bytes, the executor holds {}", program_.rank,
                                               op_name(in.op), in.live_bytes, live_bytes_));
        const auto memory = static_cast<double>(live_bytes_);
        for (int id : in.outs) {
            void* p = nullptr;
            DTSIM_CUDA(cudaMallocAsync(&p, static_cast<std::size_t>(elems(id)) * sizeof(float), rank_.stream));
            ptrs_[static_cast<std::size_t>(id)] = static_cast<float*>(p);
            live_bytes_ += elems(id) * static_cast<std::int64_t>(sizeof(float));
        }
        const bool logged = !event_op(in.op).empty();
        if (logged) DTSIM_CUDA(cudaEventRecord(starts_[e], rank_.stream));
        execute(in, reference, keep_final);
        if (logged) {
            DTSIM_CUDA(cudaEventRecord(stops_[e], rank_.stream));
            memory_[e] = memory;
            ++e;
        }
    }
    LocalRank* self = &rank_;
    wait_streams(std::span<LocalRank>(self, 1), options_.timeout);
    std::vector<EventTiming> out(e);
    for (std::size_t i = 0; i < e; ++i) {
        float start_ms = 0, duration_ms = 0;
        DTSIM_CUDA(cudaEventElapsedTime(&start_ms, origin_, starts_[i]));
        DTSIM_CUDA(cudaEventElapsedTime(&duration_ms, starts_[i], stops_[i]));
        out[i] = EventTiming{start_ms * 1e-3, duration_ms * 1e-3, memory_[i]};
    }
    return out;
}

void PuzzleExecutor::execute(const Instr& in, const ReferenceWeights* reference, ReferenceWeights* keep_final) {
    const cudaStream_t s = rank_.stream;
    const std::int64_t h = dims_.hidden;
    const std::int64_t hh = dims_.weight_elems();
    const auto need_comm = [&] {
        if (rank_.comm == nullptr)
            throw std::logic_error(fmt::format("rank {}: {} needs a communicator", program_.rank, op_name(in.op)));
    };
    switch (in.op) {
        case Op::load_weights: {
            const int w = in.outs.at(0);
            const int o = in.outs.at(1);
            const std::int64_t n = elems(w);
            const auto scale = static_cast<float>(std::sqrt(6.0 / static_cast<double>(h)));  // He-uniform for ReLU
            fill_uniform(buf(w), n, kWeightSeed + static_cast<std::uint64_t>(in.layer), in.shard * n, hh, scale, s);
            DTSIM_CUDA(cudaMemsetAsync(buf(o), 0, static_cast<std::size_t>(elems(o)) * sizeof(float), s));
            break;
        }
        case Op::get_activation: {
            float* out = buf(in.outs.at(0));
            const std::int64_t per = dims_.batch_elems();
            for (std::size_t j = 0; j < in.batches.size(); ++j)
                fill_uniform(out + static_cast<std::int64_t>(j) * per, per,
                             kInputSeed + static_cast<std::uint64_t>(in.batches[j]), 0, per, 1.0f, s);
            break;
        }
        case Op::fake_grad:
            DTSIM_CUDA(cudaMemsetAsync(buf(in.outs.at(0)), 0,
                                       static_cast<std::size_t>(elems(in.outs.at(0))) * sizeof(float), s));
            break;
        case Op::forward: {
            const std::int64_t rows = static_cast<std::int64_t>(in.batches.size()) * dims_.tokens;
            float* y = buf(in.outs.at(0));
            gemm('N', 'N', rows, h, h, buf(in.ins.at(0)), buf(in.ins.at(1)), y);  // y[rows,h] = x W
            relu_inplace(y, rows * h, s);
            break;
        }
        case Op::loss: {
            // loss = 0.5 * sum(y^2) / (batches * tokens) over every batch: dy = y / (batches * tokens).
            const int act = in.ins.at(0);
            const auto a = static_cast<float>(1.0 / (static_cast<double>(dims_.batches) * static_cast<double>(dims_.tokens)));
            scale_copy(buf(act), buf(in.outs.at(0)), elems(act), a, s);
            break;
        }
        case Op::backward: {
            const std::int64_t rows = static_cast<std::int64_t>(in.batches.size()) * dims_.tokens;
            const float* x = buf(in.ins.at(0));
            const float* dy = buf(in.ins.at(1));
            const float* w = buf(in.ins.at(2));
            float* dw = buf(in.outs.at(0));
            float* dx = buf(in.outs.at(1));
            float* g = workspace_;
            gemm('N', 'N', rows, h, h, x, w, g);   // z = x W (recomputed)
            relu_backward(dy, g, rows * h, s);     // g = dy * relu'(z)
            gemm('N', 'T', rows, h, h, g, w, dx);  // dx[rows,in] = g W^T
            gemm('T', 'N', h, h, rows, x, g, dw);  // dw[in,out] = x^T g
            if (elems(in.outs.at(0)) > hh)
                DTSIM_CUDA(cudaMemsetAsync(dw + hh, 0, static_cast<std::size_t>(elems(in.outs.at(0)) - hh) * sizeof(float), s));
            break;
        }
        case Op::update: {
            const int g = in.ins.at(0);
            const int w = in.ins.at(1);
            const int o = in.ins.at(2);
            const std::int64_t n = elems(w);
            if (in.grad_offset + n > elems(g) || elems(o) != 2 * n)
                throw std::logic_error(fmt::format("rank {}: update layer {}: buffer sizes do not match", program_.rank,
                                                   in.layer));
            adam_step(buf(w), buf(o), buf(o) + n, buf(g) + in.grad_offset, n, options_.adam, s);
            break;
        }
        case Op::accumulate:
            if (elems(in.ins.at(0)) != elems(in.ins.at(1)))
                throw std::logic_error(fmt::format("rank {}: accumulate: sizes differ", program_.rank));
            add_inplace(buf(in.ins.at(0)), buf(in.ins.at(1)), elems(in.ins.at(0)), s);
            break;
        case Op::allreduce:
            need_comm();
            DTSIM_NCCL(ncclAllReduce(buf(in.ins.at(0)), buf(in.ins.at(0)), static_cast<std::size_t>(elems(in.ins.at(0))),
                                     ncclFloat32, ncclSum, rank_.comm, s));
            break;
        case Op::allgather:
            need_comm();
            DTSIM_NCCL(ncclAllGather(buf(in.ins.at(0)), buf(in.outs.at(0)), static_cast<std::size_t>(elems(in.ins.at(0))),
                                     ncclFloat32, rank_.comm, s));
            break;
        case Op::scatterreduce:
            need_comm();
            DTSIM_NCCL(ncclReduceScatter(buf(in.ins.at(0)), buf(in.outs.at(0)),
                                         static_cast<std::size_t>(elems(in.outs.at(0))), ncclFloat32, ncclSum,
                                         rank_.comm, s));
            break;
        case Op::send:
            need_comm();
            DTSIM_NCCL(ncclSend(buf(in.ins.at(0)), static_cast<std::size_t>(elems(in.ins.at(0))), ncclFloat32, in.peer,
                                rank_.comm, s));
            break;
        case Op::recv:
            need_comm();
            DTSIM_NCCL(ncclRecv(buf(in.outs.at(0)), static_cast<std::size_t>(elems(in.outs.at(0))), ncclFloat32, in.peer,
                                rank_.comm, s));
            break;
        case Op::release: {
            const int id = in.ins.at(0);
            DTSIM_CUDA(cudaFreeAsync(buf(id), s));
            ptrs_[static_cast<std::size_t>(id)] = nullptr;
            live_bytes_ -= elems(id) * static_cast<std::int64_t>(sizeof(float));
            break;
        }
        case Op::set_final: {
            const int w = in.ins.at(0);
            const std::int64_t n = elems(w);
            const std::int64_t offset = in.shard * n;
            const std::int64_t count = std::clamp<std::int64_t>(hh - offset, 0, n);
            if (keep_final != nullptr) {
                keep_final->device = rank_.device;
                float*& dst = keep_final->layers[in.layer];
                if (dst == nullptr) DTSIM_CUDA(cudaMalloc(reinterpret_cast<void**>(&dst), static_cast<std::size_t>(hh) * sizeof(float)));
                DTSIM_CUDA(cudaMemcpyAsync(dst + offset, buf(w), static_cast<std::size_t>(count) * sizeof(float),
                                           cudaMemcpyDeviceToDevice, s));
            }
            if (reference != nullptr) {
                const auto it = reference->layers.find(in.layer);
                if (it == reference->layers.end())
                    throw std::logic_error(fmt::format("no reference weight for layer {}", in.layer));
                compare_weights(buf(w), it->second + offset, count, options_.tolerance, stats_, s);
            }
            break;
        }
    }
}

CheckResult PuzzleExecutor::check_result() {
    DTSIM_CUDA(cudaSetDevice(rank_.device));
    DTSIM_CUDA(cudaStreamSynchronize(rank_.stream));
    CompareStats st{};
    DTSIM_CUDA(cudaMemcpy(&st, stats_, sizeof st, cudaMemcpyDeviceToHost));
    float max_abs = 0;
    std::memcpy(&max_abs, &st.max_abs_bits, sizeof max_abs);
    return CheckResult{max_abs, static_cast<double>(st.mismatches), static_cast<double>(st.count)};
}

}  // namespace dtsim::harness::gpu

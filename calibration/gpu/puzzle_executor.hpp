// Runs one rank's puzzle program (host/schedule.hpp: recorded by running the puzzles/
// strategy on the dtsim engine; host/puzzle_model.hpp says why it is recorded first rather
// than launched from the strategy) on a GPU: every instruction in order on one stream,
// tensors allocated and freed where the program says (cudaMallocAsync / cudaFreeAsync, so
// no call synchronises), NCCL for collectives and passes, cuBLAS fp32 GEMMs for the
// layers, and a pair of CUDA events around each operation that the puzzle logs.
//
// The model is the puzzle's: L layers of hidden x hidden fp32 weights, y = relu(x W),
// batches of `tokens` rows, loss 0.5 * sum(y^2) / (batches * tokens), Adam. Backward
// recomputes x W (the puzzle's backward gets only the layer's input) into a workspace
// that is allocated once and not counted in `memory`.
#pragma once

#include "gpu/comm.hpp"
#include "gpu/kernels.hpp"
#include "host/schedule.hpp"

#include <cublas_v2.h>

#include <chrono>
#include <map>
#include <optional>
#include <vector>

namespace dtsim::harness::gpu {

struct ExecOptions {
    AdamParams adam;
    bool tf32 = false;            // let cuBLAS use TF32 tensor cores for the fp32 GEMMs
    float tolerance = 0.0f;       // |w - reference| above this counts as a mismatch (0: lr / 4)
    std::chrono::seconds timeout{300};
};

// The reference final weights (from the basic strategy on this GPU), by layer.
struct ReferenceWeights {
    std::map<int, float*> layers;  // hidden*hidden floats each, owned
    int device = 0;
    ReferenceWeights() = default;
    ReferenceWeights(const ReferenceWeights&) = delete;
    ReferenceWeights& operator=(const ReferenceWeights&) = delete;
    ReferenceWeights(ReferenceWeights&&) noexcept;
    ReferenceWeights& operator=(ReferenceWeights&&) noexcept;
    ~ReferenceWeights();
};

struct CheckResult {
    double max_abs_diff = 0;
    double mismatches = 0;
    double compared = 0;
};

class PuzzleExecutor {
public:
    // `rank` must stay alive; its comm may be null for a program without communication.
    PuzzleExecutor(LocalRank& rank, const RankProgram& program, const ModelDims& dims, const ExecOptions& options);
    ~PuzzleExecutor();
    PuzzleExecutor(const PuzzleExecutor&) = delete;
    PuzzleExecutor& operator=(const PuzzleExecutor&) = delete;

    // One pass of the program. With `synchronize_ranks`, the iteration starts with a
    // one-element all-reduce over every rank, so that all ranks share one time origin.
    // With `reference`, each final weight is compared with it; with `keep_final`, the
    // final weights are copied into it instead (the reference run). Returns the timings
    // of the logged operations, in program order.
    std::vector<EventTiming> run(bool synchronize_ranks, const ReferenceWeights* reference, ReferenceWeights* keep_final);

    // Accumulated over every run() given a reference.
    [[nodiscard]] CheckResult check_result();
    [[nodiscard]] std::size_t workspace_bytes() const { return workspace_elems_ * sizeof(float); }

private:
    void execute(const Instr& in, const ReferenceWeights* reference, ReferenceWeights* keep_final);
    // Row-major C[m,n] = op(A)[m,k] op(B)[k,n], fp32.
    void gemm(char a_layout, char b_layout, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
              const float* b, float* c);
    float* buf(int id) const { return ptrs_.at(static_cast<std::size_t>(id)); }
    std::int64_t elems(int id) const { return program_.buffers.at(static_cast<std::size_t>(id)).elems; }

    LocalRank& rank_;
    const RankProgram& program_;
    ModelDims dims_;
    ExecOptions options_;
    cublasHandle_t blas_ = nullptr;
    std::vector<float*> ptrs_;
    std::int64_t live_bytes_ = 0;
    std::size_t workspace_elems_ = 0;
    float* workspace_ = nullptr;
    CompareStats* stats_ = nullptr;
    float* barrier_ = nullptr;  // the one-element all-reduce that aligns the ranks' origins
    cudaEvent_t origin_ = nullptr;
    std::vector<cudaEvent_t> starts_, stops_;
    std::vector<double> memory_;
};

}  // namespace dtsim::harness::gpu

// Setting up NCCL for the tools, in either launch mode:
//  - single process: this process drives every visible GPU (or the first --ngpus), one
//    communicator and one stream per GPU, made with ncclCommInitAll;
//  - one process per GPU: the launcher's environment (host/rendezvous.hpp) gives rank and
//    world size; rank 0 makes the ncclUniqueId and serves it over TCP; every process
//    joins with ncclCommInitRank on the GPU given by its local rank.
#pragma once

#include "host/rendezvous.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace dtsim::harness::gpu {

// One rank this process drives.
struct LocalRank {
    int rank = 0;
    int device = 0;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
};

enum class LaunchMode { automatic, single_process, multi_process };
// "auto", "single", "multi". Throws ArgError (host/cli.hpp).
LaunchMode parse_launch_mode(const std::string& text);

struct BootstrapOptions {
    LaunchMode mode = LaunchMode::automatic;
    int ngpus = 0;                        // single process: how many GPUs (0 = all visible)
    std::optional<int> device;            // multi process: this process's GPU (default: local rank)
    std::optional<Endpoint> rendezvous;   // multi process: overrides MASTER_ADDR:MASTER_PORT+1
    std::chrono::seconds timeout{300};    // rendezvous and every wait for GPU work
};

// The launch options of the tools that drive several GPUs, read into `options`: --mode,
// --device, --rendezvous, --timeout, and --ngpus where `ngpus` (dtsim-puzzle-real takes
// the number of GPUs from --ranks).
void add_launch_options(CLI::App& app, BootstrapOptions& options, bool ngpus);

class Communicator {
public:
    explicit Communicator(const BootstrapOptions& options);
    ~Communicator();
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    [[nodiscard]] int world_size() const { return world_size_; }
    [[nodiscard]] int nodes() const { return nodes_; }
    [[nodiscard]] bool multi_process() const { return multi_process_; }
    // Whether this process holds rank 0 (prints and writes the results).
    [[nodiscard]] bool is_root() const;
    [[nodiscard]] std::span<LocalRank> local() { return local_; }
    [[nodiscard]] std::chrono::seconds timeout() const { return timeout_; }
    // "single process, 8 GPUs" or "torchrun, 16 processes on 2 nodes".
    [[nodiscard]] std::string launch_description() const;
    // The name of rank 0's GPU as this process sees its own first GPU.
    [[nodiscard]] std::string gpu_name() const;

private:
    std::vector<LocalRank> local_;
    int world_size_ = 0;
    int nodes_ = 1;
    bool multi_process_ = false;
    std::string launcher_;
    std::chrono::seconds timeout_{300};
};

// Waits until the streams of `ranks` have finished their work. Polls NCCL's asynchronous
// errors meanwhile; on an error, after `timeout`, or when another thread of this process
// called request_abort(), aborts the communicators of `ranks` and throws GpuError saying
// which rank gave up and why.
void wait_streams(std::span<LocalRank> ranks, std::chrono::seconds timeout);
// Asks every wait_streams of this process to give up (a thread driving another GPU failed).
void request_abort();

// Small host-side reductions over all ranks, through NCCL (grouped over `ranks`, which
// are this process's or this thread's ranks). `values[i]` belongs to ranks[i]; every
// vector has the same length on every rank.
std::vector<std::vector<double>> allreduce_doubles(std::span<LocalRank> ranks,
                                                   const std::vector<std::vector<double>>& values, ncclRedOp_t op,
                                                   std::chrono::seconds timeout);
// The result is world_size * length values, ordered by rank.
std::vector<std::vector<double>> allgather_doubles(std::span<LocalRank> ranks,
                                                   const std::vector<std::vector<double>>& values,
                                                   std::chrono::seconds timeout);
// Every rank waits for every other (a one-element all-reduce).
void barrier(std::span<LocalRank> ranks, std::chrono::seconds timeout);

}  // namespace dtsim::harness::gpu

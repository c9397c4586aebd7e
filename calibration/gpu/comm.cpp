#include "gpu/comm.hpp"

#include "gpu/cuda_check.hpp"
#include "host/cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <set>
#include <thread>

namespace dtsim::harness::gpu {
namespace {

std::atomic<bool> g_abort_requested{false};

int visible_devices() {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || count == 0)
        throw GpuError(fmt::format("no CUDA GPU is visible ({}); this tool needs at least one",
                                   cudaGetErrorString(e)));
    DTSIM_CUDA(e);
    return count;
}

cudaStream_t make_stream(int device) {
    DTSIM_CUDA(cudaSetDevice(device));
    cudaStream_t s = nullptr;
    DTSIM_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

void abort_all(std::span<LocalRank> ranks) {
    for (auto& r : ranks) {
        if (r.comm != nullptr) {
            ncclCommAbort(r.comm);
            r.comm = nullptr;
        }
    }
}

}  // namespace

LaunchMode parse_launch_mode(const std::string& text) {
    if (text == "auto") return LaunchMode::automatic;
    if (text == "single") return LaunchMode::single_process;
    if (text == "multi") return LaunchMode::multi_process;
    throw ArgError(fmt::format("--mode must be auto, single or multi, got \"{}\"", text));
}

void add_launch_options(CLI::App& app, BootstrapOptions& o, bool ngpus) {
    app.add_option_function<std::string>(
           "--mode", [&o](const std::string& s) { o.mode = parse_launch_mode(s); },
           "auto, single (this process drives every GPU) or multi (one process per GPU)")
        ->check(CLI::IsMember({"auto", "single", "multi"}))
        ->type_name("MODE")
        ->default_str("auto");
    if (ngpus)
        app.add_option("--ngpus", o.ngpus, "single-process mode: use the first N visible GPUs (default all)")
            ->check(at_least(1))
            ->type_name("N");
    app.add_option_function<int>(
           "--device", [&o](int d) { o.device = d; },
           "multi-process mode: this process's GPU (default: the local rank)")
        ->check(at_least(0))
        ->type_name("GPU");
    app.add_option_function<std::string>(
           "--rendezvous", [&o](const std::string& s) { o.rendezvous = parse_endpoint(s); },
           "multi-process mode: where rank 0 serves the NCCL id (default MASTER_ADDR:MASTER_PORT+1)")
        ->check(CLI::Validator(
            [](std::string& s) {
                try {
                    (void)parse_endpoint(s);
                    return std::string();
                } catch (const RendezvousError& e) {
                    return std::string(e.what());
                }
            },
            ""))
        ->type_name("HOST:PORT");
    app.add_option_function<int>(
           "--timeout", [&o](int s) { o.timeout = std::chrono::seconds(s); },
           "give up on the rendezvous or on stuck GPU work after this many seconds")
        ->check(at_least(1))
        ->type_name("SECONDS")
        ->default_str(std::to_string(o.timeout.count()));
}

Communicator::Communicator(const BootstrapOptions& options) : timeout_(options.timeout) {
    std::optional<ProcessPlace> place;
    if (options.mode != LaunchMode::single_process) place = detect_process_place(process_environment(), options.rendezvous);
    if (options.mode == LaunchMode::multi_process && !place)
        throw RendezvousError(
            "--mode multi: no launcher variables found (RANK/WORLD_SIZE from torchrun, OMPI_COMM_WORLD_RANK/SIZE "
            "from Open MPI's mpirun, or PMI_RANK/PMI_SIZE)");
    const int count = visible_devices();

    if (!place) {
        // Single process, every visible GPU (or the first --ngpus).
        const int n = options.ngpus > 0 ? options.ngpus : count;
        if (n > count)
            throw GpuError(fmt::format("{} GPUs requested but only {} visible (CUDA_VISIBLE_DEVICES?); for more, "
                                       "launch one process per GPU with torchrun or mpirun",
                                       n, count));
        std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
        std::vector<int> devices(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) devices[static_cast<std::size_t>(i)] = i;
        DTSIM_NCCL(ncclCommInitAll(comms.data(), n, devices.data()));
        for (int i = 0; i < n; ++i)
            local_.push_back(LocalRank{i, i, comms[static_cast<std::size_t>(i)], make_stream(i)});
        world_size_ = n;
        nodes_ = 1;
        launcher_ = "single process";
        return;
    }

    multi_process_ = true;
    launcher_ = std::string(launcher_name(place->launcher));
    world_size_ = place->world_size;
    int device = 0;
    if (options.device) {
        device = *options.device;
    } else if (place->local_rank) {
        device = *place->local_rank;
    } else {
        device = place->rank % count;
        fmt::print(stderr, "rank {}: the launcher gives no local rank; using GPU {} (rank % {} visible GPUs)\n",
                   place->rank, device, count);
    }
    if (device < 0 || device >= count)
        throw GpuError(fmt::format("rank {}: GPU {} requested (local rank or --device) but only {} are visible",
                                   place->rank, device, count));
    DTSIM_CUDA(cudaSetDevice(device));

    ncclUniqueId id{};
    if (place->rank == 0) {
        DTSIM_NCCL(ncclGetUniqueId(&id));
        if (world_size_ > 1) {
            RendezvousServer server(place->endpoint->port);
            std::vector<std::byte> payload(sizeof id);
            std::memcpy(payload.data(), &id, sizeof id);
            server.serve(payload, world_size_, options.timeout);
        }
    } else {
        const auto payload = fetch_rendezvous_payload(*place->endpoint, place->rank, world_size_, options.timeout);
        if (payload.size() != sizeof id)
            throw RendezvousError(fmt::format("rank {}: rank 0 sent a {}-byte id, expected {} (another NCCL version?)",
                                              place->rank, payload.size(), sizeof id));
        std::memcpy(&id, payload.data(), sizeof id);
    }
    ncclComm_t comm = nullptr;
    DTSIM_NCCL(ncclCommInitRank(&comm, world_size_, id, place->rank));
    local_.push_back(LocalRank{place->rank, device, comm, make_stream(device)});

    // Count the nodes: distinct host names over all ranks.
    const std::uint64_t h = std::hash<std::string>{}(host_name());
    const auto all = allgather_doubles(local_, {{static_cast<double>(h >> 32), static_cast<double>(h & 0xffffffffu)}},
                                       timeout_);
    std::set<std::pair<double, double>> hosts;
    for (std::size_t i = 0; i + 1 < all[0].size(); i += 2) hosts.insert({all[0][i], all[0][i + 1]});
    nodes_ = static_cast<int>(hosts.size());
}

Communicator::~Communicator() {
    for (auto& r : local_) {
        cudaSetDevice(r.device);
        if (r.stream != nullptr) cudaStreamSynchronize(r.stream);
        if (r.comm != nullptr) ncclCommDestroy(r.comm);
        if (r.stream != nullptr) cudaStreamDestroy(r.stream);
    }
}

bool Communicator::is_root() const {
    for (const auto& r : local_)
        if (r.rank == 0) return true;
    return false;
}

std::string Communicator::launch_description() const {
    if (!multi_process_) return fmt::format("single process, {} GPUs", world_size_);
    return fmt::format("{}, {} processes on {} node{}", launcher_, world_size_, nodes_, nodes_ == 1 ? "" : "s");
}

std::string Communicator::gpu_name() const {
    cudaDeviceProp prop{};
    DTSIM_CUDA(cudaGetDeviceProperties(&prop, local_.empty() ? 0 : local_.front().device));
    return prop.name;
}

void request_abort() { g_abort_requested.store(true); }

void wait_streams(std::span<LocalRank> ranks, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto& r : ranks) {
        DTSIM_CUDA(cudaSetDevice(r.device));
        for (;;) {
            const cudaError_t e = cudaStreamQuery(r.stream);
            if (e == cudaSuccess) break;
            if (e != cudaErrorNotReady) {
                abort_all(ranks);
                throw_cuda(e, "cudaStreamQuery (the rank's work)", __FILE__, __LINE__);
            }
            if (r.comm != nullptr) {
                ncclResult_t async = ncclSuccess;
                DTSIM_NCCL(ncclCommGetAsyncError(r.comm, &async));
                if (async != ncclSuccess && async != ncclInProgress) {
                    abort_all(ranks);
                    throw GpuError(fmt::format("rank {}: NCCL reported an error while waiting: {} (another rank may "
                                               "have failed; see its output, or set NCCL_DEBUG=WARN)",
                                               r.rank, ncclGetErrorString(async)));
                }
            }
            if (g_abort_requested.load()) {
                abort_all(ranks);
                throw GpuError(fmt::format("rank {}: stopped because a thread driving another GPU failed", r.rank));
            }
            if (std::chrono::steady_clock::now() > deadline) {
                abort_all(ranks);
                throw GpuError(fmt::format("rank {}: GPU work did not finish within {} s; another rank probably failed "
                                           "or waits elsewhere (raise --timeout for very long runs)",
                                           r.rank, timeout.count()));
            }
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
}

namespace {

std::vector<std::vector<double>> collective_doubles(std::span<LocalRank> ranks,
                                                    const std::vector<std::vector<double>>& values, bool gather,
                                                    ncclRedOp_t op, std::chrono::seconds timeout) {
    if (values.size() != ranks.size()) throw std::logic_error("collective_doubles: one vector per local rank");
    const std::size_t len = values.empty() ? 0 : values.front().size();
    int world = 0;
    DTSIM_NCCL(ncclCommCount(ranks.front().comm, &world));
    const std::size_t out_len = gather ? len * static_cast<std::size_t>(world) : len;
    std::vector<void*> in(ranks.size()), out(ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        if (values[i].size() != len) throw std::logic_error("collective_doubles: lengths differ");
        DTSIM_CUDA(cudaSetDevice(ranks[i].device));
        DTSIM_CUDA(cudaMallocAsync(&in[i], std::max<std::size_t>(len, 1) * sizeof(double), ranks[i].stream));
        DTSIM_CUDA(cudaMallocAsync(&out[i], std::max<std::size_t>(out_len, 1) * sizeof(double), ranks[i].stream));
        DTSIM_CUDA(cudaMemcpyAsync(in[i], values[i].data(), len * sizeof(double), cudaMemcpyHostToDevice,
                                   ranks[i].stream));
    }
    DTSIM_NCCL(ncclGroupStart());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        if (gather)
            DTSIM_NCCL(ncclAllGather(in[i], out[i], len, ncclFloat64, ranks[i].comm, ranks[i].stream));
        else
            DTSIM_NCCL(ncclAllReduce(in[i], out[i], len, ncclFloat64, op, ranks[i].comm, ranks[i].stream));
    }
    DTSIM_NCCL(ncclGroupEnd());
    // Pinned host memory keeps the copy back asynchronous, so that the wait below can
    // notice a failed peer instead of blocking in the copy.
    double* host = nullptr;
    DTSIM_CUDA(cudaMallocHost(&host, std::max<std::size_t>(out_len * ranks.size(), 1) * sizeof(double)));
    std::vector<std::vector<double>> result(ranks.size(), std::vector<double>(out_len));
    try {
        for (std::size_t i = 0; i < ranks.size(); ++i) {
            DTSIM_CUDA(cudaSetDevice(ranks[i].device));
            DTSIM_CUDA(cudaMemcpyAsync(host + i * out_len, out[i], out_len * sizeof(double), cudaMemcpyDeviceToHost,
                                       ranks[i].stream));
            DTSIM_CUDA(cudaFreeAsync(in[i], ranks[i].stream));
            DTSIM_CUDA(cudaFreeAsync(out[i], ranks[i].stream));
        }
        wait_streams(ranks, timeout);
    } catch (...) {
        cudaFreeHost(host);
        throw;
    }
    for (std::size_t i = 0; i < ranks.size(); ++i)
        std::copy(host + i * out_len, host + (i + 1) * out_len, result[i].begin());
    DTSIM_CUDA(cudaFreeHost(host));
    return result;
}

}  // namespace

std::vector<std::vector<double>> allreduce_doubles(std::span<LocalRank> ranks,
                                                   const std::vector<std::vector<double>>& values, ncclRedOp_t op,
                                                   std::chrono::seconds timeout) {
    return collective_doubles(ranks, values, false, op, timeout);
}

std::vector<std::vector<double>> allgather_doubles(std::span<LocalRank> ranks,
                                                   const std::vector<std::vector<double>>& values,
                                                   std::chrono::seconds timeout) {
    return collective_doubles(ranks, values, true, ncclSum, timeout);
}

void barrier(std::span<LocalRank> ranks, std::chrono::seconds timeout) {
    (void)allreduce_doubles(ranks, std::vector<std::vector<double>>(ranks.size(), std::vector<double>{0.0}), ncclSum,
                            timeout);
}

}  // namespace dtsim::harness::gpu

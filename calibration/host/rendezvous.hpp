// How a process of a multi-process run learns its place and the NCCL unique id.
//
// The launcher tells each process its rank through the environment: torchrun sets RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; Open MPI's mpirun sets
// OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK; MPICH, Intel MPI and other PMI launchers set
// PMI_RANK / PMI_SIZE (and MPI_LOCALRANKID). Rank 0 then creates the ncclUniqueId and
// serves it over a small TCP socket at MASTER_ADDR:MASTER_PORT+1 (torchrun's own store
// already listens on MASTER_PORT), or at the address given with --rendezvous HOST:PORT;
// the others connect, retrying until a timeout. No CUDA here; unit-tested on the CPU.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::harness {

// A launch environment that does not make sense, or a rendezvous that failed: what()
// names the variable (or the peer) and what was wrong with it.
class RendezvousError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct Endpoint {
    std::string host;
    int port = 0;
    friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// "node0:29501", "[fe80::1]:29501". Throws RendezvousError.
Endpoint parse_endpoint(std::string_view text);

enum class Launcher { torchrun, openmpi, pmi };
std::string_view launcher_name(Launcher l);

struct ProcessPlace {
    Launcher launcher = Launcher::torchrun;
    int rank = 0;
    int world_size = 1;
    std::optional<int> local_rank;     // absent when the launcher does not say
    std::optional<Endpoint> endpoint;  // where rank 0 serves the id; absent only if world_size == 1
};

// Reads one environment variable; std::nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
EnvLookup process_environment();

// The place of this process, or std::nullopt when no launcher variables are set (a
// single-process run). `override_endpoint` (--rendezvous) replaces the address derived
// from MASTER_ADDR/MASTER_PORT. Throws RendezvousError naming the variable when a
// variable is missing, is not an integer or is out of range, and when more than one
// process is launched but no rendezvous address is known.
std::optional<ProcessPlace> detect_process_place(const EnvLookup& env,
                                                 const std::optional<Endpoint>& override_endpoint = {});

// Rank 0's side: listens on every interface at `port` (0 picks a free port, for tests).
class RendezvousServer {
public:
    explicit RendezvousServer(int port);
    ~RendezvousServer();
    RendezvousServer(const RendezvousServer&) = delete;
    RendezvousServer& operator=(const RendezvousServer&) = delete;

    [[nodiscard]] int port() const { return port_; }

    // Hands `payload` to each of ranks 1..world_size-1 once; returns when all have it.
    // A client announcing another world size, a rank out of range or a rank already
    // served gets an error reply and does not count. Throws RendezvousError naming the
    // missing ranks when `timeout` passes first.
    void serve(const std::vector<std::byte>& payload, int world_size, std::chrono::milliseconds timeout);

private:
    int fd_ = -1;
    int port_ = 0;
};

// A non-zero rank's side: connects to rank 0 (retrying while it is not yet listening),
// announces (rank, world_size) and returns the payload. Throws RendezvousError with the
// address and the last socket error when `timeout` passes, or with rank 0's reason when
// it refuses.
std::vector<std::byte> fetch_rendezvous_payload(const Endpoint& endpoint, int rank, int world_size,
                                                std::chrono::milliseconds timeout);

}  // namespace dtsim::harness

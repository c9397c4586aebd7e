#include "host/rendezvous.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <set>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace dtsim::harness {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'D', 'T', 'S', 'I', 'M', 'R', 'V', '1'};
enum Status : std::uint32_t { ok = 0, wrong_world = 1, bad_rank = 2, duplicate_rank = 3 };

std::optional<int> parse_int(const std::optional<std::string>& text) {
    if (!text) return std::nullopt;
    int v = 0;
    const char* b = text->data();
    const char* e = b + text->size();
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || p != e || text->empty()) return std::nullopt;
    return v;
}

int need_int(const EnvLookup& env, const char* name, const char* launcher) {
    auto raw = env(name);
    if (!raw)
        throw RendezvousError(fmt::format("{} launch: environment variable {} is not set", launcher, name));
    auto v = parse_int(raw);
    if (!v) throw RendezvousError(fmt::format("{}=\"{}\" is not an integer", name, *raw));
    return *v;
}

std::optional<int> maybe_int(const EnvLookup& env, const char* name) {
    auto raw = env(name);
    if (!raw) return std::nullopt;
    auto v = parse_int(raw);
    if (!v) throw RendezvousError(fmt::format("{}=\"{}\" is not an integer", name, *raw));
    if (*v < 0) throw RendezvousError(fmt::format("{}={} must be >= 0", name, *v));
    return v;
}

std::string errno_text(int err) { return std::strerror(err); }

// Reads exactly `n` bytes or fails (peer closed, timeout set with SO_RCVTIMEO).
bool read_exact(int fd, void* buf, std::size_t n) {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
        const ssize_t got = ::recv(fd, p, n, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        n -= static_cast<std::size_t>(got);
    }
    return true;
}

bool write_exact(int fd, const void* buf, std::size_t n) {
    const auto* p = static_cast<const char*>(buf);
    while (n > 0) {
        const ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return false;
        p += put;
        n -= static_cast<std::size_t>(put);
    }
    return true;
}

void put_u32(std::vector<char>& out, std::uint32_t v) {
    const std::uint32_t be = htonl(v);
    const auto* p = reinterpret_cast<const char*>(&be);
    out.insert(out.end(), p, p + 4);
}

std::uint32_t get_u32(const char* p) {
    std::uint32_t be = 0;
    std::memcpy(&be, p, 4);
    return ntohl(be);
}

void set_io_timeout(int fd, std::chrono::milliseconds t) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(t.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

class Fd {
public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    [[nodiscard]] int get() const { return fd_; }

private:
    int fd_;
};

std::string ranks_text(const std::set<int>& ranks) {
    std::string out;
    int shown = 0;
    for (int r : ranks) {
        if (shown == 16) {
            out += fmt::format(", ... ({} in all)", ranks.size());
            break;
        }
        out += shown++ ? fmt::format(", {}", r) : fmt::format("{}", r);
    }
    return out;
}

}  // namespace

Endpoint parse_endpoint(std::string_view text) {
    std::string_view host;
    std::string_view port;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
            throw RendezvousError(fmt::format("rendezvous address \"{}\": expected [IPv6]:PORT", text));
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos)
            throw RendezvousError(fmt::format("rendezvous address \"{}\": expected HOST:PORT", text));
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
    }
    if (host.empty()) throw RendezvousError(fmt::format("rendezvous address \"{}\": the host is empty", text));
    auto p = parse_int(std::string(port));
    if (!p || *p < 1 || *p > 65535)
        throw RendezvousError(fmt::format("rendezvous address \"{}\": port must be an integer in 1..65535", text));
    return Endpoint{std::string(host), *p};
}

std::string_view launcher_name(Launcher l) {
    switch (l) {
        case Launcher::torchrun: return "torchrun";
        case Launcher::openmpi: return "mpirun (Open MPI)";
        case Launcher::pmi: return "PMI";
    }
    return "?";
}

EnvLookup process_environment() {
    return [](const char* name) -> std::optional<std::string> {
        const char* v = std::getenv(name);
        if (v == nullptr) return std::nullopt;
        return std::string(v);
    };
}

std::optional<ProcessPlace> detect_process_place(const EnvLookup& env,
                                                 const std::optional<Endpoint>& override_endpoint) {
    ProcessPlace place;
    const char* rank_var = nullptr;
    const char* size_var = nullptr;
    if (env("RANK") || env("WORLD_SIZE")) {
        place.launcher = Launcher::torchrun;
        rank_var = "RANK";
        size_var = "WORLD_SIZE";
        place.local_rank = maybe_int(env, "LOCAL_RANK");
    } else if (env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_SIZE")) {
        place.launcher = Launcher::openmpi;
        rank_var = "OMPI_COMM_WORLD_RANK";
        size_var = "OMPI_COMM_WORLD_SIZE";
        place.local_rank = maybe_int(env, "OMPI_COMM_WORLD_LOCAL_RANK");
    } else if (env("PMI_RANK") || env("PMI_SIZE")) {
        place.launcher = Launcher::pmi;
        rank_var = "PMI_RANK";
        size_var = "PMI_SIZE";
        place.local_rank = maybe_int(env, "MPI_LOCALRANKID");
    } else {
        return std::nullopt;
    }
    const std::string launcher(launcher_name(place.launcher));
    place.rank = need_int(env, rank_var, launcher.c_str());
    place.world_size = need_int(env, size_var, launcher.c_str());
    if (place.world_size < 1) throw RendezvousError(fmt::format("{}={} must be >= 1", size_var, place.world_size));
    if (place.rank < 0 || place.rank >= place.world_size)
        throw RendezvousError(fmt::format("{}={} is outside 0..{} ({}={})", rank_var, place.rank,
                                          place.world_size - 1, size_var, place.world_size));

    if (override_endpoint) {
        place.endpoint = override_endpoint;
    } else {
        auto addr = env("MASTER_ADDR");
        auto port_raw = env("MASTER_PORT");
        if (addr && addr->empty()) throw RendezvousError("MASTER_ADDR is set but empty");
        if (addr && port_raw) {
            auto port = parse_int(port_raw);
            if (!port) throw RendezvousError(fmt::format("MASTER_PORT=\"{}\" is not an integer", *port_raw));
            if (*port < 1 || *port > 65534)
                throw RendezvousError(fmt::format(
                    "MASTER_PORT={} is outside 1..65534 (the id is served at MASTER_PORT+1)", *port));
            place.endpoint = Endpoint{*addr, *port + 1};
        } else if (addr || port_raw) {
            throw RendezvousError(fmt::format("{} is set but {} is not: set both, or pass --rendezvous HOST:PORT",
                                              addr ? "MASTER_ADDR" : "MASTER_PORT",
                                              addr ? "MASTER_PORT" : "MASTER_ADDR"));
        }
    }
    if (!place.endpoint && place.world_size > 1)
        throw RendezvousError(fmt::format(
            "{} launched {} processes but no rendezvous address is known: set MASTER_ADDR and "
            "MASTER_PORT (rank 0 serves the NCCL id at MASTER_PORT+1) or pass --rendezvous HOST:PORT",
            launcher, place.world_size));
    return place;
}

RendezvousServer::RendezvousServer(int port) {
    // Dual-stack where IPv6 exists, IPv4 otherwise.
    int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool v6 = fd >= 0;
    if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw RendezvousError(fmt::format("rendezvous: cannot create a socket: {}", errno_text(errno)));
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = 0;
    if (v6) {
        int zero = 0;
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons(static_cast<std::uint16_t>(port));
        rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(fd, 128) != 0) {
        const int err = errno;
        ::close(fd);
        throw RendezvousError(fmt::format("rendezvous: rank 0 cannot listen on port {}: {}{}", port, errno_text(err),
                                          err == EADDRINUSE ? " (pick another port with --rendezvous HOST:PORT)" : ""));
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    fd_ = fd;
}

RendezvousServer::~RendezvousServer() {
    if (fd_ >= 0) ::close(fd_);
}

void RendezvousServer::serve(const std::vector<std::byte>& payload, int world_size,
                             std::chrono::milliseconds timeout) {
    std::set<int> waiting;
    for (int r = 1; r < world_size; ++r) waiting.insert(r);
    const auto deadline = Clock::now() + timeout;
    while (!waiting.empty()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0)
            throw RendezvousError(fmt::format(
                "rendezvous: rank 0 waited {} s on port {} but ranks {} never connected (are they running, "
                "and can they reach this host?)",
                timeout.count() / 1000.0, port_, ranks_text(waiting)));
        pollfd p{fd_, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (ready < 0 && errno != EINTR)
            throw RendezvousError(fmt::format("rendezvous: poll failed: {}", errno_text(errno)));
        if (ready <= 0) continue;
        Fd conn(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
        if (conn.get() < 0) continue;
        set_io_timeout(conn.get(), std::chrono::milliseconds(5000));
        char hello[16];
        if (!read_exact(conn.get(), hello, sizeof hello) || std::memcmp(hello, kMagic, 8) != 0)
            continue;  // not one of ours (a port scanner, a stale job): ignore it
        const auto rank = static_cast<int>(get_u32(hello + 8));
        const auto world = static_cast<int>(get_u32(hello + 12));
        std::uint32_t status = Status::ok;
        if (world != world_size)
            status = Status::wrong_world;
        else if (rank < 1 || rank >= world_size)
            status = Status::bad_rank;
        else if (waiting.count(rank) == 0)
            status = Status::duplicate_rank;
        std::vector<char> reply(kMagic, kMagic + 8);
        put_u32(reply, status);
        put_u32(reply, static_cast<std::uint32_t>(world_size));
        put_u32(reply, status == Status::ok ? static_cast<std::uint32_t>(payload.size()) : 0U);
        if (status == Status::ok) {
            const auto* p8 = reinterpret_cast<const char*>(payload.data());
            reply.insert(reply.end(), p8, p8 + payload.size());
        }
        if (write_exact(conn.get(), reply.data(), reply.size()) && status == Status::ok) {
            // Wait for the client's one-byte acknowledgement so that a rank counts as
            // served only once it really holds the payload.
            char ack = 0;
            if (read_exact(conn.get(), &ack, 1) && ack == 'k') waiting.erase(rank);
        }
    }
}

std::vector<std::byte> fetch_rendezvous_payload(const Endpoint& endpoint, int rank, int world_size,
                                                std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::string last_error = "no attempt made";
    const std::string port = std::to_string(endpoint.port);
    while (Clock::now() < deadline) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        const int gai = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &res);
        if (gai != 0) {
            last_error = fmt::format("cannot resolve host \"{}\": {}", endpoint.host, ::gai_strerror(gai));
        } else {
            for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
                Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
                if (fd.get() < 0) {
                    last_error = errno_text(errno);
                    continue;
                }
                if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
                    last_error = errno_text(errno);
                    continue;
                }
                set_io_timeout(fd.get(), std::chrono::milliseconds(30000));
                std::vector<char> hello(kMagic, kMagic + 8);
                put_u32(hello, static_cast<std::uint32_t>(rank));
                put_u32(hello, static_cast<std::uint32_t>(world_size));
                char head[20];
                if (!write_exact(fd.get(), hello.data(), hello.size()) || !read_exact(fd.get(), head, sizeof head) ||
                    std::memcmp(head, kMagic, 8) != 0) {
                    last_error = "connected but got no valid reply (is another service on this port?)";
                    continue;
                }
                const std::uint32_t status = get_u32(head + 8);
                const std::uint32_t their_world = get_u32(head + 12);
                const std::uint32_t size = get_u32(head + 16);
                ::freeaddrinfo(res);
                res = nullptr;
                switch (status) {
                    case Status::ok: break;
                    case Status::wrong_world:
                        throw RendezvousError(fmt::format(
                            "rendezvous at {}:{}: rank 0 runs with world size {}, this rank (rank {}) with {}",
                            endpoint.host, endpoint.port, their_world, rank, world_size));
                    case Status::bad_rank:
                        throw RendezvousError(fmt::format("rendezvous at {}:{}: rank {} is not in 1..{}",
                                                          endpoint.host, endpoint.port, rank, their_world - 1));
                    case Status::duplicate_rank:
                        throw RendezvousError(fmt::format(
                            "rendezvous at {}:{}: rank {} already joined (two processes claim the same rank?)",
                            endpoint.host, endpoint.port, rank));
                    default:
                        throw RendezvousError(fmt::format("rendezvous at {}:{}: unknown reply status {}",
                                                          endpoint.host, endpoint.port, status));
                }
                std::vector<std::byte> payload(size);
                if (!read_exact(fd.get(), payload.data(), payload.size()))
                    throw RendezvousError(fmt::format("rendezvous at {}:{}: connection closed while reading the id",
                                                      endpoint.host, endpoint.port));
                const char ack = 'k';
                write_exact(fd.get(), &ack, 1);
                return payload;
            }
            if (res != nullptr) ::freeaddrinfo(res);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    throw RendezvousError(fmt::format(
        "rendezvous: rank {} could not get the NCCL id from rank 0 at {}:{} within {} s (last error: {}); is "
        "rank 0 running, and is the port reachable from this host?",
        rank, endpoint.host, endpoint.port, timeout.count() / 1000.0, last_error));
}

}  // namespace dtsim::harness

#include "host/rendezvous.hpp"

#include <doctest/doctest.h>

#include <map>
#include <thread>

using namespace dtsim::harness;
using namespace std::chrono_literals;

namespace {
EnvLookup env_of(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}
}  // namespace

TEST_CASE("no launcher variables means a single-process run") {
    CHECK_FALSE(detect_process_place(env_of({})).has_value());
    CHECK_FALSE(detect_process_place(env_of({{"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}})).has_value());
}

TEST_CASE("torchrun's variables give rank, size, local rank and MASTER_PORT+1") {
    auto place = detect_process_place(env_of({{"RANK", "9"},
                                              {"WORLD_SIZE", "16"},
                                              {"LOCAL_RANK", "1"},
                                              {"MASTER_ADDR", "node0"},
                                              {"MASTER_PORT", "29500"}}));
    REQUIRE(place.has_value());
    CHECK(place->launcher == Launcher::torchrun);
    CHECK(place->rank == 9);
    CHECK(place->world_size == 16);
    CHECK(place->local_rank == 1);
    REQUIRE(place->endpoint.has_value());
    CHECK(*place->endpoint == Endpoint{"node0", 29501});
}

TEST_CASE("Open MPI's variables are read, with the address from MASTER_ADDR/PORT or --rendezvous") {
    const std::map<std::string, std::string> vars = {{"OMPI_COMM_WORLD_RANK", "3"},
                                                      {"OMPI_COMM_WORLD_SIZE", "8"},
                                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                                      {"MASTER_ADDR", "10.0.0.1"},
                                                      {"MASTER_PORT", "6000"}};
    auto place = detect_process_place(env_of(vars));
    REQUIRE(place.has_value());
    CHECK(place->launcher == Launcher::openmpi);
    CHECK(place->rank == 3);
    CHECK(place->world_size == 8);
    CHECK(place->local_rank == 3);
    CHECK(*place->endpoint == Endpoint{"10.0.0.1", 6001});

    auto overridden = detect_process_place(env_of(vars), Endpoint{"head", 7000});
    CHECK(*overridden->endpoint == Endpoint{"head", 7000});
}

TEST_CASE("PMI variables are read, the local rank from MPI_LOCALRANKID when set") {
    auto place = detect_process_place(
        env_of({{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "2"}}), Endpoint{"head", 7000});
    REQUIRE(place.has_value());
    CHECK(place->launcher == Launcher::pmi);
    CHECK(place->rank == 5);
    CHECK(place->local_rank == 2);
    auto no_local = detect_process_place(env_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}), Endpoint{"head", 7000});
    CHECK_FALSE(no_local->local_rank.has_value());
}

TEST_CASE("torchrun's variables win over mpirun's when both are set") {
    auto place = detect_process_place(env_of({{"RANK", "1"},
                                              {"WORLD_SIZE", "2"},
                                              {"OMPI_COMM_WORLD_RANK", "0"},
                                              {"OMPI_COMM_WORLD_SIZE", "4"},
                                              {"MASTER_ADDR", "a"},
                                              {"MASTER_PORT", "1000"}}));
    CHECK(place->launcher == Launcher::torchrun);
    CHECK(place->world_size == 2);
}

TEST_CASE("missing and malformed variables are errors naming the variable") {
    CHECK_THROWS_WITH_AS(detect_process_place(env_of({{"RANK", "0"}})),
                         doctest::Contains("WORLD_SIZE is not set"), RendezvousError);
    CHECK_THROWS_WITH_AS(detect_process_place(env_of({{"OMPI_COMM_WORLD_SIZE", "2"}}), Endpoint{"h", 1}),
                         doctest::Contains("OMPI_COMM_WORLD_RANK is not set"), RendezvousError);
    CHECK_THROWS_WITH_AS(detect_process_place(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}})),
                         doctest::Contains("RANK=\"x\" is not an integer"), RendezvousError);
    CHECK_THROWS_WITH_AS(
        detect_process_place(env_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}})),
        doctest::Contains("RANK=4 is outside 0..3"), RendezvousError);
    CHECK_THROWS_WITH_AS(
        detect_process_place(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}, {"MASTER_ADDR", "a"},
                                     {"MASTER_PORT", "1"}})),
        doctest::Contains("LOCAL_RANK=-1"), RendezvousError);
    CHECK_THROWS_WITH_AS(
        detect_process_place(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "65535"}})),
        doctest::Contains("MASTER_PORT=65535"), RendezvousError);
}

TEST_CASE("several processes without a rendezvous address is an error that says what to set") {
    CHECK_THROWS_WITH_AS(detect_process_place(env_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}})),
                         doctest::Contains("set MASTER_ADDR and MASTER_PORT"), RendezvousError);
    CHECK_THROWS_WITH_AS(detect_process_place(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}})),
                         doctest::Contains("MASTER_ADDR is set but MASTER_PORT is not"), RendezvousError);
    // One process needs no rendezvous.
    auto single = detect_process_place(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
    REQUIRE(single.has_value());
    CHECK_FALSE(single->endpoint.has_value());
}

TEST_CASE("parse_endpoint reads HOST:PORT and [IPv6]:PORT") {
    CHECK(parse_endpoint("node0:29501") == Endpoint{"node0", 29501});
    CHECK(parse_endpoint("[fe80::1]:80") == Endpoint{"fe80::1", 80});
    CHECK_THROWS_AS(parse_endpoint("node0"), RendezvousError);
    CHECK_THROWS_AS(parse_endpoint("node0:0"), RendezvousError);
    CHECK_THROWS_AS(parse_endpoint(":80"), RendezvousError);
    CHECK_THROWS_AS(parse_endpoint("node0:http"), RendezvousError);
}

TEST_CASE("rank 0 hands the payload to every other rank over TCP") {
    RendezvousServer server(0);
    REQUIRE(server.port() > 0);
    std::vector<std::byte> payload(128);
    for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 7 + 1);
    const int world = 4;
    std::vector<std::vector<std::byte>> got(world);
    std::vector<std::thread> clients;
    for (int r = 1; r < world; ++r)
        clients.emplace_back(
            [&, r] { got[static_cast<std::size_t>(r)] = fetch_rendezvous_payload({"127.0.0.1", server.port()}, r, world, 10s); });
    server.serve(payload, world, 10s);
    for (auto& t : clients) t.join();
    for (int r = 1; r < world; ++r) CHECK(got[static_cast<std::size_t>(r)] == payload);
}

TEST_CASE("a client retries until rank 0 listens") {
    // Find a free port, close it, start the client first, then the server.
    int port = 0;
    {
        RendezvousServer probe(0);
        port = probe.port();
    }
    std::vector<std::byte> got;
    std::thread client([&] { got = fetch_rendezvous_payload({"localhost", port}, 1, 2, 10s); });
    std::this_thread::sleep_for(300ms);
    RendezvousServer server(port);
    const std::vector<std::byte> payload(16, std::byte{42});
    server.serve(payload, 2, 10s);
    client.join();
    CHECK(got == payload);
}

TEST_CASE("a client announcing another world size is refused with a clear error") {
    RendezvousServer server(0);
    std::string error;
    std::thread client([&] {
        try {
            (void)fetch_rendezvous_payload({"127.0.0.1", server.port()}, 1, 3, 5s);
        } catch (const RendezvousError& e) {
            error = e.what();
        }
    });
    CHECK_THROWS_WITH_AS(server.serve(std::vector<std::byte>(8), 2, 1500ms), doctest::Contains("ranks 1 never connected"),
                         RendezvousError);
    client.join();
    CHECK(error.find("world size 2") != std::string::npos);
}

TEST_CASE("a client gives up after the timeout and names the address") {
    int port = 0;
    {
        RendezvousServer probe(0);
        port = probe.port();
    }
    const std::string where = "rank 0 at 127.0.0.1:" + std::to_string(port);
    CHECK_THROWS_WITH_AS(fetch_rendezvous_payload({"127.0.0.1", port}, 1, 2, 500ms),
                         doctest::Contains(where.c_str()), RendezvousError);
}

// NCCL's cost model (collective_cost.hpp) against hand computations from
// NCCL's tuning.cc (v2.30.7), the choice its tuner makes, and the bound no
// prediction may pass: for any node count and size, the bus bandwidth stays
// within what the slowest level lets through, above zero, and the time never
// falls as the size grows.
#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/units.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

using namespace dtsim::hw;

namespace {

constexpr double us = 1e-6;

// doctest::Approx adds an absolute 1e-5 to its tolerance (scale 1): useless for
// times in seconds. Relative only.
doctest::Approx rel(double x) { return doctest::Approx(x).scale(0); }

// DGX H100-like: NVLink ring 370 GB/s, NVLS 475 GB/s, one 48 GB/s NIC per GPU.
Cluster h100() {
    Cluster c;
    c.name = "h100";
    c.gpu.name = "H100-SXM";
    c.gpus_per_node = 8;
    c.nodes = 1024;
    c.intra_node = Link{"nvlink", 370e9, 292e9, 4.8e-6, 475e9};
    c.inter_node = Link{"ib", 48e9, 48e9, 5e-6, 0};
    c.base_latency = 20e-6;
    return c;
}

// DGX A100-like: no NVLS, 24 GB/s per NIC, an AMD host.
Cluster a100() {
    Cluster c = h100();
    c.name = "a100";
    c.gpu.name = "A100-SXM-80GB";
    c.intra_node = Link{"nvlink", 235e9, 195e9, 4.8e-6, 0};
    c.inter_node = Link{"ib", 24e9, 24e9, 5e-6, 0};
    return c;
}

GroupShape shape(int nodes, int per_node) { return GroupShape{nodes * per_node, nodes, per_node, per_node}; }

Cluster shipped(const std::string& run) { return load_config(std::string(DTSIM_CONFIGS) + "/runs/" + run).cluster; }

double busbw(Collective coll, double bytes, const GroupShape& g, const CollectiveCost& r) {
    return bus_factor(coll, g.ranks) * bytes / r.seconds;
}

}  // namespace

TEST_CASE("ring all-reduce of 1 GiB on 4 nodes of 8 H100: NCCL's Simple ring by hand") {
    const Cluster c = h100();
    const GroupShape g = shape(4, 8);
    const double S = 1 * kGiB;
    // Bus bandwidth: min(8 NICs x 48, NVLink 370 x 8/7) = 384 GB/s; algorithm
    // bandwidth 384 x n / nsteps = 384 x 32/62.
    const double algbw = 384e9 * 32 / 62;
    // Latency: baseLat 8.4 + (62 - 6) NVLink steps x max(3.4, 3 x 1.0 net
    // overhead) + 6 network steps x 14.0, x 1.4 for the ring's plateau
    // (S / (16 channels x 32 ranks) >= 64 bytes).
    const double latency = (8.4 + 56 * 3.4 + 6 * 14.0) * 1.4 * us;
    const CollectiveCost r = collective_cost(c, Collective::all_reduce, S, g, Algorithm::ring);
    CHECK(r.nccl_algorithm == NcclAlgorithm::ring);
    CHECK(r.protocol == Protocol::simple);
    CHECK(r.latency == rel(latency));
    CHECK(r.seconds == rel(latency + S / algbw));
    CHECK(r.seconds == rel(5813.6e-6).epsilon(1e-4));
    // LL128 for the same ring: min(0.92 x 384, 8 channels x 36.7) = 293.6 GB/s,
    // latency 14 + 56 x 1.9 + 6 x 4.0; slower at 1 GiB, faster at 1 MiB.
    const double ll128 = (14 + 56 * 1.9 + 6 * 4.0) * us;
    const double small = 1 * kMiB;
    const CollectiveCost m = collective_cost(c, Collective::all_reduce, small, g, Algorithm::ring);
    CHECK(m.protocol == Protocol::ll128);
    CHECK(m.seconds == rel(ll128 + small / (293.6e9 * 32 / 62)));
}

TEST_CASE("tree all-reduce latency at 64 nodes: 2 (7 NVLink + log2 64 network) hops, LL for a small message") {
    const Cluster c = h100();
    const GroupShape g = shape(64, 8);
    const CollectiveCost r = collective_cost(c, Collective::all_reduce, 8, g, Algorithm::tree);
    CHECK(r.nccl_algorithm == NcclAlgorithm::tree);
    CHECK(r.protocol == Protocol::ll);
    // baseLat 6.8 + 2 ((512/64 - 1) x 0.6 + 6 x 5.0) = 75.2 us.
    CHECK(r.latency == rel(75.2 * us));
    // LL's bandwidth: min(min(0.92 x 384, 8 x 36.0) / 3.8, 20.4) = 20.4 GB/s
    // (the multi-node LL ceiling of an Intel host), algorithm bandwidth half.
    CHECK(r.seconds == rel(75.2 * us + 8 / 10.2e9));
    // One GPU per node: no NVLink hop, the tree's network latency: 6.8 + 2 x 6 x 5.0.
    const CollectiveCost one = collective_cost(c, Collective::all_reduce, 8, shape(64, 1), Algorithm::tree);
    CHECK(one.latency == rel(66.8 * us));
}

TEST_CASE("NCCL's tuner: tree/LL for small multi-node messages, ring/Simple for large, NVLS inside a node") {
    const Cluster c = h100();
    const GroupShape eight = shape(8, 8);
    // 8 KiB on 8 nodes: tree LL at 6.8 + 2 (7 x 0.6 + 3 x 5.0) = 45.2 us, its
    // bandwidth 10.2 GB/s x NCCL's tree correction 0.7 at 8 KiB.
    const CollectiveCost small = collective_cost(c, Collective::all_reduce, 8 * kKiB, eight);
    CHECK(small.nccl_algorithm == NcclAlgorithm::tree);
    CHECK(small.protocol == Protocol::ll);
    CHECK(small.seconds == rel(45.2 * us + 8 * kKiB / (10.2e9 * 0.7)));
    CHECK(small.seconds < 50 * us);
    // 16 GiB on 8 nodes: the ring at 384 GB/s beats NVLS-tree's
    // min(475, 384, 8 x 45.5) = 364 GB/s.
    const CollectiveCost big = collective_cost(c, Collective::all_reduce, 16 * kGiB, eight);
    CHECK(big.nccl_algorithm == NcclAlgorithm::ring);
    CHECK(big.protocol == Protocol::simple);
    CHECK(big.bus_bandwidth == rel(384e9));
    // Without NVLS (A100 nodes) the ring takes large messages from 1 GiB.
    const CollectiveCost a = collective_cost(a100(), Collective::all_reduce, 1 * kGiB, eight);
    CHECK(a.nccl_algorithm == NcclAlgorithm::ring);
    CHECK(a.protocol == Protocol::simple);
    // On its AMD host an NVLink step costs the network post overhead, 2 us x 3 for Simple, not 3.4:
    // (8.4 + 112 x 6.0 + 14 x 14) x 1.4 us, at min(8 x 24, 235 x 8/7) = 192 GB/s.
    CHECK(a.latency == rel((8.4 + 112 * 6.0 + 14 * 14.0) * 1.4 * us));
    CHECK(a.seconds == rel(a.latency + 1 * kGiB / (192e9 * 64 / 126)));
    // On 2 nodes NVLS-tree wins large messages: min(475, 2 x 384, 8 x 57.7) = 461.6 GB/s.
    const CollectiveCost two = collective_cost(c, Collective::all_reduce, 16 * kGiB, shape(2, 8));
    CHECK(two.nccl_algorithm == NcclAlgorithm::nvls_tree);
    CHECK(two.bus_bandwidth == rel(461.6e9));
    // Inside one node: NVLS for 1 GiB (25 us + 1.75 S / 475 GB/s), ring LL for 4 KiB.
    const GroupShape node = shape(1, 8);
    const CollectiveCost nvls = collective_cost(c, Collective::all_reduce, 1 * kGiB, node);
    CHECK(nvls.nccl_algorithm == NcclAlgorithm::nvls);
    CHECK(nvls.seconds == rel(25 * us + 1.75 * kGiB / 475e9));
    const CollectiveCost tiny = collective_cost(c, Collective::all_reduce, 4 * kKiB, node);
    CHECK(tiny.nccl_algorithm == NcclAlgorithm::ring);
    CHECK(tiny.protocol == Protocol::ll);
    // Ring LL in a node: 6.6 + 14 x 0.6 us, min(141, 370 / 2) = 141 GB/s bus bandwidth.
    CHECK(tiny.seconds == rel((6.6 + 14 * 0.6) * us + 4 * kKiB / (141e9 * 8 / 14)));
}

TEST_CASE("all-gather: ring in a node, PAT with one GPU per node for small messages; broadcast's ring") {
    const Cluster c = h100();
    // 1 GiB all-gather on 8 GPUs: ring Simple, 8.4 + 7 x 3.4 us, 370 x 8/7 GB/s.
    const CollectiveCost ag = collective_cost(c, Collective::all_gather, 1 * kGiB, shape(1, 8));
    CHECK(ag.nccl_algorithm == NcclAlgorithm::ring);
    CHECK(ag.seconds == rel((8.4 + 7 * 3.4) * us + 1 * kGiB / (370e9 * 8 / 7)));
    // NVLS forced: 25 us, one operation at half the NVLS bus bandwidth x (ppn-1)/ppn, slower than the ring.
    const CollectiveCost nv = collective_cost(c, Collective::all_gather, 1 * kGiB, shape(1, 8), Algorithm::nvls);
    CHECK(nv.nccl_algorithm == NcclAlgorithm::nvls);
    CHECK(nv.seconds == rel(25 * us + 1 * kGiB / (475e9 / 2 * 7 / 8)));
    CHECK(nv.seconds > ag.seconds);
    // 64 KiB on 64 nodes of one GPU: PAT, 8.0 + log2(64) x 14/3.5 + 64 x 2.8 us at 0.75 x 48 GB/s.
    const CollectiveCost pat = collective_cost(c, Collective::all_gather, 64 * kKiB, shape(64, 1));
    CHECK(pat.nccl_algorithm == NcclAlgorithm::pat);
    CHECK(pat.latency == rel((8.0 + 6 * 4.0 + 64 * 2.8) * us));
    CHECK(pat.seconds == rel(pat.latency + 64 * kKiB / (0.75 * 48e9)));
    // Broadcast on 16 GPUs of 2 nodes, Simple: 8.4 + 16 steps x the tree's 14 us network latency.
    const CollectiveCost b = collective_cost(c, Collective::broadcast, 4 * kGiB, shape(2, 8));
    CHECK(b.protocol == Protocol::simple);
    CHECK(b.latency == rel((8.4 + 16 * 14.0) * us));
    CHECK(b.seconds == rel(b.latency + 4 * kGiB / 384e9));
}

TEST_CASE("NVLS-tree's pipeline fill: NCCL's chunk through every stage, on top of its tuner's time") {
    const Cluster c = h100();
    // What NCCL's tuner says for NVLS-tree on N nodes of 8 (bus 364 GB/s beyond 2 nodes).
    auto tuner = [](int nodes, double bytes) {
        const double n = 8.0 * nodes, hops = 2 * std::floor(std::log2(nodes));
        return (25 + hops * 20.9) * us + bytes / (364e9 * n / (2 * (n - 1)));
    };
    // The stages one chunk crosses: 2 log2(N) network hops, each NIC carrying NCCL's 16 NVLS channels
    // of its head, and the NVLS scatter and gather, a GPU's NVLink carrying 16 channels x 8 heads.
    auto stages = [](int nodes) { return 2 * std::floor(std::log2(nodes)) * 16 / 48e9 + 2 * 16 * 8 / 370e9; };
    // 4 nodes, 256 MiB: NCCL_NVLSTREE_MAX_CHUNKSIZE's default holds the chunk to 64 KiB from 4 nodes on.
    const CollectiveCost four = collective_cost(c, Collective::all_reduce, 256 * kMiB, shape(4, 8));
    CHECK(four.nccl_algorithm == NcclAlgorithm::nvls_tree);
    CHECK(four.seconds == rel(tuner(4, 256 * kMiB) + 65536 * stages(4)));  // 1,670 us
    // 4 MiB, forced: under 128 pipes x 64 KiB = 8 MiB NCCL halves the chunk to 32 KiB.
    const CollectiveCost small = collective_cost(c, Collective::all_reduce, 4 * kMiB, shape(4, 8), Algorithm::nvls);
    CHECK(small.seconds == rel(tuner(4, 4 * kMiB) + 32768 * stages(4)));
    // 8 nodes, 128 MiB: 6 network hops, 176 us of fill over the tuner's 876 us.
    const CollectiveCost eight = collective_cost(c, Collective::all_reduce, 128 * kMiB, shape(8, 8));
    CHECK(eight.nccl_algorithm == NcclAlgorithm::nvls_tree);
    CHECK(eight.seconds == rel(tuner(8, 128 * kMiB) + 65536 * stages(8)));
    CHECK(eight.bus_bandwidth == rel(364e9));  // the fill counts as latency
    // 2 nodes, 1 GiB (forced, against the bound's 475): 128 KiB chunks, 2 network hops, and twice the
    // network: min(475, 2 x 384, 8 x 57.7) = 461.6 GB/s.
    const CollectiveCost two = collective_cost(c, Collective::all_reduce, 1 * kGiB, shape(2, 8), Algorithm::nvls);
    CHECK(two.seconds == rel((25 + 2 * 20.9) * us + 1 * kGiB / (461.6e9 * 16 / 30) + 131072 * stages(2)));
    // The choice stays the tuner's, which does not see the fill: on 8 nodes at 32 MiB NCCL takes
    // NVLS-tree (NVIDIA/nccl#1752 logs it so on 64 nodes), though its tree with LL128 would be faster.
    const CollectiveCost mid = collective_cost(c, Collective::all_reduce, 32 * kMiB, shape(8, 8));
    CHECK(mid.nccl_algorithm == NcclAlgorithm::nvls_tree);
    CHECK(mid.seconds > collective_cost(c, Collective::all_reduce, 32 * kMiB, shape(8, 8), Algorithm::tree).seconds);
    // Where the tuner leaves NVLS-tree for the ring (4 nodes, between 512 MiB and 1 GiB), the time
    // does not fall: below the switch it is at most the ring's time at the switch.
    double last = 0;
    for (double S = 256 * kMiB; S <= 2 * kGiB; S *= 1.01) {
        const double t = collective_cost(c, Collective::all_reduce, S, shape(4, 8)).seconds;
        CHECK(t >= last);
        last = t;
    }
}

TEST_CASE("forced algorithms: tree only for all-reduce, NVLS-tree across nodes, ring where nothing else applies") {
    const Cluster c = h100();
    CHECK(collective_cost(c, Collective::all_gather, 1e6, shape(4, 8), Algorithm::tree).algorithm == Algorithm::ring);
    const CollectiveCost across = collective_cost(c, Collective::all_reduce, 1e9, shape(4, 8), Algorithm::nvls);
    CHECK(across.nccl_algorithm == NcclAlgorithm::nvls_tree);
    CHECK(across.algorithm == Algorithm::nvls);
    // NVLS-tree latency: 25 (NVLink) + 2 x log2(4) x 20.9 (network) us, and its pipeline's fill: 64 KiB
    // chunks of 16 channels through 4 network hops (48 GB/s NICs) and 2 NVLink ones (8 heads, 370 GB/s).
    CHECK(across.latency == rel((25 + 4 * 20.9) * us + 65536 * (4 * 16 / 48e9 + 2 * 16 * 8 / 370e9)));
    CHECK(collective_cost(a100(), Collective::all_reduce, 1e9, shape(1, 8), Algorithm::nvls).algorithm ==
          Algorithm::ring);
    // One GPU per node has no NVLink to reduce on.
    CHECK(collective_cost(c, Collective::all_reduce, 1e9, shape(4, 1), Algorithm::nvls).algorithm == Algorithm::ring);
    CHECK(collective_cost(c, Collective::all_reduce, 1e9, shape(1, 1)).seconds == 0);
}

TEST_CASE("the bound: a node's NICs must carry 2(N-1)/N of an all-reduce; k x NIC in the limit") {
    const Cluster c = h100();
    // 8 nodes of 8: 384 GB/s x (2 x 63/64) / (2 x 7/8) = 432 GB/s.
    CHECK(bus_bandwidth_bound(c, Collective::all_reduce, shape(8, 8)) == rel(432e9));
    // 2 nodes: 384 x 1.875 = 720, but NVLS's 475 inside the node is lower.
    CHECK(bus_bandwidth_bound(c, Collective::all_reduce, shape(2, 8)) == rel(475e9));
    // One GPU per node: its NIC.
    CHECK(bus_bandwidth_bound(c, Collective::all_reduce, shape(16, 1)) == rel(48e9));
    CHECK(bus_bandwidth_bound(c, Collective::broadcast, shape(16, 2)) == rel(96e9));
    // Inside a node: NVLS's for all-reduce, NVLink's for the rest.
    CHECK(bus_bandwidth_bound(c, Collective::all_reduce, shape(1, 8)) == rel(475e9));
    CHECK(bus_bandwidth_bound(c, Collective::all_gather, shape(1, 8)) == rel(370e9));
    CHECK(group_bus_bandwidth(c, shape(4, 8)) == rel(384e9));
    CHECK(group_bus_bandwidth(c, shape(4, 2)) == rel(96e9));
    // NCCL's NVLS-tree takes twice the network on 2 nodes. Where the NICs are slow against NVLS (a
    // Blackwell node with 24 GB/s NICs) that passes what a node can send, 192 x 1.875 = 360 GB/s, and
    // the model is held to it: min(900, 2 x 192, 8 channels x 96) = 384 would not be.
    Cluster slow = c;
    slow.gpu.name = "B200";
    slow.intra_node = Link{"nvlink", 700e9, 600e9, 4.8e-6, 900e9};
    slow.inter_node = Link{"ib", 24e9, 24e9, 5e-6, 0};
    const CollectiveCost r = collective_cost(slow, Collective::all_reduce, 16 * kGiB, shape(2, 8), Algorithm::nvls);
    CHECK(r.nccl_algorithm == NcclAlgorithm::nvls_tree);
    CHECK(bus_bandwidth_bound(slow, Collective::all_reduce, shape(2, 8)) == rel(360e9));
    CHECK(r.bus_bandwidth == rel(360e9));
}

TEST_CASE("a measured curve stands only for the shape measured, and never above the bound") {
    Cluster c = h100();
    // A curve measured on 2 nodes of 8 whose line claims 1000 GB/s from 5 us.
    c.inter_node.fits.push_back(CollectiveFit{"all_reduce", Algorithm::automatic, 16, 2, 8, 64 * kKiB,
                                              {{5e-6, 1000e9}}, {"made-up"}});
    const double S = 4 * kGiB;
    const CollectiveCost two = collective_cost(c, Collective::all_reduce, S, shape(2, 8));
    CHECK(two.measured);
    CHECK(two.seconds == rel(5e-6 + 1.875 * S / 475e9));  // held to the bound
    CHECK(find_fit(c, "all_reduce", shape(2, 8)) != nullptr);
    // Four nodes, or two nodes of four: NCCL's model, as without the curve.
    Cluster plain = h100();
    for (const GroupShape& g : {shape(4, 8), shape(2, 4), GroupShape{12, 2, 4, 8}}) {
        CHECK(find_fit(c, "all_reduce", g) == nullptr);
        const CollectiveCost r = collective_cost(c, Collective::all_reduce, S, g);
        CHECK_FALSE(r.measured);
        CHECK(r.seconds == rel(collective_cost(plain, Collective::all_reduce, S, g).seconds));
    }
    // Below its smallest size the model stands, but never slower than the curve at that size: here
    // the curve's 5 us + 1.875 x 64 KiB / 475 GB/s at 64 KiB, under the model's 27.6 us at 32 KiB.
    const CollectiveCost below = collective_cost(c, Collective::all_reduce, 32 * kKiB, shape(2, 8));
    CHECK(below.seconds == rel(5e-6 + 1.875 * 64 * kKiB / 475e9));
    CHECK(collective_cost(plain, Collective::all_reduce, 32 * kKiB, shape(2, 8)).seconds > 25e-6);
}

TEST_CASE("on the shipped DGX H100 cluster, 8 nodes no longer pass the ring's limit nor pay 2-node latencies") {
    const Cluster c = shipped("llama3-8b-16xh100-fsdp.json");
    const GroupShape eight = shape(8, 8);
    REQUIRE(find_fit(c, "all_reduce", shape(2, 8)) != nullptr);  // the 2-node curve is there...
    CHECK(find_fit(c, "all_reduce", eight) == nullptr);           // ...and does not stand for 8 nodes
    const double S = 16 * kGiB;
    const CollectiveCost big = collective_cost(c, Collective::all_reduce, S, eight);
    CHECK(busbw(Collective::all_reduce, S, eight, big) <= 8 * 48e9);
    CHECK(busbw(Collective::all_reduce, S, eight, big) > 0.9 * 8 * 48e9);
    // 64 KiB: NCCL's tree, well under 100 us (the 2-node curve scaled by the ring gave about twice).
    const CollectiveCost small = collective_cost(c, Collective::all_reduce, 64 * kKiB, eight);
    CHECK(small.seconds < 70 * us);
}

namespace {

// The properties over node counts, sizes and collectives for one cluster.
void check_properties(const Cluster& c, bool model_only) {
    const std::vector<int> node_counts = {1, 2, 3, 4, 5, 8, 16, 32, 64, 100, 128, 256, 512, 1000, 1024};
    const std::vector<int> per_node = {1, 2, 8};
    const Collective colls[] = {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                                Collective::broadcast, Collective::reduce};
    for (int nodes : node_counts)
        for (int k : per_node)
            for (Collective coll : colls)
                for (Algorithm algo : {Algorithm::automatic, Algorithm::tree}) {
                if (nodes * k == 1) continue;
                const GroupShape g = shape(nodes, k);
                const double bound = bus_bandwidth_bound(c, coll, g);
                const double nic = k * c.inter_node.bandwidth;
                double last = 0;
                for (int e = 10; e <= 34; ++e)
                    // Just below and at every power of two, where NCCL's tree correction steps, and between.
                    for (double f : {1 - 1.0 / 1024, 1.0, 1.5}) {
                        const double S = std::ldexp(f, e);
                        const CollectiveCost r = collective_cost(c, coll, S, g, algo);
                        const double bw = busbw(coll, S, g, r);
                        INFO(c.name, " ", collective_name(coll), " (", algorithm_name(algo), ") on ", nodes, " x ", k,
                             " at ", S, " B: ", r.seconds, " s, busbw ", bw / 1e9, " GB/s, bound ", bound / 1e9);
                        CHECK(bw > 0);
                        CHECK(bw <= bound * (1 + 1e-9));
                        // NCCL's model takes the network's bwInter beyond 2 nodes: never more than k NICs.
                        if (model_only && nodes > 2) CHECK(bw <= nic * (1 + 1e-9));
                        CHECK(r.seconds >= last);
                        last = r.seconds;
                    }
            }
}

}  // namespace

TEST_CASE("property: over 1-1024 nodes and 1 KiB-16 GiB, bus bandwidth within the bound, above 0, time monotone") {
    check_properties(h100(), true);
    check_properties(a100(), true);
    // The shipped clusters, measured curves included.
    check_properties(shipped("llama3-8b-16xh100-fsdp.json"), false);
    check_properties(shipped("gpt3-175b-1024xa100-sc21.json"), false);
}

TEST_CASE("the CTAs NCCL launches: its NVLS channels, the collective channels, fewer for small buffers") {
    const Cluster c = h100();
    // One node: an all-reduce of 1 GiB goes NVLS, on NVLS_NCHANNELS_SM90 = 16 channels.
    const CollectiveCost nvls = collective_cost(c, Collective::all_reduce, kGiB, shape(1, 8));
    REQUIRE(nvls.nccl_algorithm == NcclAlgorithm::nvls);
    CHECK(nvls.ctas == 16);
    // A ring forced: round(370 / 60) = 6 channels on NVLink, doubled by the search and again: 24.
    const CollectiveCost ring = collective_cost(c, Collective::all_reduce, kGiB, shape(1, 8), Algorithm::ring);
    REQUIRE(ring.nccl_algorithm == NcclAlgorithm::ring);
    CHECK(ring.ctas == 24);
    // Four nodes: one channel per NIC (8), doubled: 16.
    const CollectiveCost across = collective_cost(c, Collective::all_gather, kGiB, shape(4, 8));
    REQUIRE(across.nccl_algorithm == NcclAlgorithm::ring);
    CHECK(across.ctas == 16);
    // Small buffers: channels dropped while bytes < nc x nt x threshold. Simple: 512 threads x 64 B,
    // 32 KiB a channel, so 64 KiB keeps 2 of them; LL128: 640 x 8 = 5,120 B a channel, 12 of them
    // (61,440 B); the ring's LL: 512 x 8 x 32 ranks = 128 KiB a channel, 1.
    const CollectiveCost small = collective_cost(c, Collective::all_gather, 64 * kKiB, shape(4, 8), Algorithm::ring);
    const int expected = small.protocol == Protocol::simple ? 2 : small.protocol == Protocol::ll128 ? 12 : 1;
    CHECK(small.ctas == expected);
    // PAT (one rank per node), whose threads NCCL's tuning leaves at 0, keeps every channel: the
    // 4 of one GPU per node below (a ring's Simple would keep 1 of them at 16 KiB).
    const CollectiveCost pat = collective_cost(c, Collective::all_gather, 16 * kKiB, shape(64, 1));
    REQUIRE(pat.nccl_algorithm == NcclAlgorithm::pat);
    CHECK(pat.ctas == 4);
}

TEST_CASE("links far faster than NCCL's top speeds: at most MAXCHANNELS (64) collective channels") {
    // The search asks for at most 32 channels (MAXCHANNELS / 2), doubled once more: 64 CTAs for a
    // forced ring in one node and across nodes (the channel count was a double cast to int, out of
    // range at such speeds).
    Cluster c = h100();
    c.intra_node = Link{"ideal", 1e21, 1e21, 0, 0};
    c.inter_node = Link{"ideal", 1e21, 1e21, 0, 0};
    for (const GroupShape& g : {shape(1, 8), shape(4, 8), shape(64, 1)}) {
        CAPTURE(g.nodes);
        const CollectiveCost r = collective_cost(c, Collective::all_reduce, kGiB, g, Algorithm::ring);
        REQUIRE(r.nccl_algorithm == NcclAlgorithm::ring);
        CHECK(r.ctas == 64);
        CHECK(std::isfinite(r.seconds));
        CHECK(r.seconds > 0);
    }
}

TEST_CASE("sizes past what a long holds (a config's integers multiply past 2^63 bytes) are priced, finite") {
    for (const GroupShape& g : {shape(1, 8), shape(4, 8)})
        for (const Collective coll : {Collective::all_reduce, Collective::all_gather}) {
            const CollectiveCost r = collective_cost(h100(), coll, 1e20, g);
            CHECK(std::isfinite(r.seconds));
            CHECK(r.seconds > 1e20 / 1e12);  // no link moves a terabyte a second
        }
}

TEST_CASE("the collective channels across nodes with fewer GPUs of the group on each, as NCCL sets them") {
    // 1 GiB rings, every channel kept. H100 with 48 GB/s NICs: k GPUs per node give k search channels
    // at 48 GB/s; up to 4 of them are duplicated at 24 GB/s (ncclTopoDupChannels), then doubled
    // (ncclTopoPostset): 4k; from 5 the duplication stops and Hopper's "<8 PPN" rule doubles again
    // instead (48 > 45, fewer than 16): 4k too; at 8, 16 channels, and the rule stops.
    auto check = [](const Cluster& c, const std::vector<std::pair<int, int>>& ctas_by_per_node) {
        for (const auto& pair : ctas_by_per_node) {
            const int per_node = pair.first, ctas = pair.second;
            CAPTURE(c.inter_node.name);
            CAPTURE(per_node);
            const CollectiveCost r = collective_cost(c, Collective::all_gather, kGiB, shape(16, per_node), Algorithm::ring);
            REQUIRE(r.nccl_algorithm == NcclAlgorithm::ring);
            CHECK(r.ctas == ctas);
        }
    };
    const std::vector<std::pair<int, int>> hopper{{1, 4}, {2, 8}, {3, 12}, {4, 16}, {5, 20}, {6, 24}, {7, 28}, {8, 16}};
    check(h100(), hopper);
    Cluster roce = h100();  // a RoCE cluster's measured 45.9 GB/s a GPU: still above the rule's 45
    roce.inter_node = Link{"roce", 45.9e9, 45.9e9, 5e-6, 0};
    check(roce, hopper);
    // A100 with 24 GB/s NICs: below 25 GB/s nothing is duplicated, and the rule is Hopper's: 2k.
    check(a100(), {{1, 2}, {2, 4}, {5, 10}, {8, 16}});
}

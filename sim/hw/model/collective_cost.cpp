// NCCL's cost model (collective_cost.hpp). Every constant below is NCCL's,
// read from NVIDIA/nccl v2.30.7-1 (commit 73cf112295c33aee2b895f329f592f2a9b4b0f97):
// src/graph/tuning.cc (ncclTunerConstantsDefaults, ncclTopoTuneModel,
// treeCorrectionFactor, ncclTopoGetAlgoTime) unless another file is named.
// The structure goes back to NCCL 2.18 at least; constants have moved since
// (v2.21.5: the tree's Simple hwLat on NVLink 28 us, its baseLat 0); PAT came
// with 2.23.
//
// What NCCL reads from its topology search (graph->nChannels, bwIntra,
// bwInter) comes here from the cluster config: the product nChannels x bw of
// a graph is a link's bus bandwidth, which the config gives per link. The
// channel count matters only for NCCL's per-channel ceilings; it is estimated
// as NCCL's search finds it on DGX-class nodes (channels(), below).
#include "dtsim/hw/collective_cost.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace dtsim::hw {

std::string_view collective_name(Collective c) {
    switch (c) {
        case Collective::all_reduce: return "all_reduce";
        case Collective::all_gather: return "all_gather";
        case Collective::reduce_scatter: return "reduce_scatter";
        case Collective::broadcast: return "broadcast";
        case Collective::reduce: return "reduce";
    }
    return "?";
}

std::string_view protocol_name(Protocol p) {
    switch (p) {
        case Protocol::ll: return "LL";
        case Protocol::ll128: return "LL128";
        case Protocol::simple: return "Simple";
    }
    return "?";
}

std::string_view nccl_algorithm_name(NcclAlgorithm a) {
    switch (a) {
        case NcclAlgorithm::tree: return "Tree";
        case NcclAlgorithm::ring: return "Ring";
        case NcclAlgorithm::nvls: return "NVLS";
        case NcclAlgorithm::nvls_tree: return "NVLSTree";
        case NcclAlgorithm::pat: return "PAT";
    }
    return "?";
}

double bus_factor(Collective c, int n) {
    if (n <= 1) return 0;
    const double nn = n;
    switch (c) {
        case Collective::all_reduce: return 2 * (nn - 1) / nn;
        case Collective::all_gather:
        case Collective::reduce_scatter: return (nn - 1) / nn;
        case Collective::broadcast:
        case Collective::reduce: return 1;
    }
    return 1;
}

namespace {

constexpr double kUs = 1e-6;
constexpr double kGBps = 1e9;
constexpr double kInf = std::numeric_limits<double>::infinity();

// NCCL's compute-capability index: its tables have a row per generation.
enum Gen { volta = 0, ampere = 1, hopper = 2, blackwell = 3 };

// From the GPU's name; a name that says nothing (test clusters) is taken for
// Hopper, the generation of most shipped clusters.
Gen generation(const GpuSpec& gpu) {
    std::string n = gpu.name;
    for (char& ch : n) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
    if (has("B100") || has("B200") || has("B300") || has("GB2")) return blackwell;
    if (has("H100") || has("H200") || has("H800") || has("H20") || has("GH2")) return hopper;
    if (has("A100") || has("A800") || has("A30") || has("A10")) return ampere;
    if (has("V100")) return volta;
    return hopper;
}

// NCCL looks at the CPU for the multi-node LL ceiling and the network post
// overhead (Intel or AMD). The cluster config names no CPU: the DGX of each
// generation's is taken (DGX-1/2 and DGX H100/B200: Intel Xeon; DGX A100: AMD EPYC).
bool amd_host(Gen g) { return g == ampere; }

enum Proto { LL = 0, LL128 = 1, SIMPLE = 2 };
enum Algo { TREE = 0, RING = 1, NVLS = 2, NVLS_TREE = 3, PAT = 4 };
constexpr int kAlgos = 5;

using Row = std::array<double, 3>;  // LL, LL128, Simple

// ncclTunerConstantsDefaults.baseLatencies (us), CollNet rows left out.
constexpr std::array<Row, kAlgos> kBaseLat = {{
    {6.8, 14.0, 8.4},  // Tree
    {6.6, 14.0, 8.4},  // Ring
    {0, 0, 0},         // NVLS
    {0, 0, 0},         // NVLS Tree
    {8.0, 8.0, 8.0},   // PAT
}};
// ncclTunerConstantsDefaults.hwLatencies[NCCL_HW_NVLINK] (us per step).
constexpr std::array<Row, kAlgos> kNvlinkLat = {{
    {0.6, 1.25, 4.0},  // Tree
    {0.6, 1.9, 3.4},   // Ring
    {0, 0, 25},        // NVLS
    {0, 0, 25},        // NVLS Tree
    {0, 0, 4.0},       // PAT
}};
// ncclTunerConstantsDefaults.hwLatencies[NCCL_HW_NET] (us per step).
constexpr std::array<Row, kAlgos> kNetLat = {{
    {5.0, 8.5, 14},    // Tree
    {2.7, 4.0, 14.0},  // Ring
    {0, 0, 18},        // NVLS
    {0, 0, 20.9},      // NVLS Tree
    {0, 0, 14},        // PAT
}};
// llMaxBws (GB/s): one node by GPU generation; several by CPU (Intel row
// 0, AMD row 1), 2 nodes and more than 2 (index2).
constexpr std::array<Row, 4> kLlMaxBw = {{
    {39.0, 39.0, 20.4},              // Volta-N1 / Intel-N2 / Intel-N4
    {87.7, 22.5, 19.0},              // Ampere-N1 / AMD-N2 / AMD-N4
    {141.0, 45.0, 35.0},             // Hopper-N1 / AMD-N2 / AMD-N4
    {2 * 141.0, 2 * 45.0, 2 * 35.0}  // Blackwell-N1 / AMD-N2 / AMD-N4
}};
// Per-channel ceilings (GB/s) by generation and (1 node, 2 nodes, more).
constexpr std::array<Row, 4> kPerChRingLL128 = {{{20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {40.0, 40.0, 40.0}}};
constexpr std::array<Row, 4> kPerChTreeLL128 = {{{20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}}};
constexpr std::array<Row, 4> kPerChTree = {{{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}}};
constexpr std::array<Row, 4> kPerChNvlsTree = {{{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0}}};

// treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 256 MiB: the
// tree's bandwidth at medium sizes (applied to tree all-reduce, and to
// NVLS-tree on Blackwell with x86 hosts).
constexpr std::array<std::array<double, 24>, 3> kTreeCorrection = {{
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9},
}};
// ncclTopoGetAlgoTime applies the table while log2(bytes >> 6) < 23, so up to 512 MiB.
constexpr int kTreeCorrectionSizes = 23;

// The first (highest) per-channel speed of NCCL's topology search
// (src/graph/search.cc: speedArrayIntra/Inter, sm90SpeedArray*, sm100SpeedArray*).
double top_intra_speed(Gen g) { return g == blackwell ? 90.0 : g == hopper ? 60.0 : 40.0; }
double top_inter_speed(Gen g) { return g == blackwell ? 96.0 : 48.0; }

// NCCL's view of a group.
struct Comm {
    Gen gen;
    int n, nodes, k;  // ranks, nodes, members of the least populated node (its NICs)
    double ppn;       // nRanks / nNodes
    bool multi() const { return nodes > 1; }
    int size_index() const { return nodes <= 2 ? nodes - 1 : 2; }  // NCCL's index2
};

Comm comm_of(const Cluster& c, const GroupShape& g) {
    return Comm{generation(c.gpu), g.ranks, g.nodes, std::max(1, g.min_per_node),
                static_cast<double>(g.ranks) / g.nodes};
}

// A graph's channel count, as NCCL's search sets it (src/graph/search.cc). In a
// node: as many channels as fit the NVLink bandwidth at the highest speed,
// then doubled at half the speed (ncclTopoDupChannels): 12 on DGX A100 and
// DGX H100, whose NCCL logs say "24 coll channels" once the rings are doubled
// again (src/graph/connect.cc). Across nodes: one channel per NIC at up to the
// highest inter-node speed, 8 on DGX H100 (16 coll channels, nccl#1453).
// NCCL's MAXCHANNELS (src/include/device.h): the search asks for at most half of it
// (src/init.cc: ringGraph.maxChannels = MAXCHANNELS/2), connect.cc doubles them up to it. Only
// links far faster than NCCL's top speeds reach these bounds.
constexpr double kMaxChannels = 64;

double channels(const Cluster& c, const Comm& m) {
    const double n =
        m.multi() ? m.k * std::max(1.0, std::round(c.inter_node.bandwidth / kGBps / top_inter_speed(m.gen)))
                  : 2 * std::max(1.0, std::round(c.intra_node.bandwidth / kGBps / top_intra_speed(m.gen)));
    return std::min(n, kMaxChannels / 2);
}

// The bus bandwidth (nChannels x bw, bytes/s) of the graph algorithm `a` runs
// on: what ncclTopoTuneModel starts from. Across nodes NCCL takes bwIntra up
// to 2 nodes and bwInter beyond; for rings bwIntra = bwInter; for trees on 2
// nodes the search raises bwIntra up to twice bwInter, within the top speed
// and NVLink.
double graph_bandwidth(const Cluster& c, const Comm& m, Algo a) {
    const double nvlink = c.intra_node.bandwidth;
    if (!m.multi()) return nvlink;
    const double net = m.k * c.inter_node.bandwidth;
    const double nvl = m.k > 1 ? nvlink * m.k / (m.k - 1) : kInf;
    if (a == TREE && m.nodes <= 2) return std::min({2 * net, nvl, channels(c, m) * top_inter_speed(m.gen) * kGBps});
    return std::min(net, nvl);
}

bool has_nvls(const Cluster& c, const Comm& m) {
    // NVLS needs NVLink SHARP (the cluster's nvls_bandwidth) and two GPUs of the
    // communicator on a node (src/transport/nvls.cc, ncclNvlsInit).
    return c.intra_node.nvls_bandwidth > 0 && m.k >= 2;
}

struct Choice {
    Algo algo;
    Proto proto;
};

// The (algorithm, protocol) pairs NCCL would consider for the collective
// (ncclTopoTuneModel's skips, the enable matrix, updateCollCostTable).
// `forced`: NCCL_ALGO; ring where the forced one does not apply.
std::vector<Choice> candidates(const Cluster& c, const Comm& m, Collective coll, Algorithm forced) {
    const bool ar = coll == Collective::all_reduce;
    const bool ag_rs = coll == Collective::all_gather || coll == Collective::reduce_scatter;
    std::vector<Choice> out;
    auto all_protocols = [&](Algo a) {
        for (Proto p : {LL, LL128, SIMPLE}) out.push_back({a, p});
    };
    // NVLS: all-reduce, all-gather, reduce-scatter in one node (across nodes
    // NVLS needs CollNet, which is not modeled); NVLS-tree: all-reduce across
    // nodes. Simple only.
    const bool nvls = has_nvls(c, m) && !m.multi() && (ar || (ag_rs && m.k <= 32));
    const bool nvls_tree = has_nvls(c, m) && m.multi() && ar;
    // PAT: all-gather and reduce-scatter with one rank per node (ncclPatEnable).
    const bool pat = ag_rs && m.multi() && m.n == m.nodes;
    switch (forced) {
        case Algorithm::ring: all_protocols(RING); return out;
        case Algorithm::tree:
            all_protocols(ar ? TREE : RING);
            return out;
        case Algorithm::nvls:
            if (nvls) out.push_back({NVLS, SIMPLE});
            else if (nvls_tree) out.push_back({NVLS_TREE, SIMPLE});
            else all_protocols(RING);
            return out;
        case Algorithm::automatic: break;
    }
    all_protocols(RING);
    if (ar) all_protocols(TREE);
    if (nvls) out.push_back({NVLS, SIMPLE});
    if (nvls_tree) out.push_back({NVLS_TREE, SIMPLE});
    if (pat) out.push_back({PAT, SIMPLE});
    return out;
}

// One (algorithm, protocol) pair's latency (s) and algorithm bandwidth
// (bytes/s) before the size-dependent corrections.
struct Line {
    double latency = 0;
    double bandwidth = 0;
    // NVLS-tree only: what its pipeline's fill costs (nvls_tree_fill, below).
    int pipes = 0;                // NCCL's NVLS channels x NVLS heads (concurrentOps in enqueue.cc)
    double max_chunk = 0;         // bytes
    double hop_net = 0;           // s per chunk byte for one network hop (a head's NIC carries every channel)
    double hop_node = 0;          // s per chunk byte for the NVLS scatter or gather inside a node
    int net_hops = 0;             // up and down the tree across nodes
};

// NVLS-tree's pipeline (src/device/all_reduce.h, RunWorkColl<..., NCCL_ALGO_NVLS_TREE, ...>): each of
// NCCL's NVLS channels splits its part of the buffer over the NVLS heads (one per NIC) and runs it in
// chunks through a pipeline: the NVLS scatter (reduce) inside the node, up the tree across nodes,
// down it, the NVLS gather. NCCL's tuner prices the bandwidth and the per-hop latencies but not the
// fill: the last chunk leaves its GPU once S / bandwidth has passed and must still cross every
// stage, at the rate the stage gives one chunk of one channel.
//   - channels: NVLS_NCHANNELS_SM90 16 on Hopper; on Blackwell across nodes
//     ncclNvlsTreeSm100Tuning (src/transport/nvls.cc, v2.30.7): 32 on 2 nodes with 48 GB/s NICs or
//     faster; beyond, 24 with NICs of 48 GB/s or more (32 at 96 GB/s with more than 8 GPUs a node);
//     32 otherwise.
//   - the largest chunk: NCCL_NVLS_CHUNKSIZE 128 KiB, held to NCCL_NVLSTREE_MAX_CHUNKSIZE's default,
//     64 KiB from 4 nodes on (128 KiB below; src/transport/nvls.cc since v2.26); on Blackwell the
//     SM100 tuning's, with each GPU's NIC behind a PCIe switch it shares with the GPU (DGX B200:
//     PATH_PXB): 64 KiB with NICs under 96 GB/s, 256 KiB (and 256 KiB chunks) at 96 GB/s or more with
//     8 GPUs a node or fewer.
//   - heads: the NVLS graph's channels, one per NIC of a node (nccl-tests#319's 2-node DGX H100 log:
//     "NVLS Head 0" to "NVLS Head 7").
//   - hops: 2 log2(N) across nodes (the depth NCCL's latency counts), 2 inside a node.
void nvls_tree_pipeline(const Cluster& c, const Comm& m, double heads, Line& l) {
    int channels = 16;
    double chunk = 128.0 * 1024, tree_max = m.nodes >= 4 ? 65536.0 : chunk;
    if (m.gen == blackwell) {
        const double nic = c.inter_node.bandwidth / kGBps;
        channels = 32;
        if (m.nodes == 2 && nic >= 48) {
            tree_max = m.ppn <= 4 ? (chunk = 256.0 * 1024)
                       : (m.ppn >= 16 || (m.ppn <= 8 && nic < 96)) ? 65536.0 : 128.0 * 1024;
        } else if (nic >= 96) {
            if (m.ppn <= 8) channels = 24, chunk = tree_max = 256.0 * 1024;
            else channels = 32, tree_max = m.ppn < 32 ? 128.0 * 1024 : 65536.0;
        } else if (nic >= 48) {
            channels = 24, tree_max = 65536.0;
        }
    }
    l.pipes = static_cast<int>(channels * heads);
    l.max_chunk = std::min(chunk, tree_max);
    // One head's NIC: the node's NICs over its heads.
    l.hop_net = channels / (m.k * c.inter_node.bandwidth / heads);
    // Inside the node a GPU scatters (gathers) a chunk for every head of every channel over its NVLink.
    l.hop_node = channels * heads / c.intra_node.bandwidth;
    l.net_hops = 2 * static_cast<int>(std::floor(std::log2(m.nodes)));
}

// The fill at `bytes` (s): NCCL's chunk for the size (enqueue.cc, calcCollChunking: halved where the
// buffer gives each pipe fewer than 32, 16, 4, 1 chunks) across every stage.
double nvls_tree_fill(const Line& l, double bytes) {
    if (l.pipes <= 0) return 0;
    double chunk = l.max_chunk;
    const double ops = l.pipes;
    if (bytes < 32 * ops * chunk && chunk > 262144) chunk = 262144;
    if (bytes < 16 * ops * chunk && chunk > 131072) chunk = 131072;
    if (bytes < 4 * ops * chunk && chunk > 65536) chunk = 65536;
    if (bytes < 1 * ops * chunk && chunk > 32768) chunk = 32768;
    return chunk * (l.net_hops * l.hop_net + 2 * l.hop_node);
}

Line line_of(const Cluster& c, const Comm& m, Collective coll, Choice ch) {
    const Algo a = ch.algo;
    const Proto p = ch.proto;
    const int gi = m.gen, si = m.size_index();
    const bool ar = coll == Collective::all_reduce;
    const bool ag_rs = coll == Collective::all_gather || coll == Collective::reduce_scatter;
    const int nsteps = ar ? 2 * (m.n - 1) : ag_rs ? m.n - 1 : m.n;
    const double nch = channels(c, m);
    const double ll_max = (m.multi() ? kLlMaxBw[amd_host(m.gen) ? 1 : 0][si] : kLlMaxBw[gi][0]) * kGBps;

    // Bandwidth: NCCL's busBw, then its per-algorithm and per-protocol refinements.
    double bus = 0;
    if (a == NVLS) {
        // One node. The cluster's nvls_bandwidth is the measured NVLS all-reduce
        // bus bandwidth (NCCL: nChannels x bwIntra x nvlsEfficiency x (nCh-1)/nCh,
        // x 2 for all-reduce, which pipelines two operations); all-gather and
        // reduce-scatter get the single operation x (ppn-1)/ppn.
        bus = ar ? c.intra_node.nvls_bandwidth : c.intra_node.nvls_bandwidth / 2 * (m.ppn - 1) / m.ppn;
    } else if (a == NVLS_TREE) {
        // min(NVLS inside the node, the network (x 2 on 2 nodes), the per-channel ceiling).
        const double net = m.k * c.inter_node.bandwidth * (m.nodes <= 2 ? 2 : 1);
        bus = std::min({c.intra_node.nvls_bandwidth, net, nch * kPerChNvlsTree[gi][si] * kGBps});
    } else {
        bus = graph_bandwidth(c, m, a == RING ? RING : TREE);  // PAT runs on the tree's graph (src/init.cc)
    }
    if (a == RING && p == LL) bus = std::min(ll_max, bus * .5);
    if (a == RING && p == LL128) bus = std::min(bus * 0.92, nch * kPerChRingLL128[gi][si] * kGBps);
    if (a == TREE && ar) bus = std::min(bus * .92, nch * kPerChTree[gi][si] * kGBps);
    if (a == TREE && p == LL) bus = std::min(bus * 1.0 / 3.8, ll_max);
    if (a == TREE && p == LL128)
        bus = std::min(bus * (m.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), nch * kPerChTreeLL128[gi][si] * kGBps);
    if (a == PAT) bus *= .75;
    // Bus bandwidth to algorithm bandwidth: rings and NVLS by nRanks / nsteps,
    // trees by 1/2; NVLS and PAT all-gather and reduce-scatter already are.
    Line l;
    if (!(a != RING && ag_rs))
        bus *= (a == RING || a == NVLS || a == NVLS_TREE) ? static_cast<double>(m.n) / nsteps : .5;
    l.bandwidth = bus;

    // Latency.
    const double intra = kNvlinkLat[a][p];
    // With one rank per node every step crosses the network: NCCL takes the tree's network latency.
    const double inter = m.ppn == 1 ? kNetLat[TREE][p] : kNetLat[a][p];
    double lat = kBaseLat[a][p];
    if (a == RING) {
        if (coll == Collective::broadcast || coll == Collective::reduce) {
            // Rings whose channels differ (sameChannels 0, as on NVSwitch nodes):
            // nsteps chunks, Simple at the tree's per-step latency.
            const auto& hw = m.multi() ? kNetLat : kNvlinkLat;
            lat += nsteps * (p == SIMPLE ? hw[TREE][p] : hw[RING][p]);
        } else {
            // Inter-node rings still launch a network operation per step
            // (getNetOverhead: 1 us on Intel hosts, 2 on AMD; x 3 for Simple).
            const double overhead = m.multi() ? (amd_host(m.gen) ? 2.0 : 1.0) * (p == SIMPLE ? 3 : 1) : 0;
            const int inter_steps = !m.multi() ? 0 : ar ? 2 * (m.nodes - 1) : m.nodes - 1;
            lat += (nsteps - inter_steps) * std::max(intra, overhead) + inter_steps * inter;
        }
    } else if (a == TREE) {
        if (ar) lat += 2 * ((m.n / m.nodes - 1) * intra + std::floor(std::log2(m.nodes)) * inter);
    } else if (a == NVLS) {
        lat = intra;
    } else if (a == NVLS_TREE) {
        lat += intra + 2 * std::floor(std::log2(m.nodes)) * inter;
    } else if (a == PAT) {
        lat += std::floor(std::log2(m.nodes)) * (inter / 3.5) + m.n * 2.8;
    }
    l.latency = lat * kUs;
    if (a == NVLS_TREE) nvls_tree_pipeline(c, m, nch, l);
    return l;
}

// NCCL's time for one pair at `bytes` (ncclTopoGetAlgoTime, one operation).
double pair_seconds(const Comm& m, Collective coll, Choice ch, const Line& l, double nch, double bytes,
                    double* latency) {
    double bw = l.bandwidth;
    // Sizes past 2^62 bytes (a config's integers multiply past a long) take no correction either way.
    const long chunks = static_cast<long>(std::min(0x1p62, bytes)) >> 6;
    const int log_size = chunks > 0 ? static_cast<int>(std::floor(std::log2(static_cast<double>(chunks)))) : -1;
    if (coll == Collective::all_reduce && log_size >= 0 && log_size < kTreeCorrectionSizes &&
        (ch.algo == TREE || (ch.algo == NVLS_TREE && m.gen == blackwell && !amd_host(m.gen))))
        bw *= kTreeCorrection[ch.proto][log_size];
    double lat = l.latency;
    // The ring's plateau: Simple all-reduce across nodes once every rank's
    // share per channel (NCCL's channels are the graph's doubled) is 64 B or more.
    if (ch.algo == RING && ch.proto == SIMPLE && m.multi() && coll == Collective::all_reduce &&
        bytes / (2 * nch * m.n) >= 64)
        lat *= m.gen >= ampere ? 1.4 : 1.9;
    if (latency) *latency = lat;
    return lat + bytes / bw;
}

NcclAlgorithm public_algo(Algo a) {
    switch (a) {
        case TREE: return NcclAlgorithm::tree;
        case RING: return NcclAlgorithm::ring;
        case NVLS: return NcclAlgorithm::nvls;
        case NVLS_TREE: return NcclAlgorithm::nvls_tree;
        case PAT: return NcclAlgorithm::pat;
    }
    return NcclAlgorithm::ring;
}

Algorithm family(Algo a) {
    return a == TREE ? Algorithm::tree : (a == NVLS || a == NVLS_TREE) ? Algorithm::nvls : Algorithm::ring;
}

// The model at one size: the fastest candidate, every pair's algorithm
// bandwidth held to the group's bound.
struct Pick {
    double seconds = kInf, latency = 0;
    Choice choice{RING, SIMPLE};
};

// NCCL's choice is its tuner's, on its model's times; the time is then what the choice costs, its
// pipeline's fill included (NVLS-tree's; the tuner does not see it).
Pick pick_at(const Comm& m, Collective coll, const std::vector<Choice>& cand, const std::vector<Line>& lines,
             double nch, double bytes, bool with_fill = true) {
    Pick best;
    std::size_t chosen = cand.size();
    for (std::size_t i = 0; i < cand.size(); ++i) {
        if (!(lines[i].bandwidth > 0)) continue;
        double lat = 0;
        const double t = pair_seconds(m, coll, cand[i], lines[i], nch, bytes, &lat);
        if (t < best.seconds) best = Pick{t, lat, cand[i]}, chosen = i;
    }
    if (with_fill && chosen < cand.size()) {
        const double fill = nvls_tree_fill(lines[chosen], bytes);
        best.seconds += fill;
        best.latency += fill;
    }
    return best;
}

struct Model {
    Comm m;
    double nch = 1;
    std::vector<Choice> cand;
    std::vector<Line> lines;
};

Model model_of(const Cluster& c, Collective coll, const GroupShape& g, Algorithm algorithm) {
    Model md{comm_of(c, g), 0, {}, {}};
    md.nch = channels(c, md.m);
    md.cand = candidates(c, md.m, coll, algorithm);
    const double bf = bus_factor(coll, g.ranks);
    const double cap = bf > 0 ? bus_bandwidth_bound(c, coll, g) / bf : kInf;
    for (const Choice& ch : md.cand) {
        Line l = line_of(c, md.m, coll, ch);
        l.bandwidth = std::min(l.bandwidth, cap);
        md.lines.push_back(l);
    }
    return md;
}

// The model's time at `bytes`, kept monotone: NCCL's tree correction makes
// its predicted time drop where the factor rises (at a power of two), and a
// collective of S bytes is never slower than one of more, so the time is the
// least over this size and the sizes above it where a factor changes.
Pick model_at(const Model& md, Collective coll, double bytes) {
    Pick best = pick_at(md.m, coll, md.cand, md.lines, md.nch, bytes);
    if (coll != Collective::all_reduce) return best;
    // Where the tuner leaves NVLS-tree for another algorithm at a larger size, the time drops by the
    // fill there. Between two powers of two every pair's time is a line in the size (the tree's
    // correction changes only at powers of two), so NVLS-tree, the steepest but the ring's, gives way
    // at most once in such an octave, to the ring, where the tuner's time is continuous and rising:
    // its time just below that point is below all that follows in the octave. Each octave from the
    // size's up to 2^44 bytes is looked at (halved to a byte where NVLS-tree gives way in it); the
    // changes at the powers of two themselves are the edges below.
    if (std::any_of(md.cand.begin(), md.cand.end(), [](const Choice& ch) { return ch.algo == NVLS_TREE; })) {
        auto nvls_tree_at = [&](double s) {
            return pick_at(md.m, coll, md.cand, md.lines, md.nch, s, false).choice.algo == NVLS_TREE;
        };
        for (int e = bytes > 1 ? static_cast<int>(std::floor(std::log2(bytes))) : 0; e < 44; ++e) {
            double lo = std::ldexp(1.0, e), hi = std::nextafter(std::ldexp(1.0, e + 1), 0.0);
            if (hi <= bytes || !nvls_tree_at(lo) || nvls_tree_at(hi)) continue;
            for (int i = 0; i < 64 && hi - lo > 1; ++i) {
                const double mid = 0.5 * (lo + hi);
                (nvls_tree_at(mid) ? lo : hi) = mid;
            }
            if (hi <= bytes) continue;
            const Pick p = pick_at(md.m, coll, md.cand, md.lines, md.nch, lo, false);
            if (p.seconds < best.seconds) best.seconds = p.seconds;
        }
    }
    for (int i = 0; i <= kTreeCorrectionSizes; ++i) {  // the last edge: where the correction stops
        const double edge = std::ldexp(1.0, i + 6);
        if (edge <= bytes) continue;
        const Pick p = pick_at(md.m, coll, md.cand, md.lines, md.nch, edge);
        if (p.seconds < best.seconds) best.seconds = p.seconds;
    }
    return best;
}

// The communicator's collective channels (comm->nChannels), which rings, trees and PAT run on.
// In a node, channels() doubled once more (src/graph/connect.cc, ncclTopoPostset): 24 on DGX H100.
// Across nodes the search finds channels(), one per NIC at speed s, the per-GPU network figure up
// to the top inter-node speed; ncclTopoDupChannels (src/graph/search.cc) doubles them at half the
// speed unless s < 25, or on Hopper and later s < 50 with more than 4 channels; ncclTopoPostset
// doubles them, and on Hopper and later once more while the ring's s is above 45 and they are
// fewer than 16 ("4 compute channels per search channel to reach peak BW on <8 PPN"). With
// 400 Gb/s NICs (s 48) that gives 16 for 8 GPUs of the group on a node and 4 per GPU below
// (NCCL's logs: "Channel 00/04" for one GPU per node, nccl-tests#185 and nccl#1291; "8 coll
// channels" for two, nccl#1189); with 200 Gb/s NICs (s 24) 2 per GPU.
int coll_channels(const Cluster& c, const Comm& m) {
    const double search = channels(c, m);
    if (!m.multi()) return static_cast<int>(std::min(2 * search, kMaxChannels));
    double n = search, s = std::min(top_inter_speed(m.gen), c.inter_node.bandwidth / kGBps * m.k / search);
    if (s >= 25 && !(m.gen >= hopper && s < 50 && n > 4)) n *= 2, s /= 2;
    n *= 2;
    if (m.gen >= hopper && s > 45 && n < 16) n *= 2;
    return static_cast<int>(std::min(n, kMaxChannels));
}

// The CTAs NCCL may launch for the choice at `bytes` (src/enqueue.cc, after the tuner's pick: one per
// channel, info->nMaxChannels; for small buffers its planner may give work to fewer). NVLS and
// NVLS-tree run on their own channels (src/transport/nvls.cc: NVLS_NCHANNELS_SM90 16 on Hopper; on
// Blackwell 24 in one node, across nodes the SM100 tuning's, nvls_tree_pipeline). Rings, trees and
// PAT run on the communicator's collective channels (coll_channels). Rings and trees drop
// channels while bytes < nc x nt x threadThreshold: nt the protocol's threads (NCCL_LL_MAX_NTHREADS
// 512, NCCL_LL128_MAX_NTHREADS 640, NCCL_SIMPLE_MAX_NTHREADS 512, src/include/device.h), the
// threshold NCCL_LL_THREAD_THRESHOLD 8 (x nRanks for the ring's LL), NCCL_LL128_THREAD_THRESHOLD 8,
// NCCL_SIMPLE_THREAD_THRESHOLD 64 (src/include/comm.h, src/graph/tuning.cc); PAT, whose threads
// tuning.cc leaves at 0, drops none.
int ctas_of(const Cluster& c, const Comm& m, Choice ch, double bytes) {
    if (ch.algo == NVLS) return m.gen == blackwell ? 24 : 16;
    if (ch.algo == NVLS_TREE) {
        Line l;
        nvls_tree_pipeline(c, m, 1, l);
        return l.pipes;  // the channels, with one head
    }
    int nc = coll_channels(c, m);
    if (ch.algo == PAT) return std::max(nc, 1);
    const double nt = ch.proto == LL128 ? 640 : 512;
    const double threshold = ch.proto == SIMPLE ? 64 : ch.proto == LL && ch.algo == RING ? 8.0 * m.n : 8;
    while (nc >= 2 && bytes < nc * nt * threshold) --nc;
    return std::max(nc, 1);
}

const CollectiveFit* find_in(const Link& l, std::string_view op, Algorithm a) {
    for (const auto& f : l.fits)
        if (f.op == op && f.algorithm == a && !f.lines.empty()) return &f;
    return nullptr;
}

// The curve measured with NCCL's choice stands for `automatic`; one measured
// with NCCL_ALGO=Ring also stands for it where the operation has no other
// algorithm across the shapes measured (everything but all-reduce), and the
// other way round.
const CollectiveFit* find_for(const Link& l, std::string_view op, Algorithm a, bool ring_only) {
    if (const auto* f = find_in(l, op, a)) return f;
    if (ring_only && a == Algorithm::automatic) return find_in(l, op, Algorithm::ring);
    if (ring_only && a == Algorithm::ring) return find_in(l, op, Algorithm::automatic);
    return nullptr;
}

bool same_shape(const CollectiveFit& f, const GroupShape& g) {
    return f.ranks == g.ranks && f.nodes == g.nodes && f.per_node == g.min_per_node && f.per_node == g.max_per_node;
}

double envelope(const CollectiveFit& f, double x, double latency_scale, double bandwidth_scale, double* latency,
                double bandwidth_cap = 0) {
    double best = -1, lat = 0;
    for (const auto& line : f.lines) {
        double bw = line.bus_bandwidth * bandwidth_scale;
        if (bandwidth_cap > 0) bw = std::min(bw, bandwidth_cap);
        const double t = line.latency * latency_scale + x / bw;
        if (best < 0 || t < best) best = t, lat = line.latency * latency_scale;
    }
    if (latency) *latency = lat;
    return best;
}

}  // namespace

double group_bus_bandwidth(const Cluster& c, const GroupShape& g) {
    const Comm m = comm_of(c, g);
    return graph_bandwidth(c, m, RING);
}

double bus_bandwidth_bound(const Cluster& c, Collective coll, const GroupShape& g) {
    double nvlink = c.intra_node.bandwidth;
    if (coll == Collective::all_reduce && c.intra_node.nvls_bandwidth > 0 && g.max_per_node >= 2)
        nvlink = std::max(nvlink, c.intra_node.nvls_bandwidth);
    if (g.nodes <= 1) return nvlink;
    double bound = kInf;
    if (g.max_per_node > 1) {
        const double kk = g.max_per_node;
        bound = std::max(c.intra_node.bandwidth * kk / (kk - 1), nvlink);
    }
    const double net = std::max(1, g.min_per_node) * c.inter_node.bandwidth;
    const bool whole = coll == Collective::broadcast || coll == Collective::reduce;
    const double share = whole ? 1 : bus_factor(coll, g.ranks) / bus_factor(coll, g.nodes);
    return std::min(bound, net * share);
}

LevelSeconds level_seconds(const Cluster& c, Collective coll, double bytes, const GroupShape& g) {
    LevelSeconds t;
    if (g.ranks <= 1) return t;
    const double moved = bus_factor(coll, g.ranks) * bytes;
    if (g.uses(Level::intra_node)) {
        const double kk = g.max_per_node;
        const double nvlink = g.nodes > 1 ? c.intra_node.bandwidth * kk / (kk - 1) : c.intra_node.bandwidth;
        t.intra_node = moved / nvlink;
    }
    if (g.uses(Level::inter_node)) t.inter_node = moved / (c.inter_node.bandwidth * std::max(1, g.min_per_node));
    return t;
}

const CollectiveFit* find_fit(const Cluster& c, std::string_view op, const GroupShape& g, Algorithm algorithm) {
    if (algorithm == Algorithm::automatic) algorithm = c.algorithm;
    const Link& l = g.nodes > 1 ? c.inter_node : c.intra_node;
    const bool ring_only = op != "all_reduce";
    const CollectiveFit* f = find_for(l, op, algorithm, ring_only);
    // all_gather and reduce_scatter are the same ring, each half of an all-reduce
    // (nccl-tests#326, stas00: ~360 GB/s busbw for both on 8 x H100/H200).
    if (!f && op == "all_gather") f = find_for(l, "reduce_scatter", algorithm, true);
    if (!f && op == "reduce_scatter") f = find_for(l, "all_gather", algorithm, true);
    return f && same_shape(*f, g) ? f : nullptr;
}

double fitted_seconds(const CollectiveFit& f, double scaled_bytes, double latency_scale, double bandwidth_scale) {
    return envelope(f, scaled_bytes, latency_scale, bandwidth_scale, nullptr);
}

CollectiveCost collective_cost(const Cluster& c, Collective coll, double bytes, const GroupShape& g,
                               Algorithm algorithm) {
    if (g.ranks <= 1) return CollectiveCost{};
    if (algorithm == Algorithm::automatic) algorithm = c.algorithm;
    const double bf = bus_factor(coll, g.ranks);
    const Model md = model_of(c, coll, g, algorithm);
    const Pick p = model_at(md, coll, bytes);
    CollectiveCost r;
    r.seconds = p.seconds;
    r.latency = p.latency;
    r.algorithm = family(p.choice.algo);
    r.nccl_algorithm = public_algo(p.choice.algo);
    r.protocol = static_cast<Protocol>(p.choice.proto);
    r.ctas = ctas_of(c, md.m, p.choice, bytes);
    if (const CollectiveFit* f = find_fit(c, collective_name(coll), g, algorithm)) {
        const double cap = bus_bandwidth_bound(c, coll, g);
        if (bytes >= f->min_bytes) {
            r.seconds = envelope(*f, bf * bytes, 1, 1, &r.latency, cap);
            r.measured = true;
        } else {
            double lat = 0;
            const double there = envelope(*f, bf * f->min_bytes, 1, 1, &lat, cap);
            if (there < r.seconds) r.seconds = there, r.latency = std::min(lat, there), r.measured = true;
        }
    }
    r.latency = std::clamp(r.latency, 0.0, r.seconds);
    r.bus_bandwidth = bf * bytes / std::max(r.seconds - r.latency, 1e-30);
    return r;
}

CollectiveCost p2p_cost(const Cluster& c, double bytes, bool same_node) {
    const Link& l = same_node ? c.intra_node : c.inter_node;
    CollectiveCost r;
    r.algorithm = Algorithm::ring;
    r.bus_bandwidth = l.p2p_bandwidth;
    r.latency = c.base_latency + l.hop_latency;
    r.seconds = r.latency + bytes / l.p2p_bandwidth;
    if (const auto* f = find_for(l, "sendrecv", Algorithm::automatic, true); f && bytes >= f->min_bytes) r.seconds = envelope(*f, bytes, 1, 1, &r.latency);
    return r;
}

}  // namespace dtsim::hw

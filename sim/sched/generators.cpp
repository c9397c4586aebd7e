#include "dtsim/sched/generators.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <stdexcept>
#include <utility>

namespace dtsim::sched {
namespace {

using act::B;
using act::F;
using act::I;
using act::W;

void require_sizes(const char* who, int p, int m) {
    if (p < 1) throw std::invalid_argument(fmt::format("{}: the number of ranks p must be at least 1, got {}", who, p));
    if (m < 1)
        throw std::invalid_argument(fmt::format("{}: the number of microbatches m must be at least 1, got {}", who, m));
    if (p > 4096 || m > 65536)
        throw std::invalid_argument(fmt::format("{}: p must be at most 4096 and m at most 65536, got p={}, m={}", who, p, m));
}

void require_chunks(const char* who, int p, int v) {
    if (v < 1) throw std::invalid_argument(fmt::format("{}: the number of chunks v must be at least 1, got {}", who, v));
    if (static_cast<long long>(p) * v > 65536)
        throw std::invalid_argument(fmt::format("{}: p*v must be at most 65536, got {}", who, static_cast<long long>(p) * v));
}

Schedule make(std::string name, int p) {
    Schedule s;
    s.name = std::move(name);
    s.ranks.resize(static_cast<std::size_t>(p));
    return s;
}

}  // namespace

Schedule gpipe(int p, int m) {
    require_sizes("gpipe", p, m);
    Schedule s = make("gpipe", p);
    for (int r = 0; r < p; ++r) {
        auto& out = s.ranks[static_cast<std::size_t>(r)];
        for (int i = 0; i < m; ++i) out.push_back(F(r, i));
        for (int i = 0; i < m; ++i) out.push_back(B(r, i));
    }
    return s;
}

Schedule one_f_one_b(int p, int m) {
    require_sizes("1f1b", p, m);
    Schedule s = make("1f1b", p);
    for (int r = 0; r < p; ++r) {
        auto& out = s.ranks[static_cast<std::size_t>(r)];
        const int warmup = std::min(p - 1 - r, m);
        for (int i = 0; i < warmup; ++i) out.push_back(F(r, i));
        for (int k = 0; k < m - warmup; ++k) {
            out.push_back(F(r, warmup + k));
            out.push_back(B(r, k));
        }
        for (int k = m - warmup; k < m; ++k) out.push_back(B(r, k));
    }
    return s;
}

Schedule interleaved_1f1b(int p, int m, int v, int g) {
    require_sizes("interleaved", p, m);
    require_chunks("interleaved", p, v);
    if (g == 0) g = p;
    if (g < p || g > m)
        throw std::invalid_argument(fmt::format(
            "interleaved: the microbatch group size g must be in [p, m] (Megatron-LM: "
            "microbatch_group_size_per_vp_stage in [PP, M]; g defaults to p), got p={}, g={}, m={}",
            p, g, m));
    // Megatron-LM, megatron/core/pipeline_parallel/schedules.py,
    // forward_backward_pipelining_with_interleaving: a last group with fewer than PP
    // microbatches is a RuntimeError (since the SC21 code's m % p == 0 assertion was
    // relaxed to groups). Its order has dependency bubbles, and for some sizes
    // (p=4, m=5, v=3) a wait cycle.
    if (const int last = m % g; last != 0 && last < p)
        throw std::invalid_argument(fmt::format(
            "interleaved: m mod g = {} mod {} = {} is neither 0 nor >= p = {}; Megatron-LM rejects this "
            "(forward_backward_pipelining_with_interleaving: \"The remainder of M (the total micro-batches) divided "
            "by N (number of contiguous micro-batches in a virtual pipeline stage) should be 0, or larger than or "
            "equal to the pipeline-parallel size ... Otherwise, it introduces dependency bubbles in the pipeline\"); "
            "choose m a multiple of g (g defaults to p) or another g in [p, m], e.g. g = m",
            m, g, last, p));
    // Megatron's get_schedule_table: (microbatch, chunk) for each virtual microbatch.
    std::vector<std::pair<int, int>> table;
    for (int first = 0; first < m; first += g) {
        const int last = first + g >= m ? m : first + g;  // the last group takes the rest
        for (int c = 0; c < v; ++c)
            for (int mb = first; mb < last; ++mb) table.emplace_back(mb, c);
    }
    const int total = v * m;
    Schedule s = make("interleaved", p);
    for (int r = 0; r < p; ++r) {
        auto& out = s.ranks[static_cast<std::size_t>(r)];
        auto fwd = [&](int k) {
            const auto [mb, c] = table[static_cast<std::size_t>(k)];
            out.push_back(F(c * p + r, mb));
        };
        auto bwd = [&](int k) {
            const auto [mb, c] = table[static_cast<std::size_t>(k)];
            out.push_back(B((v - 1 - c) * p + r, mb));
        };
        const int warmup = std::min(2 * (p - 1 - r) + (v - 1) * g, total);
        for (int k = 0; k < warmup; ++k) fwd(k);
        for (int k = 0; k < total - warmup; ++k) {
            fwd(warmup + k);
            bwd(k);
        }
        for (int k = total - warmup; k < total; ++k) bwd(k);
    }
    return s;
}

Schedule zb_h1(int p, int m) {
    require_sizes("zbh1", p, m);
    Schedule s = make("zbh1", p);
    for (int r = 0; r < p; ++r) {
        auto& out = s.ranks[static_cast<std::size_t>(r)];
        const int warmup = std::min(p - 1 - r, m);
        for (int i = 0; i < warmup; ++i) out.push_back(F(r, i));
        int next_w = 0;
        for (int b = 0; b < m; ++b) {  // the b-th input-gradient pass
            if (warmup + b < m) out.push_back(F(r, warmup + b));
            out.push_back(I(r, b));
            if (b >= r) out.push_back(W(r, next_w++));  // W delayed by r microbatches
        }
        while (next_w < m) out.push_back(W(r, next_w++));
    }
    return s;
}

Schedule looped_bfs(int p, int m, int v) {
    require_sizes("bfs", p, m);
    require_chunks("bfs", p, v);
    Schedule s = make("bfs", p);
    for (int r = 0; r < p; ++r) {
        auto& out = s.ranks[static_cast<std::size_t>(r)];
        for (int c = 0; c < v; ++c)
            for (int i = 0; i < m; ++i) out.push_back(F(c * p + r, i));
        for (int c = v - 1; c >= 0; --c)
            for (int i = m - 1; i >= 0; --i) out.push_back(B(c * p + r, i));
    }
    return s;
}

Schedule dualpipev(int p, int m) {
    require_sizes("dualpipev", p, m);
    if (m < 2 * p)
        throw std::invalid_argument(
            fmt::format("dualpipev: needs at least 2p microbatches (DualPipeV: num_chunks >= num_ranks * 2), got p={}, m={}",
                        p, m));
    Schedule s = make("dualpipev", p);
    for (int r = 0; r < p; ++r) {
        auto& out = s.ranks[static_cast<std::size_t>(r)];
        const std::array<int, 2> stage{r, 2 * p - 1 - r};  // phase 0 goes down the V, phase 1 comes back
        std::array<int, 2> fwd{0, 0}, bwd{0, 0};
        std::deque<Action> weights;  // WeightGradStore's FIFO queue
        auto forward = [&](int ph) { out.push_back(F(stage[ph], fwd[ph]++)); };
        auto backward = [&](int ph, bool zb) {
            const int mb = bwd[ph]++;
            if (!zb) {
                out.push_back(B(stage[ph], mb));
                return;
            }
            out.push_back(I(stage[ph], mb));
            weights.push_back(W(stage[ph], mb));
        };
        // _forward_backward_chunk(f, b): F of phase f overlapped with the full B of phase b.
        auto forward_backward = [&](int f, int b) {
            forward(f);
            out.back().overlap_next = true;
            backward(b, false);
        };
        auto weight = [&] {
            out.push_back(weights.front());
            weights.pop_front();
        };
        // Step 1: nF0
        for (int i = 0; i < 2 * (p - r - 1); ++i) forward(0);
        // Step 2: nF0F1
        for (int i = 0; i < r + 1; ++i) {
            forward(0);
            forward(1);
        }
        // Step 3: nB1W1F1 (zero bubble)
        for (int i = 0; i < p - r - 1; ++i) {
            backward(1, true);
            weight();
            forward(1);
        }
        // Step 4 (main): nF0B1F1B0, two overlapped pairs; the last rank's first
        // F0 and B1 are not overlapped ("to further reduce bubble size").
        for (int i = 0; i < m - 2 * p + r + 1; ++i) {
            if (i == 0 && r == p - 1) {
                forward(0);
                backward(1, false);
            } else {
                forward_backward(0, 1);
            }
            forward_backward(1, 0);
        }
        // Step 5: nB1F1B0, B1 then an overlapped pair
        for (int i = 0; i < p - r - 1; ++i) {
            backward(1, false);
            forward_backward(1, 0);
        }
        // Step 6: nB1B0 (the second half with zero bubble)
        bool zb = false;
        for (int i = 0; i < r + 1; ++i) {
            if (i == (r + 1) / 2 && r % 2 == 1) zb = true;
            backward(1, zb);
            if (i == (r + 1) / 2 && r % 2 == 0) zb = true;
            backward(0, zb);
        }
        // Step 7: nWB0 (zero bubble)
        for (int i = 0; i < p - r - 1; ++i) {
            weight();
            backward(0, true);
        }
        // Step 8: nW
        for (int i = 0; i < r + 1; ++i) weight();
        if (!weights.empty() || fwd[0] != m || fwd[1] != m || bwd[0] != m || bwd[1] != m)
            throw std::logic_error("dualpipev: the steps do not cover every microbatch");
    }
    return s;
}

namespace {

const std::array<GeneratorInfo, 6> kGenerators{{
    {"gpipe", "GPipe: all forwards, then all backwards (Huang et al. 2019)", false},
    {"1f1b", "1F1B / PipeDream-flush (Narayanan et al. 2021)", false},
    {"interleaved", "interleaved 1F1B, v chunks per rank, Megatron-LM's order (Narayanan et al. 2021)", true},
    {"zbh1", "ZB-H1: 1F1B with the backward split into I and W, W delayed (Qi et al. 2023)", false},
    {"bfs", "looped breadth-first pipeline, v chunks per rank (Lamy-Poirier 2022)", true},
    {"dualpipev", "DualPipeV: V-shaped 2-chunk schedule (DeepSeek 2025)", false},
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 10> kAliases{{
    {"pipedream-flush", "1f1b"},
    {"interleaved-1f1b", "interleaved"},
    {"interleaved1f1b", "interleaved"},
    {"zb-h1", "zbh1"},
    {"zb1p", "zbh1"},
    {"looped-bfs", "bfs"},
    {"loopedbfs", "bfs"},
    {"breadth-first", "bfs"},
    {"dualpipe-v", "dualpipev"},
    {"one-f-one-b", "1f1b"},
}};

}  // namespace

std::span<const GeneratorInfo> generators() { return kGenerators; }

std::string canonical_generator(std::string_view name) {
    std::string n(name);
    for (char& c : n) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    for (char& c : n) c = c == '_' ? '-' : c;
    for (const auto& g : kGenerators)
        if (g.name == n) return g.name;
    for (const auto& [alias, target] : kAliases)
        if (alias == n) return std::string(target);
    return {};
}

Schedule generate(std::string_view name, const GenerateParams& q) {
    const std::string n = canonical_generator(name);
    const bool chunked = n == "interleaved" || n == "bfs";
    if (n == "dualpipev" && q.v != 1 && q.v != 2)
        throw std::invalid_argument(fmt::format(
            "dualpipev always has 2 chunks per rank (its V shape); chunks must be 2 or left out, got {}", q.v));
    if (!n.empty() && !chunked && n != "dualpipev" && q.v != 1)
        throw std::invalid_argument(fmt::format("{} has one chunk per rank; chunks must be 1, got {}", n, q.v));
    if (!n.empty() && n != "interleaved" && q.group != 0)
        throw std::invalid_argument(fmt::format("{}: the microbatch group size applies to interleaved only", n));
    if (n == "gpipe") return gpipe(q.p, q.m);
    if (n == "1f1b") return one_f_one_b(q.p, q.m);
    if (n == "interleaved") return interleaved_1f1b(q.p, q.m, q.v, q.group);
    if (n == "zbh1") return zb_h1(q.p, q.m);
    if (n == "bfs") return looped_bfs(q.p, q.m, q.v);
    if (n == "dualpipev") return dualpipev(q.p, q.m);
    std::string known;
    for (const auto& g : kGenerators) known += fmt::format("{}{}", known.empty() ? "" : ", ", g.name);
    throw std::invalid_argument(fmt::format("unknown schedule generator '{}'; the generators are: {}", name, known));
}

}  // namespace dtsim::sched

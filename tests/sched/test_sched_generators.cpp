// The generators produce the published orders: GPipe, 1F1B, Megatron-LM's
// interleaved 1F1B (warm-up and microbatch groups), ZB-H1, looped BFS, DualPipeV.
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/generators.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace dtsim::sched;

namespace {

// One rank's actions as "0F0 0F1 ...".
std::string line(const Schedule& s, int r) {
    std::string out;
    for (const auto& a : action_strings(s.ranks[static_cast<std::size_t>(r)])) {
        if (!out.empty()) out += ' ';
        out += a;
    }
    return out;
}

std::vector<std::pair<int, int>> of_type(const Schedule& s, int r, ActionType t) {
    std::vector<std::pair<int, int>> out;
    for (const auto& a : s.ranks[static_cast<std::size_t>(r)])
        if (a.type == t) out.emplace_back(a.stage, a.microbatch);
    return out;
}

int forwards_before_first_backward(const Schedule& s, int r) {
    int n = 0;
    for (const auto& a : s.ranks[static_cast<std::size_t>(r)]) {
        if (a.type != ActionType::forward) break;
        ++n;
    }
    return n;
}

}  // namespace

TEST_CASE("GPipe runs all forwards, then all backwards in microbatch order") {
    const Schedule s = gpipe(3, 4);
    CHECK(s.num_ranks() == 3);
    CHECK(line(s, 0) == "0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3");
    CHECK(line(s, 2) == "2F0 2F1 2F2 2F3 2B0 2B1 2B2 2B3");
}

TEST_CASE("1F1B: p-1-r warm-up forwards, then one forward one backward, then the rest") {
    const Schedule s = one_f_one_b(4, 8);
    CHECK(line(s, 0) == "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7");
    CHECK(line(s, 1) == "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7");
    CHECK(line(s, 3) == "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7");
    // Fewer microbatches than ranks: the warm-up is capped at m.
    CHECK(line(one_f_one_b(4, 2), 0) == "0F0 0F1 0B0 0B1");
}

TEST_CASE("interleaved 1F1B follows Megatron-LM's schedule table (PP2 N3M5 VP2 docstring)") {
    // megatron/core/pipeline_parallel/schedules.py, get_schedule_table: with 2 ranks,
    // 5 microbatches, 2 chunks and microbatch groups of 3:
    //   microbatch_id  | 0 1 2 0 1 2 3 4 3 4
    //   model_chunk_id | 0 0 0 1 1 1 0 0 1 1
    const Schedule s = interleaved_1f1b(2, 5, 2, 3);
    const std::vector<std::pair<int, int>> fwd0{{0, 0}, {0, 1}, {0, 2}, {2, 0}, {2, 1},
                                                {2, 2}, {0, 3}, {0, 4}, {2, 3}, {2, 4}};
    CHECK(of_type(s, 0, ActionType::forward) == fwd0);
    // Rank 1 holds stages 1 and 3 (Megatron's placement: rank r holds r, r+p, ...).
    const std::vector<std::pair<int, int>> fwd1{{1, 0}, {1, 1}, {1, 2}, {3, 0}, {3, 1},
                                                {3, 2}, {1, 3}, {1, 4}, {3, 3}, {3, 4}};
    CHECK(of_type(s, 1, ActionType::forward) == fwd1);
    // Backwards take the same table with the chunk reversed.
    const std::vector<std::pair<int, int>> bwd0{{2, 0}, {2, 1}, {2, 2}, {0, 0}, {0, 1},
                                                {0, 2}, {2, 3}, {2, 4}, {0, 3}, {0, 4}};
    CHECK(of_type(s, 0, ActionType::full_backward) == bwd0);
}

TEST_CASE("interleaved 1F1B warms up with 2(p-1-r)+(v-1)g forwards, then alternates") {
    for (int p : {2, 3, 4, 8})
        for (int v : {2, 3, 4})
            for (int m : {p, 2 * p, 3 * p + 1})
                for (int g : {p, m}) {
                    if (m % g != 0 && m % g < p) continue;  // rejected, as Megatron-LM does
                    const Schedule s = interleaved_1f1b(p, m, v, g);
                    for (int r = 0; r < p; ++r) {
                        CAPTURE(p);
                        CAPTURE(v);
                        CAPTURE(m);
                        CAPTURE(g);
                        CAPTURE(r);
                        const int warmup = std::min(2 * (p - 1 - r) + (v - 1) * g, v * m);
                        const int steady = v * m - warmup;
                        // The steady phase starts with its forward.
                        CHECK(forwards_before_first_backward(s, r) == warmup + (steady > 0 ? 1 : 0));
                        const auto& list = s.ranks[static_cast<std::size_t>(r)];
                        for (int k = 0; k < steady; ++k) {
                            CHECK(list[static_cast<std::size_t>(warmup + 2 * k)].type == ActionType::forward);
                            CHECK(list[static_cast<std::size_t>(warmup + 2 * k + 1)].type == ActionType::full_backward);
                        }
                        for (const auto& a : list) CHECK(a.stage % p == r);
                    }
                }
    // Megatron's default group is p: rank 0 of p=4, m=8, v=2 runs microbatches 0-3 on
    // chunk 0, then 0-3 on chunk 1, then 4-7 on chunk 0 ...
    const auto f = of_type(interleaved_1f1b(4, 8, 2), 0, ActionType::forward);
    const std::vector<std::pair<int, int>> head(f.begin(), f.begin() + 9);
    CHECK(head == std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {0, 2}, {0, 3}, {4, 0}, {4, 1}, {4, 2}, {4, 3}, {0, 4}});
}

TEST_CASE("ZB-H1: rank r delays its W passes by r microbatches") {
    const Schedule s = zb_h1(4, 8);
    CHECK(line(s, 0) == "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7");
    CHECK(line(s, 3) == "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7");
    CHECK(line(s, 1) == "1F0 1F1 1F2 1I0 1F3 1I1 1W0 1F4 1I2 1W1 1F5 1I3 1W2 1F6 1I4 1W3 1F7 1I5 1W4 1I6 1W5 1I7 1W6 1W7");
}

TEST_CASE("looped BFS: every microbatch through a chunk before the next; backwards reversed") {
    const Schedule s = looped_bfs(2, 2, 2);
    CHECK(line(s, 0) == "0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0");
    CHECK(line(s, 1) == "1F0 1F1 3F0 3F1 3B1 3B0 1B1 1B0");
}

TEST_CASE("DualPipeV follows the eight steps of DualPipeV.step()") {
    // Worked by hand from deepseek-ai/DualPipe dualpipev.py for 2 ranks, 4 microbatches:
    // rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. Each _forward_backward_chunk
    // is an overlapped pair, written as PyTorch's ScheduleDualPipeV writes its
    // OVERLAP_F_B actions (_calculate_single_rank_operations, add_overlap_f_b); the
    // last rank's first step-4 F0 and B1 are not overlapped.
    const Schedule s = dualpipev(2, 4);
    CHECK(line(s, 0) == "0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1)OVERLAP_F_B (3F2;0B0)OVERLAP_F_B 3B2 "
                        "(3F3;0B1)OVERLAP_F_B 3B3 0I2 0W2 0I3 0W3");
    CHECK(line(s, 1) == "1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0)OVERLAP_F_B (1F3;2B1)OVERLAP_F_B (2F3;1B1)OVERLAP_F_B 2B2 "
                        "1B2 2I3 1I3 2W3 1W3");
    // Pairs per rank: 2m-3p+r+1 on rank r < p-1, 2m-2p-1 on rank p-1 (steps 4 and 5).
    for (int p : {2, 3, 4, 5})
        for (int m : {2 * p, 2 * p + 3}) {
            const Schedule d = dualpipev(p, m);
            for (int r = 0; r < p; ++r) {
                int pairs = 0;
                for (const auto& a : d.ranks[static_cast<std::size_t>(r)]) pairs += a.overlap_next ? 1 : 0;
                CHECK(pairs == (r < p - 1 ? 2 * m - 3 * p + r + 1 : 2 * m - 2 * p - 1));
            }
            CHECK(find_problems(d).empty());
        }
    const Schedule big = dualpipev(4, 8);
    for (int r = 0; r < 4; ++r)
        for (const auto& a : big.ranks[static_cast<std::size_t>(r)]) CHECK((a.stage == r || a.stage == 7 - r));
}

TEST_CASE("generators reject impossible sizes, naming the parameter") {
    CHECK_THROWS_WITH_AS(one_f_one_b(0, 4), doctest::Contains("the number of ranks p must be at least 1, got 0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(gpipe(2, 0), doctest::Contains("microbatches m must be at least 1"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(interleaved_1f1b(4, 2, 2), doctest::Contains("g must be in [p, m]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(interleaved_1f1b(4, 8, 2, 3), doctest::Contains("got p=4, g=3, m=8"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(interleaved_1f1b(4, 13, 2, 6), doctest::Contains("m mod g = 13 mod 6 = 1 is neither 0 nor >= p = 4"),
                         std::invalid_argument);
    CHECK_NOTHROW(interleaved_1f1b(4, 10, 2, 6));  // a last group of 4 = p is allowed
    CHECK_THROWS_WITH_AS(looped_bfs(2, 2, 0), doctest::Contains("chunks v must be at least 1"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(dualpipev(4, 7), doctest::Contains("needs at least 2p microbatches"), std::invalid_argument);
}

TEST_CASE("generate() takes the names and aliases and checks what applies") {
    GenerateParams q;
    q.p = 4;
    q.m = 8;
    CHECK(generate("1f1b", q) == one_f_one_b(4, 8));
    CHECK(generate("PipeDream-Flush", q) == one_f_one_b(4, 8));
    CHECK(generate("zb_h1", q) == zb_h1(4, 8));
    CHECK(generate("dualpipev", q) == dualpipev(4, 8));
    q.v = 2;
    CHECK(generate("dualpipev", q) == dualpipev(4, 8));
    q.v = 3;
    CHECK_THROWS_WITH_AS(generate("dualpipev", q), doctest::Contains("dualpipev always has 2 chunks per rank"),
                         std::invalid_argument);
    CHECK(generate("interleaved-1f1b", q) == interleaved_1f1b(4, 8, 3));
    CHECK(generate("looped_bfs", q) == looped_bfs(4, 8, 3));
    CHECK_THROWS_WITH_AS(generate("1f1b", q), doctest::Contains("1f1b has one chunk per rank"), std::invalid_argument);
    q.v = 1;
    q.group = 4;
    CHECK_THROWS_WITH_AS(generate("gpipe", q), doctest::Contains("applies to interleaved only"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(generate("nosuch", q),
                         doctest::Contains("unknown schedule generator 'nosuch'; the generators are: gpipe, 1f1b, "
                                           "interleaved, zbh1, bfs, dualpipev"),
                         std::invalid_argument);
    CHECK(canonical_generator("nosuch").empty());
    CHECK(generate("gpipe", GenerateParams{2, 2, 1, 0}).name == "gpipe");
}

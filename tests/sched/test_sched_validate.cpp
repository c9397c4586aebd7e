// The static checks of a schedule, each broken rule named with its rank, action
// and place in the file; and PyTorch's lowering to SEND/RECV actions.
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/lowering.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sstream>
#include <string>
#include <vector>

using namespace dtsim::sched;

namespace {

Schedule text(const std::string& t, const std::string& source = "s.txt") {
    std::istringstream in(t);
    return read_schedule_text(in, source);
}

// All problems, one per line.
std::string problems_of(const std::string& t) {
    std::string out;
    for (const auto& p : find_problems(text(t))) out += p + "\n";
    return out;
}

bool has(const std::string& all, const std::string& part) { return all.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("every generated schedule passes the static checks, before and after lowering") {
    for (const auto& g : generators())
        for (int p : {1, 2, 3, 4, 8})
            for (int m : {1, 2, 3, 4, 8, 16})
                for (int v : {1, 2, 3}) {
                    if (!g.takes_chunks && v != 1) continue;
                    GenerateParams q;
                    q.p = p;
                    q.m = m;
                    q.v = v;
                    Schedule s;
                    try {
                        s = generate(g.name, q);
                    } catch (const std::invalid_argument&) {
                        continue;
                    }
                    CAPTURE(g.name);
                    CAPTURE(p);
                    CAPTURE(m);
                    CAPTURE(v);
                    CHECK(find_problems(s).empty());
                    const Schedule lowered = lower(s);
                    CHECK(lowered.lowered() == (p > 1));
                    CHECK(find_problems(lowered).empty());
                    CHECK(strip_comms(lowered) == s);
                }
}

TEST_CASE("a missing forward or backward is named with its stage, microbatch and rank") {
    const auto p = problems_of("rank 0: 0F0 0B0 0B1\nrank 1: 1F0 1F1 1B0\n");
    CHECK(has(p, "stage 0 microbatch 1 has no forward: rank 0 lacks 0F1"));
    CHECK(has(p, "stage 1 microbatch 1 has no backward: rank 1 lacks 1B1 (or 1I1 and 1W1)"));
}

TEST_CASE("an action listed twice is named with both places") {
    CHECK(problems_of("rank 0: 0F0 0F0 0B0\n") ==
          "0F0 appears 2 times: rank 0's action 1 (0F0, at s.txt:1:9) and rank 0's action 2 (0F0, at s.txt:1:13)\n");
}

TEST_CASE("backwards must follow their forward, and W its I") {
    CHECK(problems_of("rank 0: 0B0 0F0\n") ==
          "rank 0's action 1 (0B0, at s.txt:1:9) comes before its forward, rank 0's action 2 (0F0, at s.txt:1:13)\n");
    CHECK(problems_of("rank 0: 0F0 0W0 0I0\n") ==
          "rank 0's action 2 (0W0, at s.txt:1:13) comes before its input-gradient pass, rank 0's action 3 (0I0, at "
          "s.txt:1:17)\n");
    CHECK(has(problems_of("rank 0: 0F0 0I0\n"), "(0I0, at s.txt:1:13) has no matching 0W0"));
    CHECK(has(problems_of("rank 0: 0F0 0W0\n"), "(0W0, at s.txt:1:13) has no matching 0I0"));
    CHECK(has(problems_of("rank 0: 0F0 0B0 0I0 0W0\n"), "stage 0 microbatch 0 has both a full backward"));
}

TEST_CASE("a stage runs on one rank, and the stages are 0..S-1") {
    CHECK(has(problems_of("rank 0: 0F0 1F0 0B0\nrank 1: 1B0\n"),
              "stage 1 has compute actions on ranks 0, 1; a stage runs on one rank"));
    CHECK(has(problems_of("rank 0: 0F0 0B0\nrank 1: 2F0 2B0\n"),
              "stage 1 has no compute actions (F, B, I, W); the stages must be 0..2"));
}

TEST_CASE("a stage boundary inside one rank must be in order") {
    CHECK(has(problems_of("rank 0: 1F0 0F0 1B0 0B0\n"),
              "rank 0's action 1 (1F0, at s.txt:1:9) needs the output of rank 0's action 2 (0F0, at s.txt:1:13), "
              "which comes later on the same rank"));
    CHECK(has(problems_of("rank 0: 0F0 1F0 0B0 1B0\n"),
              "rank 0's action 3 (0B0, at s.txt:1:17) needs the gradient from rank 0's action 4 (1B0, at s.txt:1:21), "
              "which comes later on the same rank"));
}

TEST_CASE("a lowered schedule needs every SEND and RECV, in the right place") {
    const std::string ok =
        "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n"
        "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n";
    CHECK(problems_of(ok).empty());
    CHECK(has(problems_of("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1F0 1B0 1SEND_B0\n"),
              "the schedule is lowered (it has SEND/RECV actions) but rank 1 lacks 1RECV_F0, before rank 1's action 1 "
              "(1F0"));
    CHECK(has(problems_of("rank 0: 0SEND_F0 0F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"),
              "rank 0's action 1 (0SEND_F0, at s.txt:1:9) must come after rank 0's action 2 (0F0, at s.txt:1:18), "
              "which produces the activation"));
    CHECK(has(problems_of("rank 0: 0F0 0SEND_F0 0B0 0RECV_B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"),
              "(0RECV_B0, at s.txt:1:26) must come before rank 0's action 3 (0B0, at s.txt:1:22), which consumes the "
              "gradient"));
    CHECK(has(problems_of("rank 0: 0F0 0SEND_F0 1F0 1B0 0B0\n"),
              "stages 0 and 1 both run on rank 0; a boundary inside a rank needs no SEND/RECV"));
    CHECK(has(problems_of("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1SEND_F0 1B0 1SEND_B0\n"),
              "stage 1 is the last stage; there is no stage 2 to send to"));
    CHECK(has(problems_of("rank 0: 0F0 0SEND_F0 1RECV_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"),
              "stage 1 runs on rank 1, not on rank 0"));
}

TEST_CASE("PyTorch's FSDP actions are accepted on the rank of their stage") {
    CHECK(problems_of("rank 0: 0UNSHARD 0F0 0B0 0REDUCE_GRAD 0RESHARD\n").empty());
    CHECK(has(problems_of("rank 0: 0F0 0B0 1UNSHARD\nrank 1: 1F0 1B0\n"), "stage 1 runs on rank 1, not on rank 0"));
}

TEST_CASE("validate() throws one error listing every problem with the file") {
    try {
        validate(text("rank 0: 0F0 0B0 0B1\nrank 1: 1F0 1F1 1B0 1B1\n", "bad.txt"));
        FAIL("no error");
    } catch (const InvalidScheduleError& e) {
        CHECK(std::string(e.what()) ==
              "bad.txt: invalid schedule, 1 problem:\n  stage 0 microbatch 1 has no forward: rank 0 lacks 0F1");
        CHECK(e.problems.size() == 1);
    }
    Schedule empty;
    CHECK(find_problems(empty) == std::vector<std::string>{"the schedule has no ranks"});
    empty.ranks.resize(2);
    CHECK(find_problems(empty) == std::vector<std::string>{"the schedule has no actions"});
}

TEST_CASE("lowering places SEND/RECV as PyTorch's _add_send_recv does") {
    const Schedule lowered = lower(gpipe(2, 2));
    std::ostringstream out;
    write_schedule_csv(lowered, out);
    CHECK(out.str() ==
          "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
          "1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n");
    // Zero bubble: the gradient is sent after I, not W.
    std::ostringstream zb;
    write_schedule_csv(lower(zb_h1(2, 1)), zb);
    CHECK(zb.str() == "0F0,0SEND_F0,0RECV_B0,0I0,0W0\n1RECV_F0,1F0,1I0,1SEND_B0,1W0\n");
}

TEST_CASE("lowering refuses a lowered schedule and one that cannot progress") {
    CHECK_THROWS_WITH_AS(lower(lower(gpipe(2, 2))), doctest::Contains("already has SEND/RECV actions"),
                         InvalidScheduleError);
    const Schedule dead = text("rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F0 1F1 1B0 1B1\n");
    CHECK_THROWS_WITH_AS(lower(dead),
                         doctest::Contains("rank 0 cannot place its action 2 (0B0): its input is not received yet\n  "
                                           "rank 1 cannot place its action 2 (1F1)"),
                         InvalidScheduleError);
}

TEST_CASE("an OVERLAP_F_B pair is a forward then a full backward, not of the same stage and microbatch") {
    Schedule s;
    s.ranks = {{act::F(0, 0), act::F_overlapped(0, 1), act::B(0, 0), act::B(0, 1)}};
    CHECK(find_problems(s).empty());
    s.ranks = {{act::F(0, 0), act::F(0, 1), act::B(0, 0), act::B(0, 1)}};
    s.ranks[0][2].overlap_next = true;
    CHECK(has(find_problems(s).front(), "rank 0's action 3 (0B0) is marked as overlapped with the next action"));
    s.ranks = {{act::F(0, 0), act::F(0, 1), act::B(0, 0), act::F_overlapped(0, 2), act::I(0, 1), act::W(0, 1), act::B(0, 2)}};
    CHECK(has(find_problems(s).front(), "rank 0's action 4 (0F2) opens an OVERLAP_F_B pair but the next action is 0I1"));
    s.ranks = {{act::F(0, 0), act::F_overlapped(0, 1), act::B(0, 1), act::B(0, 0)}};
    CHECK(has(find_problems(s).front(),
              "rank 0's action 3 (0B1): an OVERLAP_F_B pair cannot hold the backward of its own forward"));
    s.ranks = {{act::F(0, 0), act::B(0, 0), act::F_overlapped(0, 1)}};
    std::string all;
    for (const auto& p : find_problems(s)) all += p + "\n";
    CHECK(has(all, "rank 0's action 3 (0F1) opens an OVERLAP_F_B pair but it is the rank's last action"));
}

TEST_CASE("lowering places an OVERLAP_F_B pair when both inputs are ready, then the sends of each") {
    const Schedule low = lower(dualpipev(2, 4));
    CHECK(find_problems(low).empty());
    std::string r0;
    for (const auto& a : action_strings(low.ranks[0])) r0 += a + " ";
    // PyTorch's _add_send_recv: the pair, then SEND_F of its F and SEND_B of its B.
    std::string r1;
    for (const auto& a : action_strings(low.ranks[1])) r1 += a + " ";
    CHECK(has(r0, "(0F3;3B1)OVERLAP_F_B 0SEND_F3 3SEND_B1 "));
    CHECK(has(r1, "(2F2;1B0)OVERLAP_F_B 2SEND_F2 1SEND_B0 "));
    CHECK(has(r0, "(3F2;0B0)OVERLAP_F_B "));  // stage 3 is the last, stage 0 the first: nothing to send
    CHECK_FALSE(has(r0, "(3F2;0B0)OVERLAP_F_B 3SEND"));
    CHECK_FALSE(has(r0, "(3F2;0B0)OVERLAP_F_B 0SEND"));
    CHECK(strip_comms(low) == dualpipev(2, 4));
}

// A stage without an owner was looked for in every action, a pass per stage: 40,000 ranks and a stage
// index of 1,200,000 (within the 16 pairs per action the checks allow) took a pass over 80,000 actions
// for each of 1,160,000 stages (found by the schedule fuzz target, with a seed of 20,000 ranks).
TEST_CASE("a schedule naming far more stages than it runs is checked in time linear in its actions") {
    std::string t;
    for (int r = 0; r < 40000; ++r) t += fmt::format("rank {}: {}F0 {}B0\n", r, r, r);
    t += "rank 40000: 1200000F0 1200000B0\n";
    const Schedule s = text(t);
    std::size_t steps = 0;
    const std::vector<std::string> problems = find_problems(s, 50, &steps);
    // Linear: the checks visit each action, stage and (stage, microbatch) pair a few times (a pass per
    // ownerless stage made it 1,160,000 x 80,002).
    std::size_t actions = 0;
    for (const auto& rank : s.ranks) actions += rank.size();
    const auto pairs = static_cast<std::size_t>(s.num_stages()) * static_cast<std::size_t>(s.num_microbatches());
    CHECK(steps >= actions + pairs);
    CHECK(steps <= 8 * (actions + pairs));
    REQUIRE(problems.size() == 51);
    CHECK(problems[0] == "stage 40000 has no compute actions (F, B, I, W); the stages must be 0..1200000");
    CHECK(problems[50] == "... and 1159950 more");
}

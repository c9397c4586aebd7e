// The executor against the published formulas (equal stage times, p2p = 0):
// GPipe and 1F1B bubble (p-1)/(m+p-1), interleaved (p-1)/(v m+p-1), ZB-H1 bubble
// (p-1)(T_F+T_B-T_W) (T_B there = our T_I), looped BFS; peak in-flight
// microbatches GPipe m, 1F1B min(m, p-r), interleaved 1+(p-1)/(p v) relative to
// 1F1B; DualPipeV (p-1)(F&B+B-3W) with overlapped pairs. Also its trace, p2p costs, lowered schedules and deadlock diagnosis.
#include "dtsim/sched/executor.hpp"
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/formulas.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/lowering.hpp"
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>

using namespace dtsim;
using namespace dtsim::sched;

namespace {

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b)); }

Schedule text(const std::string& t, const std::string& source = "s.txt") {
    std::istringstream in(t);
    return read_schedule_text(in, source);
}

std::string deadlock_of(const Schedule& s) {
    try {
        run_schedule(s);
    } catch (const DeadlockError& e) {
        return e.what();
    }
    return "no deadlock";
}

// Every rank's bubble fraction and the overall one equal `f`.
void check_fraction(const RunStats& st, double f) {
    CHECK(near(st.bubble_fraction, f));
    for (const auto& r : st.ranks) CHECK(near(r.bubble_fraction, f));
}

}  // namespace

TEST_CASE("GPipe and 1F1B: bubble fraction (p-1)/(m+p-1) on every rank, exactly") {
    for (const auto& costs : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}, std::pair{0.7, 2.3}})
        for (int p = 1; p <= 8; ++p)
            for (int m = 1; m <= 16; ++m) {
                const double tf = costs.first, tb = costs.second;
                Costs c;
                c.forward = tf;
                c.backward = tb;
                CAPTURE(p);
                CAPTURE(m);
                CAPTURE(tf);
                CAPTURE(tb);
                const double f = static_cast<double>(p - 1) / (m + p - 1);
                for (const Schedule& s : {gpipe(p, m), one_f_one_b(p, m)}) {
                    const RunStats st = run_stats(run_schedule(s, c).trace);
                    CHECK(near(st.makespan, (m + p - 1) * (tf + tb)));
                    check_fraction(st, f);
                }
            }
}

TEST_CASE("peak in-flight microbatches: GPipe m on every rank, 1F1B min(m, p-r)") {
    for (int p = 1; p <= 8; ++p)
        for (int m = 1; m <= 12; ++m) {
            CAPTURE(p);
            CAPTURE(m);
            const RunStats g = run_stats(run_schedule(gpipe(p, m)).trace);
            const RunStats o = run_stats(run_schedule(one_f_one_b(p, m)).trace);
            for (int r = 0; r < p; ++r) {
                CHECK(g.ranks[static_cast<std::size_t>(r)].peak_in_flight == m);
                CHECK(o.ranks[static_cast<std::size_t>(r)].peak_in_flight == std::min(m, p - r));
            }
            CHECK(o.ranks[0].peak_in_flight == std::min(m, p));  // stage 0
        }
}

TEST_CASE("interleaved 1F1B: bubble (p-1)/(v m+p-1) when every microbatch group has p or more") {
    for (int p : {2, 3, 4, 8})
        for (int v : {2, 3, 4})
            for (int m : {p, 2 * p, 3 * p}) {
                CAPTURE(p);
                CAPTURE(v);
                CAPTURE(m);
                const RunStats st = run_stats(run_schedule(interleaved_1f1b(p, m, v)).trace);
                CHECK(near(st.makespan, (v * m + p - 1) * 3.0));
                check_fraction(st, static_cast<double>(p - 1) / (v * m + p - 1));
                for (int r = 0; r < p; ++r)
                    CHECK(st.ranks[static_cast<std::size_t>(r)].peak_in_flight ==
                          std::min(v * m, 2 * (p - 1 - r) + (v - 1) * p + 1));
            }
    // Other group sizes g: exact as long as every group has at least p microbatches.
    for (int p : {2, 3, 4, 5})
        for (int v : {2, 3})
            for (int g : {p, p + 1, 2 * p})
                for (int m = g; m <= 3 * g; ++m) {
                    if (m % g != 0 && m % g < p) continue;
                    CAPTURE(p);
                    CAPTURE(v);
                    CAPTURE(g);
                    CAPTURE(m);
                    check_fraction(run_stats(run_schedule(interleaved_1f1b(p, m, v, g)).trace),
                                   static_cast<double>(p - 1) / (v * m + p - 1));
                }
    // A last group smaller than p (it adds bubbles, and for p=4, m=5, v=3 makes a
    // dependency cycle: rank 3 would run 7B0 before 7F4, rank 0 8F4 before 8B0) is
    // rejected up front, as Megatron-LM's forward_backward_pipelining_with_interleaving
    // does, with its rule.
    CHECK_THROWS_WITH_AS(interleaved_1f1b(4, 5, 3),
                         doctest::Contains("m mod g = 5 mod 4 = 1 is neither 0 nor >= p = 4; Megatron-LM rejects this"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(interleaved_1f1b(4, 6, 2), doctest::Contains("should be 0, or larger than or equal to the "
                                                                      "pipeline-parallel size"),
                         std::invalid_argument);
    // With g = m (one group) or a g dividing m, the same sizes run and meet the formula.
    check_fraction(run_stats(run_schedule(interleaved_1f1b(4, 5, 3, 5)).trace), 3.0 / (3 * 5 + 3));
    check_fraction(run_stats(run_schedule(interleaved_1f1b(4, 6, 2, 6)).trace), 3.0 / (2 * 6 + 3));
}

TEST_CASE("interleaved 1F1B: activation memory 1+(p-1)/(p v) times 1F1B's (Narayanan et al.)") {
    // A chunk holds 1/v of a rank's layers, so rank 0's peak count of (stage,
    // microbatch) activations, divided by v, is in the units of 1F1B's p.
    for (int p : {2, 4, 8})
        for (int v : {2, 3, 4})
            for (int m : {2 * p, 4 * p}) {
                CAPTURE(p);
                CAPTURE(v);
                CAPTURE(m);
                const int peak = run_stats(run_schedule(interleaved_1f1b(p, m, v)).trace).ranks[0].peak_in_flight;
                const int one_f_one_b_peak = run_stats(run_schedule(one_f_one_b(p, m)).trace).ranks[0].peak_in_flight;
                CHECK(one_f_one_b_peak == p);
                CHECK(peak == (v + 1) * p - 1);
                CHECK(near((static_cast<double>(peak) / v) / one_f_one_b_peak, 1.0 + static_cast<double>(p - 1) / (p * v)));
            }
}

TEST_CASE("ZB-H1: every rank idles (p-1)(T_F+T_I-T_W) when T_W <= min(T_F, T_I) and m >= p") {
    for (int p : {2, 3, 4, 8})
        for (int m : {p, 2 * p, 3 * p + 1})
            for (double tf : {0.5, 1.0, 2.0})
                for (double ti : {0.5, 1.0, 2.0})
                    for (double tw : {0.5, 1.0, 2.0}) {
                        if (tw > std::min(tf, ti)) continue;
                        Costs c;
                        c.forward = tf;
                        c.backward_input = ti;
                        c.backward_weight = tw;
                        CAPTURE(p);
                        CAPTURE(m);
                        CAPTURE(tf);
                        CAPTURE(ti);
                        CAPTURE(tw);
                        const RunStats st = run_stats(run_schedule(zb_h1(p, m), c).trace);
                        const double bubble = (p - 1) * (tf + ti - tw);
                        CHECK(near(st.makespan, m * (tf + ti + tw) + bubble));
                        for (const auto& r : st.ranks) {
                            CHECK(near(r.idle, bubble));
                            CHECK(r.peak_in_flight == p);  // 1F1B's peak, on every rank
                        }
                    }
    // Default costs (T_F = T_I = T_W = 1): a third of 1F1B's bubble with B = I + W.
    const RunStats zb = run_stats(run_schedule(zb_h1(4, 8)).trace);
    const RunStats ob = run_stats(run_schedule(one_f_one_b(4, 8)).trace);
    CHECK(zb.ranks[0].idle == 3);
    CHECK(ob.ranks[0].idle == 9);
    // Outside the condition the formula is not met: T_W = 2 > T_F = T_I = 1 gives
    // (p-1)T_F = 3, where (p-1)(T_F+T_I-T_W) would be 0.
    Costs heavy_w;
    heavy_w.backward_weight = 2;
    CHECK(run_stats(run_schedule(zb_h1(4, 8), heavy_w).trace).ranks[0].idle == 3);
}

TEST_CASE("looped BFS: bubble (p-1)/(v m+p-1) with m >= p, holding all v m activations") {
    for (int p : {2, 3, 4})
        for (int v : {2, 3})
            for (int m : {p, 2 * p}) {
                CAPTURE(p);
                CAPTURE(v);
                CAPTURE(m);
                const RunStats st = run_stats(run_schedule(looped_bfs(p, m, v)).trace);
                check_fraction(st, static_cast<double>(p - 1) / (v * m + p - 1));
                for (const auto& r : st.ranks) CHECK(r.peak_in_flight == v * m);
            }
}

TEST_CASE("DualPipeV: the README's bubble (PP/2-1)(F&B+B-3W) with overlapped F&B pairs, on a grid of p and m") {
    // deepseek-ai/DualPipe README, "Pipeline Bubbles and Memory Usage Comparison":
    // DualPipeV on PP/2 devices, bubble (PP/2-1)(F&B+B-3W), activation PP+1; with
    // p = PP/2 ranks, (p-1)(T_F&B+T_B-3T_W). The schedule is dualpipev.py's
    // DualPipeV.step() with each _forward_backward_chunk an overlapped pair costing
    // T_F&B. Exact, for every m >= 2p, when T_I = T_F, T_B = T_I+T_W, T_W <= T_F and
    // T_B <= T_F&B <= T_F+T_B: ranks p-2 and p-1 idle exactly the README's figure,
    // rank r < p-2 idles (p-2-r)(T_F+T_B-T_F&B) less (it runs p-2-r more pairs).
    struct C {
        double f, w, fb;  // T_F = T_I, T_W, T_F&B; T_B = T_F + T_W
    };
    int checked = 0;
    for (const C& k : {C{1, 1, 3}, C{1, 1, 2}, C{1, 1, 2.5}, C{2, 1, 3}, C{2, 1, 4}, C{1, 0.5, 1.5}, C{1, 0.25, 2},
                       C{1.5, 1.5, 3.5}})
        for (int p = 1; p <= 8; ++p)
            for (int m : {2 * p, 2 * p + 1, 3 * p, 4 * p + 3}) {
                Costs c;
                c.forward = c.backward_input = k.f;
                c.backward_weight = k.w;
                c.backward = k.f + k.w;
                c.forward_backward = k.fb;
                CAPTURE(p);
                CAPTURE(m);
                CAPTURE(k.f);
                CAPTURE(k.w);
                CAPTURE(k.fb);
                const RunStats st = run_stats(run_schedule(dualpipev(p, m), c).trace);
                const double readme = (p - 1) * (k.fb + c.backward - 3 * k.w);
                double worst = 0;
                for (const auto& r : st.ranks) worst = std::max(worst, r.idle);
                CHECK(near(worst, readme));
                CHECK(near(st.ranks[static_cast<std::size_t>(p - 1)].idle, readme));
                if (p >= 2) CHECK(near(st.ranks[static_cast<std::size_t>(p - 2)].idle, readme));
                for (const auto& r : st.ranks) {
                    CHECK(near(r.idle, readme - std::max(0, p - 2 - r.rank) * (c.forward + c.backward - k.fb)));
                    CHECK(r.peak_in_flight == 2 * p + 1);  // PP+1
                }
                const auto pred = predict("dualpipev", GenerateParams{p, m, 1, 0}, c);
                REQUIRE(pred);
                CHECK(pred->exact_expected);
                CHECK(near(pred->bubble_time, readme));
                CHECK(near(st.makespan, pred->makespan));
                CHECK(near(st.bubble_fraction, pred->bubble_fraction));
                for (int r = 0; r < p; ++r)
                    CHECK(near(st.ranks[static_cast<std::size_t>(r)].idle, pred->idle[static_cast<std::size_t>(r)]));
                ++checked;
            }
    CHECK(checked == 8 * 8 * 4);
}

TEST_CASE("DualPipeV: outside the conditions the README's figure is not this world's bubble, and predict() says so") {
    // T_I != T_F (ZB's split backward uneven): the W passes no longer fill the same holes.
    Costs c;
    c.forward = 2;
    c.backward = 2;
    c.backward_input = 1;
    c.backward_weight = 1;
    c.forward_backward = 3;
    const RunStats st = run_stats(run_schedule(dualpipev(4, 8), c).trace);
    double worst = 0;
    for (const auto& r : st.ranks) worst = std::max(worst, r.idle);
    CHECK_FALSE(near(worst, 3 * (3 + 2 - 3.0)));
    CHECK_FALSE(predict("dualpipev", GenerateParams{4, 8, 1, 0}, c)->exact_expected);
    Costs d;  // T_F&B below T_B
    d.forward_backward = 1.5;
    CHECK_FALSE(predict("dualpipev", GenerateParams{4, 8, 1, 0}, d)->exact_expected);
    d.forward_backward = 3;
    d.p2p = 0.5;
    CHECK_FALSE(predict("dualpipev", GenerateParams{4, 8, 1, 0}, d)->exact_expected);
}

TEST_CASE("an OVERLAP_F_B pair waits for both inputs, runs T_F&B, then sends both outputs") {
    const Schedule s = text("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 (1F1;1B0)OVERLAP_F_B 1B1\n");
    Costs c;
    c.forward_backward = 2.5;
    const RunResult res = run_schedule(s, c);
    // rank 1: 1F0 [1,2]; the pair waits for 0F1 (at 2), runs [2,4.5], sends 1B0's gradient at 4.5;
    // 0B0 [4.5,6.5] and 1B1 [4.5,6.5]; 0B1 [6.5,8.5].
    CHECK(near(run_stats(res.trace).makespan, 8.5));
    CHECK(near(run_stats(res.trace).ranks[1].busy, 1 + 2.5 + 2));
    CHECK(near(run_stats(res.trace).ranks[0].busy, 6));
    CHECK(run_stats(res.trace).ranks[1].peak_in_flight == 2);
    // The trace: F and B of the pair back to back, T_F and T_B scaled to T_F&B.
    const auto& ev = res.trace.ranks[1].events;
    REQUIRE(ev.size() >= 3);
    CHECK(near(ev[1].start, 2));
    CHECK(near(ev[1].duration, 2.5 / 3));
    CHECK(near(ev[2].start + ev[2].duration, 4.5));
    // Default T_F&B = T_F + T_B: the same as F then B, but the F's output leaves after the B.
    const RunResult plain = run_schedule(s);
    CHECK(near(run_stats(plain.trace).ranks[1].busy, 6));
    // A lowered schedule runs the same.
    CHECK(near(run_stats(run_schedule(lower(s), c).trace).makespan, 8.5));
    Costs bad;
    bad.forward_backward = std::nan("");
    CHECK_THROWS_WITH_AS(run_schedule(s, bad), doctest::Contains("forward_backward must be a finite number"),
                         std::invalid_argument);
}

TEST_CASE("predict() agrees with the executor wherever its conditions hold") {
    int checked = 0;
    for (const auto& g : generators())
        for (int p : {1, 2, 4})
            for (int m : {2, 4, 8})
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
                    const auto pred = predict(g.name, q, Costs{});
                    REQUIRE(pred);
                    if (!pred->exact_expected) continue;
                    CAPTURE(g.name);
                    CAPTURE(p);
                    CAPTURE(m);
                    CAPTURE(v);
                    const RunStats st = run_stats(run_schedule(s).trace);
                    CHECK(near(st.makespan, pred->makespan));
                    check_fraction(st, pred->bubble_fraction);
                    for (int r = 0; r < p; ++r)
                        CHECK(st.ranks[static_cast<std::size_t>(r)].peak_in_flight ==
                              pred->peak_in_flight[static_cast<std::size_t>(r)]);
                    if (!pred->memory_formula.empty() && m >= 2 * p)
                        CHECK(near(st.ranks[0].peak_in_flight / pred->memory_scale, pred->memory_ratio));
                    ++checked;
                }
    CHECK(checked > 40);
    CHECK_FALSE(predict("nosuch", GenerateParams{2, 2, 1, 0}, Costs{}));
    CHECK(predict("dualpipev", GenerateParams{2, 4, 1, 0}, Costs{})->exact_expected);
}

TEST_CASE("the trace's meta names each overlapped F&B pair by its F's event; its B is the next compute event") {
    const Schedule s = dualpipev(4, 8);
    std::size_t pairs = 0;
    for (const auto& list : s.ranks)
        for (const auto& a : list) pairs += a.overlap_next ? 1 : 0;
    REQUIRE(pairs > 0);
    const Trace t = run_schedule(s).trace;
    REQUIRE(t.meta.contains("overlapped"));
    CHECK(t.meta["overlapped"].size() == pairs);
    for (const auto& p : t.meta["overlapped"]) {
        const auto& ev = t.ranks[p[0].get<std::size_t>()].events;
        const auto i = p[1].get<std::size_t>();
        REQUIRE(i + 1 < ev.size());
        CHECK(ev[i].op == ops::forward);
        CHECK(ev[i + 1].op == ops::backward);
        CHECK(ev[i + 1].start == ev[i].end());
    }
    CHECK_FALSE(run_schedule(zb_h1(2, 2)).trace.meta.contains("overlapped"));
}

TEST_CASE("every action is a trace event: op, stage as layer, microbatch, memory before it") {
    const RunResult res = run_schedule(zb_h1(2, 2));
    const Trace& t = res.trace;
    CHECK(t.time_unit == "step");
    CHECK(t.memory_unit == "unit");
    CHECK(t.meta["name"] == "pipeline schedule zbh1");
    CHECK(t.meta["microbatches"] == 2);
    REQUIRE(t.ranks.size() == 2);
    // Rank 1 (stage 1): 1F0 1I0 1F1 1I1 1W0 1W1.
    const auto& ev = t.ranks[1].events;
    REQUIRE(ev.size() == 6);
    const char* ops_in_order[] = {"forward", "backward_input", "forward", "backward_input", "backward_weight",
                                  "backward_weight"};
    const double starts[] = {1, 2, 3, 4, 5, 6};
    const double memory[] = {0, 1, 1, 2, 2, 1};
    const int mbs[] = {0, 0, 1, 1, 0, 1};
    for (std::size_t i = 0; i < ev.size(); ++i) {
        CAPTURE(i);
        CHECK(ev[i].op.name() == ops_in_order[i]);
        CHECK(ev[i].layer == 1);
        CHECK(ev[i].start == starts[i]);
        CHECK(ev[i].duration == 1);
        CHECK(ev[i].memory == memory[i]);
        CHECK(ev[i].batches == IdSet{mbs[i]});
        CHECK(ev[i].stream == Stream::compute);
    }
    CHECK(t.summary.max_memory == 2);
    // It ran to its end without a rule broken.
    CHECK(t.summary.correct == std::optional<bool>(true));
    // The trace is a valid trace file (what `dtsim render` reads), summary.correct included.
    std::stringstream json;
    write_trace_json(t, json);
    CHECK(json.str().find("\"correct\": true") != std::string::npos);
    const Trace back = read_trace_json(json, "schedule.json");
    CHECK(back.event_count() == t.event_count());
    CHECK(back.summary.correct == std::optional<bool>(true));
}

TEST_CASE("a tensor crossing ranks costs p2p, drawn as send and recv on the comm stream") {
    Costs c;
    c.p2p = 0.5;
    const RunResult res = run_schedule(gpipe(2, 1), c);
    // 0F0 [0,1], send [1,1.5], 1F0 [1.5,2.5], 1B0 [2.5,4.5], send [4.5,5], 0B0 [5,7].
    CHECK(run_stats(res.trace).makespan == 7);
    const auto& r0 = res.trace.ranks[0].events;
    REQUIRE(r0.size() == 4);
    CHECK(r0[0].op.name() == "forward");
    CHECK(r0[1].op.name() == "send");
    CHECK(r0[1].stream == Stream::comm);
    CHECK(r0[1].start == 1);
    CHECK(r0[1].duration == 0.5);
    CHECK(r0[2].op.name() == "recv");
    CHECK(r0[2].start == 4.5);
    CHECK(r0[3].op.name() == "backward");
    CHECK(r0[3].start == 5);
    // Stages on the same rank pass their tensors for free.
    const RunResult one = run_schedule(text("rank 0: 0F0 1F0 1B0 0B0\n"), c);
    CHECK(run_stats(one.trace).makespan == 6);
    CHECK(one.trace.ranks[0].events.size() == 4);
}

TEST_CASE("a lowered schedule runs exactly like its compute-only form") {
    for (const auto& g : generators())
        for (double p2p : {0.0, 0.25, 1.0}) {
            GenerateParams q;
            q.p = 4;
            q.m = 8;
            q.v = g.takes_chunks ? 2 : 1;
            const Schedule s = generate(g.name, q);
            Costs c;
            c.p2p = p2p;
            CAPTURE(g.name);
            CAPTURE(p2p);
            const RunStats a = run_stats(run_schedule(s, c).trace);
            const RunStats b = run_stats(run_schedule(lower(s), c).trace);
            CHECK(a.makespan == b.makespan);
            for (int r = 0; r < 4; ++r) {
                const auto& ra = a.ranks[static_cast<std::size_t>(r)];
                const auto& rb = b.ranks[static_cast<std::size_t>(r)];
                CHECK(ra.busy == rb.busy);
                CHECK(ra.peak_in_flight == rb.peak_in_flight);
                CHECK(ra.end == rb.end);
            }
        }
}

TEST_CASE("a schedule that cannot progress names each blocked rank and what it waits for") {
    const std::string msg = deadlock_of(read_schedule_file(std::string(DTSIM_SCHEDULES) + "/deadlock_p2_m2.txt"));
    CAPTURE(msg);
    CHECK(msg.rfind("deadlock: ", 0) == 0);
    CHECK(msg.find("cannot progress: 2 of 2 ranks are blocked") != std::string::npos);
    CHECK(msg.find("rank 0 is blocked at 0B0 (its action 2 of 4, at ") != std::string::npos);
    CHECK(msg.find("deadlock_p2_m2.txt:7:13): it waits for the gradient of stage 0 microbatch 0 (the input gradient "
                   "of stage 1), which rank 1 produces in 1B0 (its action 3 of 4") != std::string::npos);
    CHECK(msg.find("not reached: rank 1 is blocked at 1F1") != std::string::npos);
    CHECK(msg.find("rank 1 is blocked at 1F1 (its action 2 of 4") != std::string::npos);
    CHECK(msg.find("it waits for the activation of stage 1 microbatch 1 (the output of stage 0), which rank 0 "
                   "produces in 0F1 (its action 3 of 4") != std::string::npos);
    CHECK(msg.find("wait cycle: rank 0 -> rank 1 -> rank 0") != std::string::npos);
    CHECK(msg.find("the engine's report:\n    deadlock: 2 of 2 ranks are blocked and none can proceed") !=
          std::string::npos);
}

TEST_CASE("a schedule that cannot progress hands over its trace up to the deadlock") {
    const Schedule s = read_schedule_file(std::string(DTSIM_SCHEDULES) + "/deadlock_p2_m2.txt");
    try {
        run_schedule(s);
        FAIL("the schedule should deadlock");
    } catch (const DeadlockError& e) {
        REQUIRE(e.partial_trace != nullptr);
        const Trace& t = *e.partial_trace;
        CHECK(t.meta.at("error") == e.what());
        CHECK(t.meta.at("ranks") == 2);
        CHECK(t.summary.correct == std::optional<bool>(false));
        // Each rank ran its first forward (0F0, then 1F0) before both wait.
        REQUIRE(t.ranks.size() == 2);
        REQUIRE(t.ranks[0].events.size() == 1);
        REQUIRE(t.ranks[1].events.size() == 1);
        CHECK(t.ranks[0].events[0].op.name() == "forward");
        CHECK(t.ranks[1].events[0].start == 1.0);
        CHECK(t.summary.makespan == 2.0);
    }
}

TEST_CASE("a lowered schedule that cannot progress names the SEND each rank waits for") {
    const Schedule s = text(
        "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0F1 0SEND_F1 0RECV_B1 0B1\n"
        "rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1\n",
        "lowered.txt");
    const std::string msg = deadlock_of(s);
    CAPTURE(msg);
    CHECK(msg.find("rank 0 is blocked at 0B0 (its action 4 of 8, at lowered.txt:1:31): it waits for the gradient of "
                   "stage 0 microbatch 0 (the input gradient of stage 1), which rank 1 sends in 1SEND_B0 (its action 6 "
                   "of 8") != std::string::npos);
    CHECK(msg.find("rank 1 is blocked at 1F1 (its action 4 of 8") != std::string::npos);
    CHECK(msg.find("which rank 0 sends in 0SEND_F1 (its action 6 of 8") != std::string::npos);
    CHECK(msg.find("wait cycle: rank 0 -> rank 1 -> rank 0") != std::string::npos);
}

TEST_CASE("a three-rank deadlock shows the cycle among the blocked ranks") {
    // Ranks 0 and 1 wait for each other; rank 2 waits for rank 1.
    const Schedule s = text(
        "rank 0: 0F0 0B0 0F1 0B1\n"
        "rank 1: 1F0 1F1 1B0 1B1\n"
        "rank 2: 2F0 2B0 2F1 2B1\n");
    const std::string msg = deadlock_of(s);
    CAPTURE(msg);
    CHECK(msg.find("3 of 3 ranks are blocked") != std::string::npos);
    CHECK(msg.find("rank 2 is blocked at 2F1 (its action 3 of 4, at s.txt:3:17): it waits for the activation of stage "
                   "2 microbatch 1 (the output of stage 1), which rank 1 produces in 1F1 (its action 2 of 4, at "
                   "s.txt:2:13), the action rank 1 is blocked at") != std::string::npos);
    CHECK(msg.find("wait cycle: rank 0 -> rank 1 -> rank 0") != std::string::npos);
}

TEST_CASE("run_schedule checks the schedule and the costs first") {
    CHECK_THROWS_WITH_AS(run_schedule(text("rank 0: 0B0 0F0\n", "bad.txt")),
                         doctest::Contains("bad.txt: invalid schedule, 1 problem:\n  rank 0's action 1 (0B0"),
                         InvalidScheduleError);
    Costs c;
    c.forward = -1;
    CHECK_THROWS_WITH_AS(run_schedule(gpipe(2, 2), c),
                         doctest::Contains("schedule costs: forward must be a finite number >= 0, got -1"),
                         std::invalid_argument);
    c.forward = 1;
    c.p2p = std::nan("");
    CHECK_THROWS_AS(run_schedule(gpipe(2, 2), c), std::invalid_argument);
}

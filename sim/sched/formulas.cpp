#include "dtsim/sched/formulas.hpp"

#include <algorithm>
#include <cmath>

namespace dtsim::sched {
namespace {

// Compute time of rank r of a generated schedule; an overlapped F and B cost T_F&B together.
double busy_of(const Schedule& s, const Costs& c, int r = 0) {
    double t = 0;
    bool paired = false;  // the previous action opened an OVERLAP_F_B pair
    for (const auto& a : s.ranks[static_cast<std::size_t>(r)]) {
        if (paired) {  // the pair's B
            paired = false;
            continue;
        }
        if (a.overlap_next) {
            t += overlapped_cost(c);
            paired = true;
            continue;
        }
        switch (a.type) {
            case ActionType::forward: t += c.forward; break;
            case ActionType::full_backward: t += c.backward; break;
            case ActionType::backward_input: t += c.backward_input; break;
            case ActionType::backward_weight: t += c.backward_weight; break;
            default: break;
        }
    }
    return t;
}

}  // namespace

std::optional<Prediction> predict(std::string_view name, const GenerateParams& q, const Costs& c) {
    const std::string n = canonical_generator(name);
    if (n.empty()) return std::nullopt;
    const Schedule s = generate(n, q);  // checks the parameters
    const int p = q.p, m = q.m, v = q.v;
    const int g = q.group == 0 ? p : q.group;
    const bool no_p2p = c.p2p == 0;
    Prediction out;
    out.busy = busy_of(s, c);
    out.peak_in_flight.assign(static_cast<std::size_t>(p), 0);
    auto peaks = [&](auto f) {
        for (int r = 0; r < p; ++r) out.peak_in_flight[static_cast<std::size_t>(r)] = f(r);
    };
    const double fb = c.forward + c.backward;
    if (n == "gpipe" || n == "1f1b") {
        out.reference = n == "gpipe" ? "Huang et al. 2019 (GPipe); Narayanan et al. 2021, eq. 1"
                                     : "Narayanan et al. 2021 (PipeDream-flush, Megatron-LM), eq. 1";
        out.bubble_time_formula = "(p-1)(T_F+T_B)";
        out.bubble_time = (p - 1) * fb;
        out.fraction_formula = "(p-1)/(m+p-1)";
        out.bubble_fraction = static_cast<double>(p - 1) / (m + p - 1);
        if (n == "gpipe") {
            out.peak_formula = std::string(1, 'm');  // not = "m": g++ 12 -Wrestrict false positive
            peaks([&](int) { return m; });
        } else {
            out.peak_formula = "min(m, p-r)";
            peaks([&](int r) { return std::min(m, p - r); });
        }
        out.conditions = "p2p = 0";
        out.exact_expected = no_p2p;
    } else if (n == "interleaved") {
        out.reference = "Narayanan et al. 2021 (interleaved 1F1B, Megatron-LM), sec. 2.2";
        out.bubble_time_formula = "(p-1)(T_F+T_B)";  // per-chunk times: (p-1)(t_f+t_b)/v in the paper's units
        out.bubble_time = (p - 1) * fb;
        out.fraction_formula = "(p-1)/(v*m+p-1)";
        out.bubble_fraction = static_cast<double>(p - 1) / (v * m + p - 1);
        out.peak_formula = "min(v*m, 2(p-1-r)+(v-1)g+1)";
        peaks([&](int r) { return std::min(v * m, 2 * (p - 1 - r) + (v - 1) * g + 1); });
        if (g == p) {
            out.memory_formula = "1+(p-1)/(p*v)";
            out.memory_ratio = 1.0 + static_cast<double>(p - 1) / (p * v);
        } else {
            out.memory_formula = "(2(p-1)+(v-1)g+1)/(v*p)";
            out.memory_ratio = static_cast<double>(2 * (p - 1) + (v - 1) * g + 1) / (v * p);
        }
        out.memory_scale = static_cast<double>(v) * p;
        out.conditions = "p2p = 0 and every microbatch group has at least p microbatches (m mod g = 0 or >= p, "
                         "Megatron-LM's rule, which the generator enforces)";
        out.exact_expected = no_p2p && (m % g == 0 || m % g >= p);
    } else if (n == "zbh1") {
        out.reference = "Qi et al. 2023 (Zero Bubble Pipeline Parallelism), ZB-H1; T_B there is our T_I";
        out.bubble_time_formula = "(p-1)(T_F+T_I-T_W)";
        out.bubble_time = (p - 1) * (c.forward + c.backward_input - c.backward_weight);
        out.fraction_formula = "bubble/(m(T_F+T_I+T_W)+bubble)";
        out.peak_formula = "min(m, p)";
        peaks([&](int) { return std::min(m, p); });
        out.conditions = "p2p = 0, m >= p and T_W <= min(T_F, T_I)";
        out.exact_expected = no_p2p && m >= p && c.backward_weight <= std::min(c.forward, c.backward_input);
    } else if (n == "bfs") {
        out.reference = "Lamy-Poirier 2022 (Breadth-First Pipeline Parallelism), looped BFS";
        out.bubble_time_formula = "(p-1)(T_F+T_B)";
        out.bubble_time = (p - 1) * fb;
        out.fraction_formula = "(p-1)/(v*m+p-1)";
        out.bubble_fraction = static_cast<double>(p - 1) / (v * m + p - 1);
        out.peak_formula = "v*m";
        peaks([&](int) { return v * m; });
        out.conditions = "p2p = 0 and m >= p";
        out.exact_expected = no_p2p && m >= p;
    } else {  // dualpipev
        const double fab = overlapped_cost(c);
        out.reference = "DeepSeek DualPipe README, DualPipeV on PP/2 = p devices: bubble (PP/2-1)(F&B+B-3W), "
                        "activation PP+1; dualpipev.py DualPipeV.step()";
        out.bubble_time_formula = "(p-1)(F&B+B-3W), ranks p-2, p-1";
        out.bubble_time = (p - 1) * (fab + c.backward - 3 * c.backward_weight);
        out.busy = busy_of(s, c, p - 1);
        out.fraction_formula = "sum of idle/(p x makespan)";
        out.peak_formula = "PP+1 = 2p+1";
        peaks([&](int) { return 2 * p + 1; });
        out.idle.resize(static_cast<std::size_t>(p));
        double idle = 0;
        for (int r = 0; r < p; ++r) {
            const double x = out.bubble_time - std::max(0, p - 2 - r) * (c.forward + c.backward - fab);
            out.idle[static_cast<std::size_t>(r)] = x;
            idle += x;
        }
        const double makespan = out.busy + out.bubble_time;
        out.bubble_fraction = makespan > 0 ? idle / (p * makespan) : 0;
        out.conditions = "p2p = 0, T_I = T_F, T_B = T_I+T_W, T_W <= T_F and T_B <= T_F&B <= T_F+T_B; rank r < p-2 "
                         "idles (p-2-r)(T_F+T_B-T_F&B) less (more overlapped pairs)";
        const double eps = 1e-12 * std::max(1.0, c.forward + c.backward);
        out.exact_expected = no_p2p && std::abs(c.backward_input - c.forward) <= eps &&
                             std::abs(c.backward - c.backward_input - c.backward_weight) <= eps &&
                             c.backward_weight <= c.forward + eps && fab >= c.backward - eps &&
                             fab <= c.forward + c.backward + eps;
    }
    out.makespan = out.busy + out.bubble_time;
    if (out.idle.empty()) out.idle.assign(static_cast<std::size_t>(p), out.bubble_time);
    if (out.bubble_fraction == 0 && out.makespan > 0) out.bubble_fraction = out.bubble_time / out.makespan;
    return out;
}

}  // namespace dtsim::sched

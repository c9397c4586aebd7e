#include "memory_profile.hpp"

#include "units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dtsim::render::detail {

std::vector<MemoryStep> memory_steps(const RankTrace& rank) {
    const auto& ev = rank.events;
    std::vector<std::size_t> order(ev.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    if (!std::is_sorted(order.begin(), order.end(),
                        [&](std::size_t a, std::size_t b) { return ev[a].start < ev[b].start; }))
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return ev[a].start < ev[b].start; });
    double end = 0;
    for (const auto& e : ev) end = std::max(end, e.end());
    std::vector<MemoryStep> steps;
    for (std::size_t k = 0; k < order.size(); ++k) {
        const Event& e = ev[order[k]];
        const double t1 = k + 1 < order.size() ? ev[order[k + 1]].start : end;
        if (!(t1 > e.start)) continue;
        if (!steps.empty() && steps.back().value == e.memory && steps.back().t1 == e.start)
            steps.back().t1 = t1;
        else
            steps.push_back({e.start, t1, e.memory});
    }
    return steps;
}

KindSample kind_sample(const Trace& trace, const RankTrace& rank, std::size_t i) {
    const std::size_t kinds = trace.memory_kinds.size();
    KindSample s;
    s.time = rank.memory_by_kind[i * (1 + kinds)];
    s.parts = rank.memory_by_kind.data() + i * (1 + kinds) + 1;
    for (std::size_t k = 0; k < kinds; ++k) s.total += s.parts[k];
    return s;
}

bool drawable(const Trace& trace, const KindSample& s) {
    bool fine = std::isfinite(s.time) && s.time >= 0 && std::isfinite(s.total);
    for (std::size_t j = 0; j < trace.memory_kinds.size(); ++j) fine = fine && s.parts[j] >= 0;
    return fine;
}

std::optional<std::size_t> largest_kind_sample(const Trace& trace, const RankTrace& rank) {
    std::optional<std::size_t> best;
    double most = 0;
    for (std::size_t i = 0, n = trace.memory_samples(rank); i < n; ++i)
        if (const double t = kind_sample(trace, rank, i).total; !best || t > most) {
            best = i;
            most = t;
        }
    return best;
}

std::string kind_parts_text(const Trace& trace, const KindSample& s, bool bytes) {
    std::string out;
    for (std::size_t k = 0; k < trace.memory_kinds.size(); ++k)
        if (s.parts[k] > 0)
            out += fmt::format("{}{} {}", out.empty() ? "" : ", ", trace.memory_kinds[k], format_memory(s.parts[k], bytes));
    return out.empty() ? "nothing held" : out;
}

}  // namespace dtsim::render::detail

#include "memory_profile.hpp"

#include <algorithm>
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

}  // namespace dtsim::render::detail

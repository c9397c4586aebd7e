// How `run --evidence` and `plan --evidence` word the published runs most like a layout
// (hw::calib::published_evidence).
#include "commands.hpp"
#include "dtsim/hw/calibrate.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace dtsim::cli {

std::string fast_or_slow(double error) {
    return fmt::format("{:.1f} % {}", 100 * std::abs(error), error >= 0 ? "fast" : "slow");
}

std::string evidence_traits(const hw::calib::Evidence& e) {
    std::string traits = fmt::format("{}", fmt::join(e.traits, ", "));
    if (!e.relaxed.empty()) traits += fmt::format("; not matched: {}", fmt::join(e.relaxed, ", "));
    return traits;
}

std::string evidence_sources(const hw::calib::Evidence& e) {
    std::vector<std::pair<std::string, int>> sets;
    for (const auto& row : e.rows) {
        if (sets.empty() || sets.back().first != row.set) sets.emplace_back(row.set, 0);
        ++sets.back().second;
    }
    std::string from;
    for (const auto& [set, n] : sets) from += fmt::format("{}{} ({})", from.empty() ? "" : ", ", set, n);
    return from;
}

}  // namespace dtsim::cli

#include "svg_ids.hpp"

#include <fmt/format.h>

#include <string_view>
#include <utility>
#include <vector>

namespace dtsim::render::detail {

std::string normalise_surface_ids(const std::string& svg) {
    constexpr std::string_view kPrefix = "surface";
    std::vector<std::pair<std::string, std::string>> renamed;  // old digits -> new digits
    std::string out;
    out.reserve(svg.size());
    std::size_t pos = 0;
    while (true) {
        const auto hit = svg.find(kPrefix, pos);
        if (hit == std::string::npos) break;
        auto end = hit + kPrefix.size();
        while (end < svg.size() && svg[end] >= '0' && svg[end] <= '9') ++end;
        // An id is quoted ("surface1") or referenced (#surface1); leave other text alone.
        const bool is_id =
            end > hit + kPrefix.size() && hit > 0 && (svg[hit - 1] == '"' || svg[hit - 1] == '#');
        out.append(svg, pos, end - pos);
        if (is_id) {
            const std::string digits = svg.substr(hit + kPrefix.size(), end - hit - kPrefix.size());
            std::string fresh;
            for (const auto& [old_digits, new_digits] : renamed)
                if (old_digits == digits) fresh = new_digits;
            if (fresh.empty()) {
                fresh = fmt::format("{}", renamed.size() + 1);
                renamed.emplace_back(digits, fresh);
            }
            out.resize(out.size() - digits.size());
            out += fresh;
        }
        pos = end;
    }
    out.append(svg, pos);
    return out;
}

}  // namespace dtsim::render::detail

// The grid of a trace's ranks (RankGrid), read from its meta.
#include "dtsim/render.hpp"

#include "layout.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <optional>

namespace dtsim::render {
namespace {

// A positive integer field of `obj`, `fallback` where absent; nullopt where present but not one.
std::optional<int> size_field(const nlohmann::json& obj, const char* key, int fallback) {
    auto it = obj.find(key);
    if (it == obj.end()) return fallback;
    if (!it->is_number_integer()) return std::nullopt;
    const auto v = it->get<long long>();
    if (v < 1 || v > (1 << 24)) return std::nullopt;
    return static_cast<int>(v);
}

// The grid named by fields tp, cp, dp, pp of `obj`; dp, when absent, from the number of ranks.
RankGrid from_fields(const nlohmann::json& obj, int nranks) {
    RankGrid g;
    const auto tp = size_field(obj, "tp", 1), cp = size_field(obj, "cp", 1), pp = size_field(obj, "pp", 1);
    if (!tp || !cp || !pp) return {};
    const long long inner = static_cast<long long>(*tp) * *cp * *pp;
    const auto dp = size_field(obj, "dp", inner > 0 && nranks % inner == 0 ? static_cast<int>(nranks / inner) : 0);
    if (!dp || *dp < 1 || inner * *dp != nranks) return {};
    g.tp = *tp;
    g.cp = *cp;
    g.pp = *pp;
    g.dp = *dp;
    g.known = true;
    return g;
}

}  // namespace

namespace detail {
RankGrid meta_grid(const nlohmann::json& meta) {
    if (!meta.is_object()) return {};
    const auto it = meta.find("grid");
    if (it == meta.end() || !it->is_object()) return {};
    const auto tp = size_field(*it, "tp", 1), cp = size_field(*it, "cp", 1), dp = size_field(*it, "dp", 0),
               pp = size_field(*it, "pp", 1);
    if (!tp || !cp || !dp || !pp || *dp < 1) return {};
    const long long n = static_cast<long long>(*tp) * *cp * *dp * *pp;
    if (n > (1 << 24)) return {};
    return from_fields(*it, static_cast<int>(n));
}
}  // namespace detail

RankGrid grid_of(const Trace& trace) {
    const auto nranks = static_cast<int>(trace.ranks.size());
    const auto& meta = trace.meta;
    if (nranks < 1 || !meta.is_object()) return {};
    if (auto it = meta.find("grid"); it != meta.end() && it->is_object()) return from_fields(*it, nranks);
    // Older hardware traces: the config's strategy (a puzzle strategy lays out no grid).
    if (auto it = meta.find("strategy"); it != meta.end() && it->is_object() && !meta.contains("puzzle"))
        return from_fields(*it, nranks);
    // Older schedule traces: every rank a pipeline rank.
    if (meta.contains("stages") && meta.contains("microbatches") && !meta.contains("puzzle")) {
        RankGrid g;
        g.pp = nranks;
        g.known = true;
        return g;
    }
    return {};
}

}  // namespace dtsim::render

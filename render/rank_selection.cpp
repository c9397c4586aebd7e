#include "dtsim/render.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <string_view>

namespace dtsim::render {
namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

std::string valid_range(int nranks) {
    return nranks == 1 ? "the only valid rank is 0" : fmt::format("valid ranks are 0-{}", nranks - 1);
}

[[noreturn]] void bad(const std::string& spec, std::string_view token, const std::string& why, int nranks) {
    throw std::invalid_argument(
        fmt::format("invalid rank selection \"{}\": \"{}\" {}; {}", spec, token, why, valid_range(nranks)));
}

// A non-negative decimal number filling all of `s`, or -1.
long long parse_id(std::string_view s) {
    s = trim(s);
    if (s.empty() || s.size() > 12) return -1;
    long long v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < 0) return -1;
    return v;
}

// An inclusive range "A" or "A-B" of non-negative numbers; false when it is neither.
bool parse_range(std::string_view token, long long& lo, long long& hi) {
    if (auto dash = token.find('-'); dash != std::string_view::npos) {
        lo = parse_id(token.substr(0, dash));
        hi = parse_id(token.substr(dash + 1));
    } else {
        lo = hi = parse_id(token);
    }
    return lo >= 0 && hi >= 0;
}

constexpr std::string_view kDims[] = {"tp", "cp", "dp", "pp"};

int dim_size(const RankGrid& g, std::size_t d) {
    const int sizes[] = {g.tp, g.cp, g.dp, g.pp};
    return sizes[d];
}

int coord(const RankGrid::Coords& c, std::size_t d) {
    const int v[] = {c.tp, c.cp, c.dp, c.pp};
    return v[d];
}

}  // namespace

RankGrid::Coords RankGrid::coords(int r) const {
    Coords c;
    c.tp = r % tp;
    r /= tp;
    c.cp = r % cp;
    r /= cp;
    c.dp = r % dp;
    c.pp = r / dp;
    return c;
}

std::vector<int> parse_rank_selection(const std::string& spec, int nranks) {
    return parse_rank_selection(spec, RankGrid{}, nranks);
}

std::vector<int> parse_rank_selection(const std::string& spec, const RankGrid& grid, int nranks) {
    if (nranks < 1) throw std::invalid_argument("cannot select ranks: the trace has no ranks");
    std::vector<int> out;
    if (trim(spec).empty()) {
        out.resize(static_cast<std::size_t>(nranks));
        for (int r = 0; r < nranks; ++r) out[static_cast<std::size_t>(r)] = r;
        return out;
    }
    // Per coordinate (tp, cp, dp, pp): the ranges named for it, none when it is not named.
    std::vector<std::pair<long long, long long>> wanted[4];
    std::string_view rest = spec;
    while (true) {
        const auto comma = rest.find(',');
        const std::string_view token = trim(rest.substr(0, comma));
        if (token.empty()) bad(spec, token, "is empty (stray comma?)", nranks);
        long long lo = 0, hi = 0;
        if (auto eq = token.find('='); eq != std::string_view::npos) {
            const std::string_view name = trim(token.substr(0, eq));
            const auto* it = std::find(std::begin(kDims), std::end(kDims), name);
            if (it == std::end(kDims))
                bad(spec, token, "names no coordinate: expected tp, cp, dp or pp before the '='", nranks);
            if (!grid.known || grid.size() != nranks)
                bad(spec, token,
                    "selects by coordinate, but the trace does not record how its ranks are laid out (meta "
                    "\"grid\"): select ranks by id",
                    nranks);
            const auto d = static_cast<std::size_t>(it - std::begin(kDims));
            if (!parse_range(token.substr(eq + 1), lo, hi)) bad(spec, token, "is not NAME=A or NAME=A-B", nranks);
            if (hi < lo) bad(spec, token, "is a range whose end comes before its start", nranks);
            const int size = dim_size(grid, d);
            if (hi >= size)
                throw std::invalid_argument(fmt::format(
                    "invalid rank selection \"{}\": \"{}\" is out of range; {} runs over {}", spec, token, name,
                    size == 1 ? std::string("0 only") : fmt::format("0-{}", size - 1)));
            wanted[d].emplace_back(lo, hi);
        } else {
            if (!parse_range(token, lo, hi)) bad(spec, token, "is not a rank or a range A-B", nranks);
            if (hi < lo) bad(spec, token, "is a range whose end comes before its start", nranks);
            if (hi >= nranks) bad(spec, token, "is out of range", nranks);
            for (long long r = lo; r <= hi; ++r) out.push_back(static_cast<int>(r));
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    if (std::any_of(std::begin(wanted), std::end(wanted), [](const auto& w) { return !w.empty(); }))
        for (int r = 0; r < nranks; ++r) {
            const RankGrid::Coords c = grid.coords(r);
            bool all = true;
            for (std::size_t d = 0; d < 4 && all; ++d) {
                if (wanted[d].empty()) continue;
                const int v = coord(c, d);
                all = std::any_of(wanted[d].begin(), wanted[d].end(),
                                  [v](const auto& range) { return range.first <= v && v <= range.second; });
            }
            if (all) out.push_back(r);
        }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

}  // namespace dtsim::render

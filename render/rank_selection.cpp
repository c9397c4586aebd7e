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

}  // namespace

std::vector<int> parse_rank_selection(const std::string& spec, int nranks) {
    if (nranks < 1) throw std::invalid_argument("cannot select ranks: the trace has no ranks");
    std::vector<int> out;
    if (trim(spec).empty()) {
        out.resize(static_cast<std::size_t>(nranks));
        for (int r = 0; r < nranks; ++r) out[static_cast<std::size_t>(r)] = r;
        return out;
    }
    std::string_view rest = spec;
    while (true) {
        const auto comma = rest.find(',');
        const std::string_view token = trim(rest.substr(0, comma));
        if (token.empty()) bad(spec, token, "is empty (stray comma?)", nranks);
        long long lo = 0, hi = 0;
        if (auto dash = token.find('-'); dash != std::string_view::npos) {
            lo = parse_id(token.substr(0, dash));
            hi = parse_id(token.substr(dash + 1));
            if (lo < 0 || hi < 0) bad(spec, token, "is not a rank or a range A-B", nranks);
            if (hi < lo) bad(spec, token, "is a range whose end comes before its start", nranks);
        } else {
            lo = hi = parse_id(token);
            if (lo < 0) bad(spec, token, "is not a rank or a range A-B", nranks);
        }
        if (hi >= nranks) bad(spec, token, "is out of range", nranks);
        for (long long r = lo; r <= hi; ++r) out.push_back(static_cast<int>(r));
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

}  // namespace dtsim::render

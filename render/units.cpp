#include "units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtsim::render::detail {
namespace {

// Fixed-point with `sig` significant digits for values in [1, 1000), without a
// trailing ".0": 1.75, 61.2, 80, 512.
std::string compact(double v) {
    const double a = std::fabs(v);
    if (a >= 1e15) return fmt::format("{:.6g}", v);  // fixed point past here is digits of noise
    const int decimals = a >= 100 ? 0 : a >= 10 ? 1 : 2;
    std::string s = fmt::format("{:.{}f}", v, decimals);
    if (s.find('.') != std::string::npos) {
        while (s.back() == '0') s.pop_back();
        if (s.back() == '.') s.pop_back();
    }
    return s == "-0" ? "0" : s;
}

std::string group_thousands(long long v) {
    std::string digits = fmt::format("{}", v < 0 ? -v : v);
    std::string out;
    const auto n = digits.size();
    for (std::size_t i = 0; i < n; ++i) {
        if (i > 0 && (n - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return v < 0 ? "-" + out : out;
}

// Decimals in tick labels: a double has 17 significant digits.
constexpr int kMaxDecimals = 17;

struct Unit {
    const char* name;
    double scale;
};

// From this span on, times read in hours (a long run's failures and checkpoints, `dtsim failures`).
constexpr double kHoursFrom = 3 * 3600.0;

// The time unit in which `magnitude` seconds reads as a number >= 1 (hours from 3 h).
Unit seconds_unit(double magnitude) {
    if (magnitude >= kHoursFrom) return {"h", 1 / 3600.0};
    if (magnitude >= 1) return {"s", 1};
    if (magnitude >= 1e-3) return {"ms", 1e3};
    if (magnitude >= 1e-6) return {"\u00b5s", 1e6};
    return {"ns", 1e9};
}

}  // namespace

Ticks time_ticks(double t0, double t1, int target, bool seconds) {
    Ticks t;
    const double n = target > 0 ? target : 1;
    // The span, also where t1 - t0 overflows (finite ends of opposite signs, far apart); a degenerate
    // one is 1. A raw step below 1e-300 is raised to it, so that its power of ten is not 0.
    double span = t1 > t0 ? t1 - t0 : 1;
    double raw = std::isfinite(span) ? span / n : t1 / n - t0 / n;
    if (!std::isfinite(raw)) raw = std::numeric_limits<double>::max();
    // Hours: the steps are 1, 2 or 5 times a power of ten hours.
    const bool hours = seconds && std::isfinite(span) && std::max(std::fabs(t0), std::fabs(t1)) >= kHoursFrom;
    if (hours) raw /= 3600;
    raw = std::max(raw, 1e-300);
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    t.step = 10 * mag;
    for (double m : {1.0, 2.0, 5.0})
        if (m * mag >= raw * (1 - 1e-9)) {
            t.step = m * mag;
            break;
        }
    if (hours) t.step *= 3600;
    if (!std::isfinite(t.step)) t.step = std::numeric_limits<double>::max();
    if (hours) {
        t.unit = "h";
        t.unit_scale = 1 / 3600.0;
    } else if (seconds) {  // the unit in which the far end reads as a number >= 1
        const Unit u = seconds_unit(std::max({std::fabs(t0), std::fabs(t1), t.step}));
        t.unit = u.name;
        t.unit_scale = u.scale;
    } else {
        t.unit = "steps";
    }
    const double shown = t.step * t.unit_scale;
    t.decimals = std::clamp(static_cast<int>(-std::floor(std::log10(shown) + 1e-9)), 0, kMaxDecimals);
    // About `target` values; at most 4 x target + 4 whatever the rounding (or ends far from the span).
    const std::size_t most = 4 * static_cast<std::size_t>(n) + 4;
    if (!std::isfinite(t0) || !std::isfinite(t1)) return t;
    for (double k = std::ceil(t0 / t.step - 1e-9); t.values.size() < most; ++k) {
        const double v = k * t.step;
        if (!(v <= t1 + t.step * 1e-9)) break;
        t.values.push_back(v);
    }
    return t;
}

std::string tick_label(double value, const Ticks& ticks) {
    const double shown = value * ticks.unit_scale;
    // Fixed point reads best; past 1e15 (or with more decimals than a double has) it is digits of noise.
    if (std::fabs(shown) >= 1e15 || ticks.decimals >= kMaxDecimals) return fmt::format("{:.6g}", shown);
    std::string s = fmt::format("{:.{}f}", shown, ticks.decimals);
    if (s.starts_with("-") && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
    return s;
}

std::string format_number(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
    return fmt::format("{:.6g}", v);
}

std::string format_time(double t, bool seconds) {
    if (!seconds) return format_number(t);
    if (t == 0) return "0 s";
    const Unit u = seconds_unit(std::fabs(t));
    return fmt::format("{} {}", compact(t * u.scale), u.name);
}

std::string format_memory(double m, bool bytes) {
    if (!bytes) {
        if (!(std::fabs(m) < 1e15)) return fmt::format("{:.6g} units", m);
        // Whole units grouped by thousands; fractions to two decimals at most.
        const double hundredths = std::round(m * 100);
        const auto whole = static_cast<long long>(std::trunc(hundredths / 100));
        const auto frac = static_cast<int>(std::fabs(hundredths - static_cast<double>(whole) * 100));
        std::string s;
        if (m < 0 && whole == 0 && frac != 0) s += '-';
        s += group_thousands(whole);
        if (frac != 0) {
            s += fmt::format(".{:02}", frac);
            if (s.back() == '0') s.pop_back();
        }
        s += " units";
        return s;
    }
    static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    std::size_t i = 0;
    double v = m;
    while (std::fabs(v) >= 1024 && i + 1 < std::size(kNames)) {
        v /= 1024;
        ++i;
    }
    return fmt::format("{} {}", i == 0 ? format_number(std::round(v)) : compact(v), kNames[i]);
}

}  // namespace dtsim::render::detail

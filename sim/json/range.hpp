// The physical range of a real number a user gives: one check for every such number, in
// configs, --set values, ground-truth files, traces and the command line's real-valued options
// (private to dtsim; not installed). A number passes when it is finite and within the range;
// messages say what it is, the range and the unit ("a bandwidth in [0.001, 1e6) GB/s").
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>

namespace dtsim {

struct Range {
    std::string_view what;  // "a bandwidth", "a time"
    std::string_view unit;  // "GB/s", "us"; "" for a plain number
    double lo = 0, hi = 0;
    bool lo_open = false, hi_open = false;  // (lo, ...] excludes lo, [..., hi) excludes hi

    // Whether `v` is a finite number within the range (NaN and the infinities never are).
    [[nodiscard]] bool contains(double v) const {
        if (!std::isfinite(v)) return false;
        if (lo_open ? !(v > lo) : !(v >= lo)) return false;
        return hi_open ? v < hi : v <= hi;
    }

    // Whether `v` has the sign the range asks for: > 0 where the range is positive, >= 0 where it
    // starts at 0. A value of the right sign outside the range is out of its physical range.
    [[nodiscard]] bool right_sign(double v) const {
        if (lo > 0 || (lo == 0 && lo_open)) return v > 0;
        if (lo == 0) return v >= 0;
        return true;
    }

    // A bound as messages show it: 0.001, 65536, 1e6 (not 1e+06).
    [[nodiscard]] static std::string bound(double v) {
        std::string s = fmt::format("{:g}", v);
        const auto e = s.find('e');
        if (e == std::string::npos) return s;
        std::string exponent = s.substr(e + 1);
        const bool negative = exponent.front() == '-';
        if (exponent.front() == '+' || negative) exponent.erase(0, 1);
        while (exponent.size() > 1 && exponent.front() == '0') exponent.erase(0, 1);
        return s.substr(0, e) + "e" + (negative ? "-" : "") + exponent;
    }

    // "[0.001, 1e6) GB/s"
    [[nodiscard]] std::string interval() const {
        return fmt::format("{}{}, {}{}{}{}", lo_open ? '(' : '[', bound(lo), bound(hi), hi_open ? ')' : ']',
                           unit.empty() ? "" : " ", unit);
    }

    // "a bandwidth in [0.001, 1e6) GB/s"
    [[nodiscard]] std::string describe() const { return fmt::format("{} in {}", what, interval()); }
};

}  // namespace dtsim

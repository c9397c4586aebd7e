// Units of the hardware world. Simulated time is in seconds and memory in bytes,
// both binary64 (the engine's clocks are doubles); these wrappers give printing
// one place: fmt::format("{}", Seconds{t}) -> "12.3 ms", Bytes{b} -> "1.50 GiB".
#pragma once

#include <fmt/format.h>

namespace dtsim::hw {

inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kGB = 1e9;   // datasheets and nccl-tests use decimal units
inline constexpr double kTera = 1e12;
inline constexpr double kMicro = 1e-6;

struct Seconds {
    double value;
};
struct Bytes {
    double value;
};

}  // namespace dtsim::hw

template <>
struct fmt::formatter<dtsim::hw::Seconds> : fmt::formatter<double> {
    auto format(dtsim::hw::Seconds s, fmt::format_context& ctx) const -> decltype(ctx.out()) {
        const double v = s.value;
        const double a = v < 0 ? -v : v;
        if (a >= 1.0 || a == 0.0) return fmt::format_to(ctx.out(), "{:.3f} s", v);
        if (a >= 1e-3) return fmt::format_to(ctx.out(), "{:.3f} ms", v * 1e3);
        return fmt::format_to(ctx.out(), "{:.3f} us", v * 1e6);
    }
};

template <>
struct fmt::formatter<dtsim::hw::Bytes> : fmt::formatter<double> {
    auto format(dtsim::hw::Bytes b, fmt::format_context& ctx) const -> decltype(ctx.out()) {
        const double v = b.value;
        const double a = v < 0 ? -v : v;
        if (a >= dtsim::hw::kGiB) return fmt::format_to(ctx.out(), "{:.2f} GiB", v / dtsim::hw::kGiB);
        if (a >= dtsim::hw::kMiB) return fmt::format_to(ctx.out(), "{:.2f} MiB", v / dtsim::hw::kMiB);
        if (a >= dtsim::hw::kKiB) return fmt::format_to(ctx.out(), "{:.2f} KiB", v / dtsim::hw::kKiB);
        return fmt::format_to(ctx.out(), "{:.0f} B", v);
    }
};

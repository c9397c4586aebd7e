// Stragglers in the hardware world: GPUs slower than the others (a per-rank
// slowdown factor) and per-operation jitter, applied to the operations of the
// compute stream. The slowdown applies to GEMMs and memory-bound work alike
// (the whole GPU runs slower), or with slow_memory_bound = false to the GEMM
// time only (an SM clock throttled by power or heat while HBM keeps its
// bandwidth: an operation's memory-bound part, its HBM bytes at the GPU's
// memory rate, keeps its time). Communication is not slowed: a straggler
// delays the collectives it joins by arriving late.
//
// Jitter multiplies the duration of the k-th compute operation of rank r by a
// factor X(seed, r, k) with mean 1 and coefficient of variation cv, drawn from
// a counter-based generator keyed by (seed, rank, k): a run's draws do not
// depend on the order in which the simulation interleaves ranks, and the same
// seed gives byte-identical traces. The transforms are written out (the
// standard library's distributions differ between implementations):
//   bits     splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom
//            number generators", OOPSLA 2014; Vigna's splitmix64.c constants)
//   normal   Box-Muller, z = sqrt(-2 ln u1) cos(2 pi u2) (Box and Muller 1958)
//   lognormal  X = exp(sigma z - sigma^2 / 2), sigma^2 = ln(1 + cv^2): E[X] = 1
//   normal   X = max(0, 1 + cv z), cv <= 0.25 (P(1 + cv z < 0) < 4e-5)
//   uniform  X = 1 + sqrt(3) cv (2u - 1), cv < 1/sqrt(3) (X stays positive)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numbers>

namespace dtsim::hw {

enum class JitterDistribution { none, lognormal, normal, uniform };

inline const char* jitter_name(JitterDistribution d) {
    switch (d) {
        case JitterDistribution::lognormal: return "lognormal";
        case JitterDistribution::normal: return "normal";
        case JitterDistribution::uniform: return "uniform";
        case JitterDistribution::none: break;
    }
    return "none";
}

inline std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

struct Jitter {
    JitterDistribution distribution = JitterDistribution::none;
    double cv = 0;     // standard deviation / mean (the mean is 1)
    double sigma = 0;  // lognormal: the standard deviation of ln X
    std::uint64_t seed = 0;

    [[nodiscard]] bool on() const { return distribution != JitterDistribution::none; }

    // 64 random bits for lane `lane` of rank `rank`'s operation `op`.
    [[nodiscard]] std::uint64_t bits(int rank, std::uint64_t op, std::uint64_t lane) const {
        const std::uint64_t stream = splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(rank));
        return splitmix64(stream ^ splitmix64(2 * op + lane));
    }
    // Uniform in [0, 1) (53 bits) and in (0, 1].
    [[nodiscard]] double uniform(int rank, std::uint64_t op, std::uint64_t lane) const {
        return static_cast<double>(bits(rank, op, lane) >> 11) * 0x1.0p-53;
    }
    [[nodiscard]] double standard_normal(int rank, std::uint64_t op) const {
        const double u1 = static_cast<double>((bits(rank, op, 0) >> 11) + 1) * 0x1.0p-53;
        const double u2 = uniform(rank, op, 1);
        return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
    }
    // The factor of rank `rank`'s `op`-th compute operation (1 without jitter).
    [[nodiscard]] double factor(int rank, std::uint64_t op) const {
        switch (distribution) {
            case JitterDistribution::lognormal:
                return std::exp(sigma * standard_normal(rank, op) - sigma * sigma / 2);
            case JitterDistribution::normal: return std::max(0.0, 1 + cv * standard_normal(rank, op));
            case JitterDistribution::uniform: return 1 + std::sqrt(3.0) * cv * (2 * uniform(rank, op, 0) - 1);
            case JitterDistribution::none: break;
        }
        return 1;
    }
    // Lognormal jitter of a given coefficient of variation, or of a given sigma.
    static double lognormal_sigma(double cv) { return std::sqrt(std::log1p(cv * cv)); }
    static double lognormal_cv(double sigma) { return std::sqrt(std::expm1(sigma * sigma)); }
};

struct Stragglers {
    std::map<int, double> slowdown;  // rank -> factor on its compute durations (1.5: 50 % slower)
    bool slow_memory_bound = true;   // false: the slowdown leaves memory-bound time alone
    Jitter jitter;

    [[nodiscard]] bool any() const { return !slowdown.empty() || jitter.on(); }
    [[nodiscard]] double slowdown_of(int rank) const {
        const auto it = slowdown.find(rank);
        return it == slowdown.end() ? 1.0 : it->second;
    }
};

}  // namespace dtsim::hw

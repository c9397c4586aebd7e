// A key of a puzzle-world store: `l` or `{l, r}`, as the Python dicts are
// indexed (weights[l], activations[l, mb]).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace dtsim::puzzle {

// A store key: `l` or `{l, r}`, ints as the strategies' loop variables are
// (keys are layers, microbatches and ranks). A key is a temporary in every
// store access, and those that span a co_await live in the strategy's
// coroutine frame: 8 bytes, not 16, keep the frame's lines fewer.
struct Key {
    static constexpr std::int32_t kNone = std::numeric_limits<std::int32_t>::min();
    Key(int first) : a(first) {}  // NOLINT: implicit, as Python's d[l]
    Key(int first, int second) : a(first), b(second) {}
    std::int32_t a;
    std::int32_t b = kNone;
    friend bool operator==(const Key&, const Key&) = default;
    [[nodiscard]] std::string str() const;  // "3" or "(3, 0)"
};

}  // namespace dtsim::puzzle

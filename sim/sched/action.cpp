#include "dtsim/sched/action.hpp"

#include <fmt/format.h>

#include <array>
#include <stdexcept>
#include <utility>

namespace dtsim::sched {
namespace {

constexpr std::array<std::pair<std::string_view, ActionType>, 11> kCodes{{
    {"F", ActionType::forward},
    {"B", ActionType::full_backward},
    {"I", ActionType::backward_input},
    {"W", ActionType::backward_weight},
    {"SEND_F", ActionType::send_f},
    {"RECV_F", ActionType::recv_f},
    {"SEND_B", ActionType::send_b},
    {"RECV_B", ActionType::recv_b},
    {"UNSHARD", ActionType::unshard},
    {"RESHARD", ActionType::reshard},
    {"REDUCE_GRAD", ActionType::reduce_grad},
}};

constexpr std::string_view kExpected =
    "expected an action <stage><type><microbatch> such as 0F0, with type F, B, I, W, SEND_F, RECV_F, SEND_B "
    "or RECV_B (or <stage>UNSHARD, RESHARD, REDUCE_GRAD)";

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Reads digits at s[pos...] into a non-negative int below kMaxIndex.
int read_index(std::string_view text, std::string_view s, std::size_t& pos, const char* what) {
    long long v = 0;
    const std::size_t start = pos;
    while (pos < s.size() && is_digit(s[pos])) {
        v = v * 10 + (s[pos] - '0');
        if (v >= kMaxIndex)
            throw std::invalid_argument(
                fmt::format("'{}': the {} index is too large (at most {})", text, what, kMaxIndex - 1));
        ++pos;
    }
    if (pos == start) return -1;
    return static_cast<int>(v);
}

}  // namespace

std::string_view type_code(ActionType type) {
    for (const auto& [code, t] : kCodes)
        if (t == type) return code;
    return "?";
}

std::string to_string(const Action& a) {
    if (has_microbatch(a.type)) return fmt::format("{}{}{}", a.stage, type_code(a.type), a.microbatch);
    return fmt::format("{}{}", a.stage, type_code(a.type));
}

Action parse_action(std::string_view text) {
    std::string_view s = text;
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    if (s.empty()) throw std::invalid_argument(fmt::format("empty action: {}", kExpected));
    std::size_t pos = 0;
    const int stage = read_index(text, s, pos, "stage");
    if (stage < 0) throw std::invalid_argument(fmt::format("'{}' does not start with a stage index: {}", s, kExpected));
    const std::size_t type_start = pos;
    while (pos < s.size() && !is_digit(s[pos])) ++pos;
    const std::string_view code = s.substr(type_start, pos - type_start);
    const ActionType* type = nullptr;
    for (const auto& [c, t] : kCodes)
        if (c == code) type = &t;
    if (!type) {
        if (code.empty())
            throw std::invalid_argument(fmt::format("'{}' has no action type after the stage index: {}", s, kExpected));
        throw std::invalid_argument(fmt::format("'{}': unknown action type '{}': {}", s, code, kExpected));
    }
    const int mb = read_index(text, s, pos, "microbatch");
    if (pos != s.size())
        throw std::invalid_argument(fmt::format("'{}': unexpected '{}' after the action: {}", s, s.substr(pos), kExpected));
    if (has_microbatch(*type) && mb < 0)
        throw std::invalid_argument(
            fmt::format("'{}': {} needs a microbatch index, as in {}{}0", s, code, stage, code));
    if (!has_microbatch(*type) && mb >= 0)
        throw std::invalid_argument(fmt::format("'{}': {} takes no microbatch index, as in {}{}", s, code, stage, code));
    return Action{stage, *type, mb};
}

}  // namespace dtsim::sched

#include "dtsim/sched/action.hpp"

#include <fmt/format.h>

#include <array>
#include <stdexcept>
#include <utility>
#include <vector>

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
    "or RECV_B (or <stage>UNSHARD, RESHARD, REDUCE_GRAD, or a pair (<F>;<B>)OVERLAP_F_B)";

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

std::string overlap_string(const Action& f, const Action& b) {
    Action plain = f;
    plain.overlap_next = false;
    return fmt::format("({};{})OVERLAP_F_B", to_string(plain), to_string(b));
}

std::vector<std::string> action_strings(const std::vector<Action>& actions) {
    std::vector<std::string> out;
    out.reserve(actions.size());
    for (std::size_t i = 0; i < actions.size(); ++i) {
        if (actions[i].overlap_next && i + 1 < actions.size()) {
            out.push_back(overlap_string(actions[i], actions[i + 1]));
            ++i;
        } else {
            out.push_back(to_string(actions[i]));
        }
    }
    return out;
}

std::vector<Action> parse_slot(std::string_view text) {
    std::string_view s = text;
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    if (s.empty() || s.front() != '(') return {parse_action(s)};
    constexpr std::string_view kPair = "expected an overlapped pair (<forward>;<full backward>)OVERLAP_F_B such as (0F5;7B2)OVERLAP_F_B";
    const std::size_t close = s.find(')');
    if (close == std::string_view::npos)
        throw std::invalid_argument(fmt::format("'{}': no ')' closes the sub-actions: {}", s, kPair));
    const std::string_view type = s.substr(close + 1);
    if (type != "OVERLAP_F_B")
        throw std::invalid_argument(fmt::format("'{}': the type after the sub-actions is '{}': {}", s, type, kPair));
    const std::string_view inner = s.substr(1, close - 1);
    const std::size_t semi = inner.find(';');
    if (semi == std::string_view::npos || inner.find(';', semi + 1) != std::string_view::npos)
        throw std::invalid_argument(fmt::format("'{}': this world models OVERLAP_F_B as exactly two sub-actions: {}", s, kPair));
    Action f = parse_action(inner.substr(0, semi));
    const Action b = parse_action(inner.substr(semi + 1));
    if (f.type != ActionType::forward || b.type != ActionType::full_backward)
        throw std::invalid_argument(fmt::format("'{}': the sub-actions are {} and {}: {}", s, to_string(f), to_string(b), kPair));
    f.overlap_next = true;
    return {f, b};
}

Action parse_action(std::string_view text) {
    std::string_view s = text;
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    if (s.empty()) throw std::invalid_argument(fmt::format("empty action: {}", kExpected));
    if (s.front() == '(')
        throw std::invalid_argument(fmt::format("'{}': an overlapped pair is not a single action here: {}", s, kExpected));
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

// One action of a pipeline schedule, in torch.distributed.pipelining's notation:
// `<stage><type><microbatch>`, e.g. `0F0` (forward of stage 0, microbatch 0),
// `1B0` (full backward), `0I2` (backward for the input), `0W2` (backward for the
// weights), and the communication actions of a lowered schedule, `0SEND_F1`
// (stage 0 sends microbatch 1's activation to stage 1), `1RECV_F1` (stage 1
// receives it), `1SEND_B1`, `0RECV_B1`. PyTorch's FSDP actions `0UNSHARD`,
// `0RESHARD` and `0REDUCE_GRAD` carry no microbatch.
//
// Overlapped forward and backward (PyTorch's OVERLAP_F_B computation type, used
// by ScheduleDualPipeV; DualPipe's _forward_backward_chunk): one slot that runs
// a forward of one microbatch and a full backward of another together, written
// as PyTorch's _Action.__repr__ writes an action with sub_actions:
// `(0F5;7B2)OVERLAP_F_B`. Here it is two consecutive actions of the rank's list,
// the F with `overlap_next` set and then the B, so every per-action rule and
// index applies to both unchanged; the executor runs the pair as one unit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::sched {

enum class ActionType : std::uint8_t {
    forward,          // F
    full_backward,    // B: input and weight gradients in one pass
    backward_input,   // I: the input gradient only (zero-bubble split)
    backward_weight,  // W: the weight gradient only (after I)
    send_f,           // SEND_F: stage s sends its output for microbatch i to stage s+1
    recv_f,           // RECV_F: stage s receives its input for microbatch i from stage s-1
    send_b,           // SEND_B: stage s sends its input gradient to stage s-1
    recv_b,           // RECV_B: stage s receives its output gradient from stage s+1
    unshard,          // UNSHARD, RESHARD, REDUCE_GRAD: FSDP actions, no cost in this world
    reshard,
    reduce_grad,
};

// PyTorch's spelling: F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD.
std::string_view type_code(ActionType type);
// F, B, I, W.
[[nodiscard]] constexpr bool is_compute(ActionType t) { return t <= ActionType::backward_weight; }
// SEND_F, RECV_F, SEND_B, RECV_B.
[[nodiscard]] constexpr bool is_comm(ActionType t) { return t >= ActionType::send_f && t <= ActionType::recv_b; }
// Every type but UNSHARD, RESHARD and REDUCE_GRAD names a microbatch.
[[nodiscard]] constexpr bool has_microbatch(ActionType t) { return t <= ActionType::recv_b; }

inline constexpr int kNoMicrobatch = -1;
// Stage and microbatch indices must stay below this (2^24).
inline constexpr int kMaxIndex = 1 << 24;

struct Action {
    int stage = 0;
    ActionType type = ActionType::forward;
    int microbatch = kNoMicrobatch;  // kNoMicrobatch for UNSHARD, RESHARD, REDUCE_GRAD
    // An F that runs overlapped with the next action of its rank, a B: the two
    // are one OVERLAP_F_B (validate() checks the pairing).
    bool overlap_next = false;
    friend bool operator==(const Action&, const Action&) = default;
};

// "0F0", "3SEND_B12", "1UNSHARD" (one action: an overlapped F prints as itself).
std::string to_string(const Action& action);
// PyTorch's OVERLAP_F_B spelling of a pair: "(0F5;7B2)OVERLAP_F_B".
std::string overlap_string(const Action& forward, const Action& backward);
// A rank's actions as PyTorch writes them, one string per slot: an overlapped
// pair (an F with overlap_next and the action after it) is one slot.
std::vector<std::string> action_strings(const std::vector<Action>& actions);

// Parses one action (surrounding spaces are ignored). Throws std::invalid_argument
// whose message says what was expected and what was found.
Action parse_action(std::string_view text);
// One slot: a single action (one element) or `(<F>;<B>)OVERLAP_F_B` (two
// elements, the F with overlap_next set). Spaces around the sub-actions are
// ignored, as in PyTorch's _Action.from_str. Throws std::invalid_argument. This
// world models an OVERLAP_F_B as exactly one forward followed by one full
// backward (what ScheduleDualPipeV emits); other sub-action lists are rejected.
std::vector<Action> parse_slot(std::string_view text);

// Shorthands for writing schedules in code: act::F(0, 3) is 0F3.
namespace act {
constexpr Action F(int stage, int mb) { return {stage, ActionType::forward, mb}; }
constexpr Action B(int stage, int mb) { return {stage, ActionType::full_backward, mb}; }
constexpr Action I(int stage, int mb) { return {stage, ActionType::backward_input, mb}; }
constexpr Action W(int stage, int mb) { return {stage, ActionType::backward_weight, mb}; }
// The F of an overlapped pair (the B follows it).
constexpr Action F_overlapped(int stage, int mb) { return {stage, ActionType::forward, mb, true}; }
}  // namespace act

}  // namespace dtsim::sched

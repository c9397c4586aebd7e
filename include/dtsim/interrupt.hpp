// Stopping a run from outside. Something outside the run (the dtsim command's SIGINT and SIGTERM
// handlers, or another thread) requests an interrupt; the long loops poll for it cheaply (the
// engine every few thousand resumed ranks, the renderer and the file writers every few thousand
// items) and answer by throwing dtsim::Interrupted. The request is a lock-free atomic: setting it
// is safe in a signal handler.
#pragma once

#include <atomic>

namespace dtsim {

// Thrown where a loop finds an interrupt requested. It is not a std::exception, so that code that
// handles errors (a sweep that notes a failed row and goes on, a run that keeps its partial trace)
// lets it through; catch it by name. Whatever was in flight is abandoned, as on an error: a file
// being written is removed (detail/output_file.hpp).
class Interrupted {
public:
    explicit Interrupted(int signal) noexcept : signal_(signal) {}
    // What request_interrupt was given: the signal's number for a signal.
    [[nodiscard]] int signal() const noexcept { return signal_; }

private:
    int signal_;
};

namespace detail {
static_assert(std::atomic<int>::is_always_lock_free);
inline std::atomic<int> interrupt_request{0};  // 0: none
}  // namespace detail

// Requests an interrupt (`signal` != 0, e.g. SIGINT); safe in a signal handler.
inline void request_interrupt(int signal) noexcept {
    detail::interrupt_request.store(signal, std::memory_order_relaxed);
}

// The pending request (its signal), or 0.
[[nodiscard]] inline int interrupt_requested() noexcept {
    return detail::interrupt_request.load(std::memory_order_relaxed);
}

// Forgets a request (for a test, or a host that goes on after one).
inline void clear_interrupt() noexcept { detail::interrupt_request.store(0, std::memory_order_relaxed); }

// Throws Interrupted when an interrupt is requested.
inline void check_interrupt() {
    if (const int signal = interrupt_requested()) throw Interrupted(signal);
}

}  // namespace dtsim

// How the engine parks a rank's coroutine and resumes it (Gpu::parked_).
//
// Fast path (DTSIM_FRAMELESS_AWAIT): the coroutine's Asio thread of execution
// is detached from its frame and kept in 16 bytes (ParkedThread); resuming
// relaunches it. Otherwise: the completion handler that asio::async_initiate
// makes, kept in a std::optional and called to resume.
#pragma once

#include "dtsim/task.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <memory>
#include <optional>
#include <stdexcept>

namespace dtsim::detail {

#if DTSIM_FRAMELESS_AWAIT
// A parked rank's thread of execution, kept in 16 bytes instead of Asio's 32:
// Asio's thread object is the coroutine stack (the frame at its bottom, which
// owns the stack, and the frame at its top, the one to resume) and the
// thread's executor, which for every rank is its simulation's, so only the
// stack is kept and the executor is given back when the thread is rebuilt.
class ParkedThread {
public:
    using Thread = asio::detail::awaitable_thread<Executor>;
    ParkedThread() = default;
    ParkedThread(const ParkedThread&) = delete;
    ParkedThread& operator=(const ParkedThread&) = delete;

    [[nodiscard]] bool empty() const { return !bottom_.valid(); }
    // Takes `thread`'s stack (as moving the thread would), leaving it with nothing to run. Only when empty.
    void park(Thread& thread) {
        if (!empty()) throw std::logic_error("ParkedThread::park: a rank is parked twice");
        // Asio's awaitable has no move assignment; this one is empty.
        std::destroy_at(&bottom_);
        std::construct_at(&bottom_, std::move(Stack::bottom(thread)));
        top_ = std::exchange(Stack::top(thread), nullptr);
    }
    // The thread again, on `ex`, to launch or to drop (which unwinds its stack); leaves this empty.
    Thread take(const Executor& ex) {
        Thread thread(std::move(bottom_), ex);
        Stack::top(thread) = std::exchange(top_, nullptr);
        return thread;
    }

private:
    // The stack's two ends are protected members of Asio's thread; a derived class may name them.
    struct Stack : Thread {
        static asio::awaitable<void, Executor>& bottom(Thread& t) { return t.*&Stack::bottom_of_stack_; }
        static asio::detail::awaitable_frame_base<Executor>*& top(Thread& t) { return t.*&Stack::top_of_stack_; }
    };
    asio::awaitable<void, Executor> bottom_;
    asio::detail::awaitable_frame_base<Executor>* top_ = nullptr;
};

// What resumes a parked rank, and where it is kept.
using ParkedHandler = asio::detail::awaitable_thread<Executor>;
using ParkingSlot = ParkedThread;
inline void resume_parked(ParkedHandler& h) { h.launch(); }
inline bool is_parked(const ParkingSlot& slot) { return !slot.empty(); }
inline ParkedHandler unpark(ParkingSlot& slot, const Executor& ex) { return slot.take(ex); }

// `co_await park_in(slot)` suspends the calling Task and leaves what resumes it
// in `slot`. Asio's awaitable promise accepts a function of its frame that
// detaches the coroutine's thread of execution (async_initiate works this
// way); taking the thread here parks the coroutine without the coroutine frame
// that async_initiate's initiation allocates.
inline auto park_in(ParkingSlot& slot) {
    return [&slot](auto* frame) {
        slot.park(*frame->detach_thread());
        return static_cast<ParkedHandler*>(nullptr);
    };
}
// The same for an awaiter's await_suspend: parks the coroutine of `h` (a Task) in `slot`.
template <class P>
void park_thread(ParkingSlot& slot, std::coroutine_handle<P> h) {
    slot.park(*h.promise().detach_thread());
}
#else
using ParkedHandler = asio::async_result<asio::use_awaitable_t<Executor>, void()>::handler_type;
using ParkingSlot = std::optional<ParkedHandler>;
inline void resume_parked(ParkedHandler& h) { h(); }
inline bool is_parked(const ParkingSlot& slot) { return slot.has_value(); }
inline ParkedHandler unpark(ParkingSlot& slot, const Executor&) {
    ParkedHandler h = std::move(*slot);
    slot.reset();
    return h;
}

struct ParkIn {
    ParkingSlot* slot;
    void operator()(ParkedHandler h) const { slot->emplace(std::move(h)); }
};
inline auto park_in(ParkingSlot& slot) {
    return asio::async_initiate<const asio::use_awaitable_t<Executor>&, void()>(ParkIn{&slot},
                                                                               asio::use_awaitable_t<Executor>{});
}
#endif

}  // namespace dtsim::detail

// What the engine's fast path needs from Asio (include/dtsim/detail/task_frame.hpp
// and parked_thread.hpp), compiled by CMake against the Boost it found:
// - asio::detail::awaitable_frame<T, Executor>, derivable as a coroutine's
//   promise type, with await_transform for Asio's awaitables and for a function
//   of the frame (what async_initiate uses), and detach_thread();
// - asio::detail::awaitable_thread<Executor>, constructible from the bottom of a
//   coroutine stack and an executor, with launch() and the protected members
//   bottom_of_stack_ and top_of_stack_;
// - asio::awaitable's await_ready/await_suspend/await_resume and valid().
// dtsim's own headers are compiled here as the library uses them.
#include "dtsim/detail/parked_thread.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <cstdlib>
#include <new>

namespace dtsim::detail {
void* frame_allocate(std::size_t bytes) { return ::operator new(bytes); }
void frame_deallocate(void* p, std::size_t) noexcept { ::operator delete(p); }
}  // namespace dtsim::detail

namespace {
namespace d = dtsim::detail;
d::ParkingSlot slot;

struct Parks {
    using dtsim_awaiter = void;
    bool await_ready() const noexcept { return false; }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
        d::park_thread(slot, h);
    }
    void await_resume() const noexcept {}
};

dtsim::Task<int> child() { co_return 1; }

dtsim::Task<> body(int& out) {
    co_await d::park_in(slot);
    co_await Parks{};
    out = co_await child();
}
}  // namespace

int main() {
    dtsim::asio::io_context ctx;
    int out = 0;
    dtsim::asio::co_spawn(ctx, body(out), dtsim::asio::detached);
    for (int i = 0; i < 2; ++i) {
        ctx.poll();
        ctx.restart();
        if (!d::is_parked(slot)) return 1;
        d::ParkedHandler h = d::unpark(slot, ctx.get_executor());
        d::resume_parked(h);
    }
    ctx.poll();
    return out == 1 ? 0 : 1;
}

// The promise type of Task coroutines on the engine's fast path
// (DTSIM_FRAMELESS_AWAIT, see asio_fast_path.hpp): a collective and a park
// suspend the strategy's own coroutine, with no coroutine frame of their own
// and no allocation, and the resumed rank continues in its strategy directly.
//
// Asio's awaitable accepts only its own awaitables, so Task coroutines get a
// promise type derived from Asio's (asio::detail::awaitable_frame) that also
// accepts the engine's awaiters (marked by a member type `dtsim_awaiter`) and
// allocates frames from a pool: Asio's recycling allocator keeps one free
// frame per thread, while thousands of ranks parked in collectives free and
// take frames by the thousand. Without the fast path Tasks are plain Asio
// coroutines with the same semantics and a frame per collective.
#pragma once

#include "dtsim/detail/frame_pool.hpp"
#include "dtsim/task.hpp"

#include <coroutine>
#include <cstddef>
#include <type_traits>

namespace dtsim::detail {

template <class A>
struct AwaitByPointer {
    A* a;
    bool await_ready() { return a->await_ready(); }
    template <class P>
    decltype(auto) await_suspend(std::coroutine_handle<P> h) {
        return a->await_suspend(h);
    }
    decltype(auto) await_resume() { return a->await_resume(); }
};

template <class T>
struct TaskFrame : asio::detail::awaitable_frame<T, Executor> {
    using Base = asio::detail::awaitable_frame<T, Executor>;
    using Base::await_transform;
    // Asio's awaitables expect their caller's promise to be Asio's frame type;
    // this promise is one (a derived class with no data of its own), so the
    // handle is re-typed to it.
    template <class U>
    auto await_transform(asio::awaitable<U, Executor> a) const {
        struct Awaiter {
            asio::awaitable<U, Executor> a;
            bool await_ready() const noexcept { return a.await_ready(); }
            void await_suspend(std::coroutine_handle<TaskFrame> h) {
                a.await_suspend(std::coroutine_handle<Base>::from_address(h.address()));
            }
            U await_resume() { return a.await_resume(); }
        };
        return Awaiter{std::move(a)};
    }
    // The engine's own awaiters are awaited through a pointer: g++ keeps the
    // awaiter that await_transform returns in the frame next to the operand,
    // so returning the operand itself (by reference or value) would store it twice.
    template <class A>
        requires requires { typename std::remove_cvref_t<A>::dtsim_awaiter; }
    auto await_transform(A&& a) const noexcept {
        static_assert(!std::is_lvalue_reference_v<A> ||
                          !requires { typename std::remove_cvref_t<A>::dtsim_awaited_at_once; },
                      "await this where it is made: co_await model.allreduce(x, l), not a variable holding it");
        return AwaitByPointer<std::remove_reference_t<A>>{&a};
    }
    static void* operator new(std::size_t n) { return frame_allocate(n); }
    static void operator delete(void* p, std::size_t n) noexcept { frame_deallocate(p, n); }
};
static_assert(sizeof(TaskFrame<int>) == sizeof(asio::detail::awaitable_frame<int, Executor>) &&
              alignof(TaskFrame<int>) == alignof(asio::detail::awaitable_frame<int, Executor>));

}  // namespace dtsim::detail

template <class T, class... Args>
struct std::coroutine_traits<boost::asio::awaitable<T, dtsim::Executor>, Args...> {
    using promise_type = dtsim::detail::TaskFrame<T>;
};

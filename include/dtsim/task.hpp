// Task<T>: the coroutine type of strategies and of every engine operation that
// may suspend (a collective, a pass, a receive). A Task is an Asio awaitable on
// the simulation's io_context: `co_await` it from another Task, or hand a
// strategy to Simulation::run, which runs one per rank.
#pragma once

// <utility> must precede Asio with Boost 1.74 + g++ 12 (std::exchange in awaitable.hpp).
#include <utility>

#include "dtsim/detail/asio_fast_path.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

namespace dtsim {

namespace asio = boost::asio;
using Executor = asio::io_context::executor_type;
template <class T = void>
using Task = asio::awaitable<T, Executor>;

}  // namespace dtsim

#if DTSIM_FRAMELESS_AWAIT
#include "dtsim/detail/task_frame.hpp"
#endif

// Sweeps of `dtsim run --set`: the combinations on several threads, handed on in order.
#include "dtsim/hw/run.hpp"
#include "dtsim/interrupt.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace dtsim::hw {

SweepOutcome run_combination(const std::string& path, const std::vector<Override>& overrides) {
    SweepOutcome out;
    try {
        const Config c = load_config(path, overrides);
        out.report = simulate(c, {.keep_trace = false}).report;
    } catch (const std::exception& e) {
        out.error = e.what();
    }
    return out;
}

int default_sweep_jobs() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(std::min<unsigned>(n, kMaxSweepJobs));
}

int sweep_jobs(int asked) { return asked > 0 ? asked : default_sweep_jobs(); }

void run_each(std::size_t count, int jobs, const std::function<void(std::size_t)>& evaluate) {
    run_in_order(
        count, jobs,
        [&](std::size_t i) {
            evaluate(i);
            return SweepOutcome{};
        },
        [](std::size_t, SweepOutcome&) {});
}

void run_in_order(std::size_t count, int jobs, const std::function<SweepOutcome(std::size_t)>& evaluate,
                  const std::function<void(std::size_t, SweepOutcome&)>& done) {
    if (jobs <= 1 || count <= 1) {
        for (std::size_t i = 0; i < count; ++i) {
            check_interrupt();
            SweepOutcome o = evaluate(i);
            done(i, o);
        }
        return;
    }
    // Each item's outcome waits in its slot until the items before it are handed on.
    struct Slot {
        bool finished = false;
        SweepOutcome outcome;
        std::exception_ptr failure;  // what its evaluation threw
    };
    std::vector<Slot> slots(count);
    std::mutex mutex;
    std::condition_variable finished;
    std::atomic<std::size_t> next{0};  // the next item to start
    std::atomic<bool> stop{false};     // no item starts once set
    const auto work = [&] {
        while (!stop.load(std::memory_order_relaxed)) {
            const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
            if (i >= count) return;
            SweepOutcome o;
            std::exception_ptr failure;
            try {
                check_interrupt();
                o = evaluate(i);
            } catch (...) {
                failure = std::current_exception();
                stop.store(true, std::memory_order_relaxed);
            }
            {
                const std::lock_guard lock(mutex);
                slots[i].outcome = std::move(o);
                slots[i].failure = failure;
                slots[i].finished = true;
            }
            finished.notify_all();
            if (failure) return;
        }
    };
    std::vector<std::jthread> threads;  // joined when this returns or throws...
    struct Stop {
        std::atomic<bool>& stop;
        ~Stop() { stop.store(true, std::memory_order_relaxed); }
    } stop_first{stop};  // ...after no item may start any more (destroyed before `threads`)
    const std::size_t n = std::min<std::size_t>(count, static_cast<std::size_t>(std::min(jobs, kMaxSweepJobs)));
    threads.reserve(n);
    for (std::size_t t = 0; t < n; ++t) {
        try {
            threads.emplace_back(work);
        } catch (const std::system_error&) {
            break;  // the threads started share the items
        }
    }
    if (threads.empty()) {  // none could start: one item after another, here
        run_in_order(count, 1, evaluate, done);
        return;
    }
    for (std::size_t i = 0; i < count; ++i) {
        std::unique_lock lock(mutex);
        finished.wait(lock, [&] { return slots[i].finished; });
        if (slots[i].failure) {
            const std::exception_ptr failure = slots[i].failure;
            lock.unlock();
            stop.store(true, std::memory_order_relaxed);
            threads.clear();  // every thread stopped before the exception goes on
            std::rethrow_exception(failure);
        }
        SweepOutcome o = std::move(slots[i].outcome);
        lock.unlock();
        done(i, o);
    }
}

}  // namespace dtsim::hw

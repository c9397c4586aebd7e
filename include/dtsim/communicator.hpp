// Communicator: a group of ranks that run collectives together (the world, a
// data-, tensor- or pipeline-parallel group). The k-th collective call of every
// member belongs to the same round; the last arrival releases everyone.
#pragma once

#include "dtsim/errors.hpp"
#include "dtsim/gpu.hpp"
#include "dtsim/task.hpp"

#include <algorithm>
#include <any>
#include <cstdint>
#include <deque>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dtsim {

class Communicator {
    struct Round;

public:
    Communicator(Simulation& sim, std::vector<int> members, std::string name);

    [[nodiscard]] int size() const { return static_cast<int>(members_.size()); }
    [[nodiscard]] const std::vector<int>& members() const { return members_; }
    [[nodiscard]] const std::string& name() const { return name_; }
    // Position of `rank` in the group, or -1.
    [[nodiscard]] int position(int rank) const;

    template <class V>
    struct Result {
        V value;
        double clock;  // maximum of the members' clocks at arrival
    };

    // What collective() returns: co_await it (once) for the result.
#if DTSIM_FRAMELESS_AWAIT
    template <class V, class Combine, class Finish>
    using Arriving = detail::Arrival<V, Combine, Finish>;
#else
    template <class V, class Combine, class Finish>
    using Arriving = Task<std::invoke_result_t<Finish&, Result<V>&&>>;
#endif

    // Joins this group's next collective with `value` when awaited.
    // `combine(acc, value, from_rank)` folds the members' values in arrival
    // order and may throw to reject a value. Suspends until every member has
    // arrived (the last one does not suspend); then `finish(Result<V>&&)` runs
    // on this rank and its return value is the result. The hot path of every
    // collective: no allocation, no coroutine frame of its own.
    template <class V, class Combine, class Finish>
    auto collective(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine, Finish finish)
        -> Arriving<V, Combine, Finish>;

    // The same as a Task (a coroutine frame per call), for code that returns it as one.
    template <class V, class Combine, class Finish>
    auto arrive(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine, Finish finish)
        -> Task<std::invoke_result_t<Finish&, Result<V>&&>> {
        co_return co_await collective(gpu, op, layer, std::move(value), std::move(combine), std::move(finish));
    }

    // The protocol under collective(), for awaiters that keep what lasts across
    // the suspension themselves (a model is in one collective at a time, say):
    // `join_round` folds `value` into this member's next round and returns true
    // when it completed the round; otherwise the caller parks the rank, which
    // is woken when the round completes. Then `take_result` gives the member
    // its result, once.
    class Seat {
    public:
        Seat() = default;
        Seat(const Seat&) = delete;  // a seat's result is taken once
        Seat& operator=(const Seat&) = delete;

    private:
        friend class Communicator;
        Round* round_ = nullptr;
    };
    // (`value` is copied, or moved when it is an rvalue, only by the member that opens the round.)
    template <class V, class In, class Combine>
        requires std::is_same_v<std::remove_cvref_t<In>, V>
    bool join_round(Gpu& gpu, OpCode op, std::int32_t layer, In&& value, Combine& combine, Seat& seat) {
        return enter<V>(gpu, op, layer, std::forward<In>(value), combine, seat.round_);
    }
    template <class V>
    Result<V> take_result(Seat& seat) {
        if (!seat.round_) throw std::logic_error("Communicator::take_result: the seat is in no round");
        return leave<V>(std::exchange(seat.round_, nullptr));
    }

    struct TakeResult {
        template <class V>
        Result<V> operator()(Result<V>&& r) const {
            return std::move(r);
        }
    };
    // The same, returning the combined value and the maximum clock.
    template <class V, class Combine>
    auto collective(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine) {
        return collective(gpu, op, layer, std::move(value), std::move(combine), TakeResult{});
    }
    template <class V, class Combine>
    Task<Result<V>> arrive(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine) {
        co_return co_await collective(gpu, op, layer, std::move(value), std::move(combine), TakeResult{});
    }

private:
    friend class Simulation;
    template <class V, class Combine, class Finish>
    friend class detail::Arrival;
    struct Round {
        OpCode op;
        std::int32_t layer = kNoLayer;
        int first_rank = -1;
        int arrived = 0;
        int unread = 0;  // released members that have not taken the result yet
        double max_clock = -std::numeric_limits<double>::infinity();
        std::any acc;
        std::vector<Gpu*> waiting;
    };
    Round& join(Gpu& gpu, OpCode op, std::int32_t layer, std::uint64_t& call);
    // Arrival: folds `value` into the round; true when this member completed it.
    template <class V, class In, class Combine>
    bool enter(Gpu& gpu, OpCode op, std::int32_t layer, In&& value, Combine& combine, Round*& out);
    // After the round completed: this member's result (the combined value and the latest clock).
    template <class V>
    Result<V> leave(Round* round);
    void release(Round& round);
    void finish_read(Round& round);
    // A member joined a round with a value of another type than the first member's.
    [[noreturn]] void throw_value_mismatch(std::uint64_t call, const Round& round, const Gpu& gpu) const;

    Simulation* sim_;
    std::vector<int> members_;  // sorted ranks
    std::string name_;
    // Members that step evenly (first_, first_ + stride_, ...: the world, a tensor-parallel group
    // of neighbours, a data- or pipeline-parallel group across them) give a rank's position by
    // arithmetic instead of a binary search of members_; stride_ 0 when they do not.
    int first_ = 0;
    int stride_ = 0;
    std::vector<std::uint64_t> calls_;  // per member: collectives started
    std::uint64_t base_ = 0;            // call index of rounds_.front()
    std::deque<Round> rounds_;
};

#if DTSIM_FRAMELESS_AWAIT
namespace detail {
// `co_await comm.collective(gpu, ...)`: joins the round when awaited; the last
// member to arrive does not suspend at all.
template <class V, class Combine, class Finish>
class Arrival {
public:
    using dtsim_awaiter = void;
    using Result = std::invoke_result_t<Finish&, Communicator::Result<V>&&>;
    Arrival(Communicator& comm, Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine, Finish finish)
        : comm_(&comm), gpu_(&gpu), op_(op), layer_(layer), value_(std::move(value)), combine_(std::move(combine)),
          finish_(std::move(finish)) {}
    bool await_ready() { return comm_->enter<V>(*gpu_, op_, layer_, std::move(value_), combine_, round_); }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
        park_handle(*gpu_, h);
    }
    Result await_resume() { return finish_(comm_->leave<V>(round_)); }

private:
    Communicator* comm_;
    Gpu* gpu_;
    OpCode op_;
    std::int32_t layer_;
    V value_;
    [[no_unique_address]] Combine combine_;
    [[no_unique_address]] Finish finish_;
    Communicator::Round* round_ = nullptr;
};
}  // namespace detail
#endif

template <class V, class In, class Combine>
bool Communicator::enter(Gpu& gpu, OpCode op, std::int32_t layer, In&& value, Combine& combine, Round*& out) {
    std::uint64_t call = 0;
    Round& round = join(gpu, op, layer, call);
    out = &round;
    if (round.arrived == 0) {
        round.acc.emplace<V>(std::forward<In>(value));
    } else {
        V* acc = std::any_cast<V>(&round.acc);
        if (!acc) throw_value_mismatch(call, round, gpu);
        combine(*acc, value, gpu.rank());
    }
    round.max_clock = std::max(round.max_clock, gpu.clock());
    if (++round.arrived < size()) {
        round.waiting.push_back(&gpu);
        gpu.wait_ = Wait::collective(op, layer, call, *this);
        return false;
    }
    release(round);
    return true;
}

template <class V>
auto Communicator::leave(Round* round) -> Result<V> {
    Result<V> r{*std::any_cast<V>(&round->acc), round->max_clock};
    finish_read(*round);
    return r;
}

template <class V, class Combine, class Finish>
auto Communicator::collective(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine, Finish finish)
    -> Arriving<V, Combine, Finish> {
#if DTSIM_FRAMELESS_AWAIT
    return detail::Arrival<V, Combine, Finish>(*this, gpu, op, layer, std::move(value), std::move(combine),
                                               std::move(finish));
#else
    Round* round = nullptr;
    if (!enter<V>(gpu, op, layer, std::move(value), combine, round)) co_await detail::park_in(gpu.parked_);
    co_return finish(leave<V>(round));
#endif
}

}  // namespace dtsim

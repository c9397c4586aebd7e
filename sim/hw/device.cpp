#include "dtsim/hw/device.hpp"
#include "dtsim/hw/world.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace dtsim::hw {

namespace {
// What each member brings to a collective: when its data and stream are
// ready. The members' values fold into one, which also names the world's slot
// where the first member released leaves the schedule for all of them.
struct Arrival {
    double ready;
    int slot;       // -1 until a second member arrives
    int gate;       // the member ready last (the lowest rank on ties), and where its path goes on
    double gate_time;
    int rank;
};
}  // namespace

Device::Device(World& world, Gpu& gpu) : world_(&world), gpu_(&gpu) {}

std::pair<int, double> Device::gate(double ready, const Transfer& last) const {
    if (ready <= now() || last.gate < 0) return {rank(), ready};
    return {last.gate, last.gate_time};
}

const Cluster& Device::cluster() const { return world_->cluster(); }
const GpuSpec& Device::spec() const { return world_->cluster().gpu; }

Event& Device::record(OpCode op, int layer, Stream stream, double start, double duration, IdSet batches) {
    ++events_;
    if (!world_->recording()) {
        scratch_ = Event{};
        return scratch_;
    }
    return gpu_->record_at(op, layer, stream, start, duration, memory_.current, std::move(batches));
}

void Device::compute(OpCode op, int layer, double seconds, double flops, IdSet microbatches, double bytes) {
    const Stragglers& st = world_->stragglers();
    const Jitter& jitter = st.jitter;
    if (slowdown_ != 1) {
        const double memory = st.slow_memory_bound ? 0 : std::min(seconds, spec().memory_seconds(bytes));
        seconds = (seconds - memory) * slowdown_ + memory;
    }
    if (jitter.on()) seconds *= jitter.factor(rank(), compute_ops_);
    ++compute_ops_;
    Event& e = record(op, layer, Stream::compute, now(), seconds, std::move(microbatches));
    e.flops = flops;
    e.bytes = bytes;
    gpu_->set_clock(now() + seconds);
    split_.compute += seconds;
    flops_ += flops;
}

void Device::gemm(OpCode op, int layer, double m, double n, double k, DType dtype, double count, IdSet mb) {
    compute(op, layer, spec().gemm_seconds(m, n, k, dtype, count), 2 * m * n * k * count, std::move(mb));
}

void Device::memory_bound(OpCode op, int layer, double bytes, IdSet mb) {
    compute(op, layer, spec().memory_seconds(bytes), 0, std::move(mb), bytes);
}

void Device::allocate(double bytes, OpCode op, int layer) {
    memory_.current += bytes;
    if (memory_.current > memory_.peak.bytes) memory_.peak = MemoryEvent{memory_.current, now(), op, layer};
    if (!memory_.oom && memory_.current > spec().memory_bytes)
        memory_.oom = MemoryEvent{memory_.current, now(), op, layer};
}

void Device::release(double bytes) {
    memory_.current -= bytes;
    if (memory_.current < 0 && memory_.current > -1e-6 * bytes) memory_.current = 0;  // rounding
}

void Device::block_on(const Transfer& t) {
    const double c = now();
    if (t.end <= c) return;
    const double moving_from = std::max(c, t.start);
    split_.idle += moving_from - c;
    split_.comm += t.end - moving_from;
    // The path through this wait leaves the rank unless the transfer started
    // now from a member ready now (this rank among the last to arrive).
    if (t.gate >= 0 && !(t.start == c && t.gate_time == c)) jumps_.push_back(PathJump{t.end, t.gate_time, t.gate});
    gpu_->set_clock(t.end);
}

void Device::wait(const Transfer& t) { block_on(t); }

Task<Transfer> Device::start(Collective c, Group& g, double bytes, int layer) {
    return arrive(c, g, bytes, layer, true);
}

Task<Transfer> Device::run(Collective c, Group& g, double bytes, int layer) {
    return arrive(c, g, bytes, layer, false);
}

Task<Transfer> Device::arrive(Collective c, Group& g, double bytes, int layer, bool async) {
    const double ready = async ? std::max(now(), comm_free_) : now();
    const auto [gate_rank, gate_time] = gate(ready, last_comm_);
    const OpCode op = ops::of(c);
    return g.communicator().arrive(
        *gpu_, op, layer, Arrival{ready, -1, gate_rank, gate_time, rank()},
        [this, &g](Arrival& acc, const Arrival& x, int) {
            if (x.ready > acc.ready || (x.ready == acc.ready && x.rank < acc.rank)) {
                acc.ready = x.ready;
                acc.gate = x.gate;
                acc.gate_time = x.gate_time;
                acc.rank = x.rank;
            }
            if (acc.slot < 0) acc.slot = world_->acquire_slot(g.size());
        },
        [this, &g, c, bytes, layer, async, op](Communicator::Result<Arrival>&& r) {
            Transfer t;
            const Arrival& a = r.value;
            if (a.slot < 0) {
                t = world_->schedule(g, c, bytes, a.ready, a.gate, a.gate_time, async);  // a group of one
            } else {
                World::RoundSlot& s = world_->slot(a.slot);
                if (!s.done) {
                    s.transfer = world_->schedule(g, c, bytes, a.ready, a.gate, a.gate_time, async);
                    s.done = true;
                }
                t = s.transfer;
                if (--s.unread == 0) world_->release_slot(a.slot);
            }
            if (async) {
                record(op, layer, Stream::comm, t.start, t.end - t.start).bytes = bytes;
            } else {
                block_on(t);
                record(op, layer, Stream::compute, t.start, t.end - t.start).bytes = bytes;
            }
            return t;
        });
}

Transfer Device::send(int dst, double bytes, int tag, int layer, IdSet microbatches) {
    if (dst < 0 || dst >= world_->ranks())
        throw ScheduleError(fmt::format("rank {}: send to rank {}: destination must be in [0, {})", rank(), dst,
                                        world_->ranks()));
    const double ready = std::max(now(), p2p_free_);
    Transfer t = world_->schedule_p2p(rank(), dst, bytes, ready);
    std::tie(t.gate, t.gate_time) = gate(ready, last_p2p_);
    p2p_free_ = t.end;
    last_p2p_ = t;
    record(ops::send, layer, Stream::comm, t.start, t.end - t.start, std::move(microbatches)).bytes = bytes;
    world_->inbox_[static_cast<std::size_t>(dst)].push_back(World::Message{rank(), tag, bytes, t});
    Device& d = world_->device(dst);
    if (d.want_src_ == rank() && d.want_tag_ == tag) {
        d.want_src_ = -1;
        world_->simulation().wake(d.engine());
    }
    return t;
}

Task<> Device::recv(int src, int tag, int layer, IdSet microbatches) {
    if (src < 0 || src >= world_->ranks())
        throw ScheduleError(fmt::format("rank {}: recv from rank {}: source must be in [0, {})", rank(), src,
                                        world_->ranks()));
    auto& inbox = world_->inbox_[static_cast<std::size_t>(rank())];
    auto find = [&] {
        return std::find_if(inbox.begin(), inbox.end(),
                            [&](const World::Message& m) { return m.src == src && m.tag == tag; });
    };
    auto it = find();
    if (it == inbox.end()) {
        want_src_ = src;
        want_tag_ = tag;
        co_await world_->simulation().park(*gpu_, Wait{Wait::Kind::receive, ops::recv, layer, src, 0, nullptr});
        it = find();
    }
    const Transfer t = it->transfer;
    const double bytes = it->bytes;
    inbox.erase(it);
    record(ops::recv, layer, Stream::comm, t.start, t.end - t.start, std::move(microbatches)).bytes = bytes;
    block_on(t);
}

}  // namespace dtsim::hw

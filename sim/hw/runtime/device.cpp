#include "dtsim/hw/device.hpp"
#include "dtsim/hw/world.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>

namespace dtsim::hw {

double Transfer::start() const {
    if (!rec_) return at_;
    if (!rec_->began) throw std::logic_error("the start of a transfer is not known yet (co_await Device::wait first)");
    return rec_->start;
}

double Transfer::end() const {
    if (!rec_) return at_;
    if (!rec_->ended) throw std::logic_error("the end of a transfer is not known yet (co_await Device::wait first)");
    return rec_->end;
}

Device::Device(World& world, Gpu& gpu) : world_(&world), gpu_(&gpu) {}

const Cluster& Device::cluster() const { return world_->cluster(); }
const GpuSpec& Device::spec() const { return world_->cluster().gpu; }

Event& Device::record(OpCode op, int layer, Stream stream, double start, double duration, IdSet batches) {
    ++events_;
    if (!world_->recording()) {
        world_->scratch_ = Event{};
        return world_->scratch_;
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
    if (!holds_.empty()) seconds = contended(now(), seconds);
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

std::string_view kind_name(MemoryKind k) {
    switch (k) {
        case MemoryKind::weights: return "weights";
        case MemoryKind::gradients: return "gradients";
        case MemoryKind::optimizer: return "optimizer";
        case MemoryKind::activations: return "activations";
        case MemoryKind::buffers: return "buffers";
    }
    return "?";
}

void Device::allocate(double bytes, MemoryKind kind, OpCode op, int layer) {
    MemoryParts parts{};
    parts[static_cast<std::size_t>(kind)] = bytes;
    allocate(parts, op, layer);
}

void Device::allocate(const MemoryParts& parts, OpCode op, int layer) {
    for (std::size_t k = 0; k < kMemoryKinds; ++k) {
        memory_.current += parts[k];
        memory_.current_by_kind[k] += parts[k];
    }
    if (memory_.current > memory_.peak.bytes)
        memory_.peak = MemoryEvent{memory_.current, now(), op, layer, memory_.current_by_kind};
    if (!memory_.oom && memory_.current > spec().memory_bytes)
        memory_.oom = MemoryEvent{memory_.current, now(), op, layer, memory_.current_by_kind};
    log_memory();
}

void Device::log_memory() {
    if (!world_->recording()) return;
    constexpr std::size_t stride = 1 + kMemoryKinds;
    const double t = now();
    const auto& now_parts = memory_.current_by_kind;
    const auto total_at = [&](std::size_t sample) {  // the sum of the sample starting at `sample`
        double sum = 0;
        for (std::size_t k = 1; k < stride; ++k) sum += memory_log_[sample + k];
        return sum;
    };
    const auto append = [&] {
        memory_log_.push_back(t);
        memory_log_.insert(memory_log_.end(), now_parts.begin(), now_parts.end());
    };
    const std::size_t n = memory_log_.size();
    if (n == 0 || memory_log_[n - stride] != t) {
        append();
        return;
    }
    // The changes of one moment keep at most two samples: the moment's highest total, then what is
    // held after them where that is less; so the largest sum is the peak (MemoryStats::peak).
    const double total = std::accumulate(now_parts.begin(), now_parts.end(), 0.0);
    const bool two = n >= 2 * stride && memory_log_[n - 2 * stride] == t;
    const std::size_t high = two ? n - 2 * stride : n - stride;
    if (total >= total_at(high)) {
        if (two) memory_log_.resize(n - stride);  // the new highest is also the last
        std::copy(now_parts.begin(), now_parts.end(), memory_log_.begin() + static_cast<std::ptrdiff_t>(high + 1));
    } else if (two) {
        std::copy(now_parts.begin(), now_parts.end(), memory_log_.end() - kMemoryKinds);
    } else {
        append();
    }
}

void Device::release(double bytes, MemoryKind kind) {
    const auto clamp = [bytes](double& v) {
        if (v < 0 && v > -1e-6 * bytes) v = 0;  // rounding
    };
    memory_.current -= bytes;
    clamp(memory_.current);
    double& part = memory_.current_by_kind[static_cast<std::size_t>(kind)];
    part -= bytes;
    clamp(part);
    log_memory();
}

void Device::record_transfer(OpCode op, int layer, const TransferRecord* t, double bytes, IdSet batches) {
    const bool known = t->ended;
    Event& e = record(op, layer, Stream::comm, known ? t->start : now(), known ? t->end - t->start : 0,
                      std::move(batches));
    e.bytes = bytes;
    if (!known && world_->recording())
        world_->network_.patch_on_end(t, rank(), static_cast<std::uint32_t>(gpu_->log_size() - 1));
}

void Device::block_on(const Transfer& t) {
    const double c = now();
    const double end = t.end();
    if (end <= c) return;
    const double start = t.start();
    const double moving_from = std::max(c, start);
    split_.idle += moving_from - c;
    split_.comm += end - moving_from;
    // The path through this wait leaves the rank unless the transfer started
    // now from a member ready now (this rank among the last to arrive).
    if (t.gate() >= 0 && !(start == c && t.gate_time() == c))
        jumps_.push_back(PathJump{end, t.gate_time(), t.gate()});
    gpu_->set_clock(end);
}

#if DTSIM_FRAMELESS_AWAIT
dtsim::detail::Park Device::park_on(const Transfer& t, OpCode op) {
    return world_->simulation().park(*gpu_, world_->wait_end(*this, t.record(), op));
}

Device::Waiting Device::wait(Transfer t) { return Waiting(*this, std::move(t)); }
#else
// A coroutine, so that the Wait park() keeps a reference to lives until the rank is parked.
Task<> Device::park_on(const Transfer& t, OpCode op) {
    co_await world_->simulation().park(*gpu_, world_->wait_end(*this, t.record(), op));
}

Task<> Device::wait(Transfer t) {
    if (!t.ended()) co_await park_on(t, OpCode(t.record()->op));
    block_on(t);
}
#endif

Task<bool> Device::done(Transfer t) {
    if (!t.ended()) {
        // Not known yet: it may still end by now unless it cannot end that early.
        if (world_->network_.earliest_end(t.record()) > now()) co_return false;
        world_->network_.wait_until(rank(), now());
        co_await world_->simulation().park(
            *gpu_, Wait::other(OpCode(t.record()->op), kNoLayer, "the network to reach its clock"));
    }
    co_return t.ended() && t.end() <= now();
}

TransferRecord* Device::join(Collective c, Group& g, double bytes, int layer, bool async, CommStream stream) {
    const OpCode op = ops::of(c);
    const int pos = g.position(rank());
    if (pos < 0)
        throw ScheduleError(fmt::format("rank {}: {} (layer {}) on communicator {}, which rank {} is not a member of",
                                        rank(), op.name(), layer, g.name(), rank()));
    const std::uint64_t call = g.calls_[static_cast<std::size_t>(pos)]++;
    while (g.base_ + g.rounds_.size() <= call) g.rounds_.emplace_back();
    Group::Round& round = g.rounds_[static_cast<std::size_t>(call - g.base_)];
    if (round.arrivals.empty()) {
        round.transfer = world_->network_.create();
        round.transfer->op = op.id();
        round.arrivals = world_->spare_arrivals(g.simulated());
        round.op = op;
        round.layer = layer;
        round.first_rank = rank();
    } else if (round.op != op || round.layer != layer) {
        auto describe = [](OpCode o, int l) {
            return l == kNoLayer ? fmt::format("{}", o.name()) : fmt::format("{}(layer {})", o.name(), l);
        };
        throw CollectiveMismatchError(fmt::format(
            "collective #{} on communicator {} does not match: rank {} called {} but rank {} called {}", call,
            g.name(), round.first_rank, describe(round.op, round.layer), rank(), describe(op, layer)));
    }
    TransferRecord* t = round.transfer;
    // On the collective stream it queues behind the stream's last transfer;
    // a blocking one runs on the compute stream.
    TransferRef& last = stream == CommStream::tensor ? last_tp_comm_ : last_comm_;
    round.arrivals.push_back(Arrival{rank(), now(), async ? last : nullptr});
    if (async) last = t;
    if (static_cast<int>(round.arrivals.size()) == g.simulated()) {
        // Rounds complete in call order (every member called the earlier ones
        // first), so this is the oldest open round.
        std::vector<Arrival> arrivals = std::move(round.arrivals);
        g.rounds_.pop_front();
        ++g.base_;
        world_->arm(t, g.ports_, g.weights_, g.cost(c, bytes), arrivals);
        world_->recycle_arrivals(std::move(arrivals));
    }
    return t;
}

Transfer Device::begin(Collective c, Group& g, double bytes, int layer, CommStream stream, int sms) {
    TransferRecord* t = join(c, g, bytes, layer, true, stream);
    record_transfer(ops::of(c), layer, t, bytes);
    hold_sms(c, g, bytes, stream, sms);
    return Transfer(t);
}

#if DTSIM_FRAMELESS_AWAIT
Device::Starting Device::start(Collective c, Group& g, double bytes, int layer, CommStream stream, int sms) {
    return Starting(*this, c, g, bytes, layer, stream, sms);
}
#else
Task<Transfer> Device::start(Collective c, Group& g, double bytes, int layer, CommStream stream, int sms) {
    co_return begin(c, g, bytes, layer, stream, sms);
}
#endif

// NCCL launches a collective's kernel on its stream when the host reaches it; its CTAs, one per
// channel, then occupy SMs until the collective ends, waiting for the other members included.
// Such a CTA (512-640 threads, compiled to at most 96 registers each: NCCL's makefiles/common.mk
// -maxrregcount=96, src/include/device.h) can hold most of an SM's 64K registers, so the
// kernels of the compute stream run on the other SMs meanwhile. Expected from the group's
// standalone cost rather than from the network's outcome, which the compute clock runs ahead of.
// Transformer Engine's userbuffers kernels hold the SMs their configuration gives them (a
// cooperative launch of num_sm blocks of 1,024 threads: userbuffers.cu, SETUP_LAUNCH_CONFIG), for
// as long as the group's NCCL cost of the same collective.
void Device::hold_sms(Collective c, const Group& g, double bytes, CommStream stream, int sms) {
    const GpuSpec& gpu = spec();
    const bool nccl = sms == kNcclCtas;
    if (gpu.sms <= 0 || g.size() <= 1 || (nccl && !gpu.collectives_hold_sms())) return;
    double& free = stream == CommStream::tensor ? tensor_stream_free_ : data_stream_free_;
    const CollectiveCost cost = g.cost(c, bytes);
    const double start = std::max(now(), free);
    free = start + cost.seconds;
    const int held = nccl ? cost.ctas : sms;
    if (held > 0 && free > start) holds_.push_back(SmHold{start, free, held});
}

// Every kernel of the operation at the share of SMs left, memory-bound ones too. Measured on an
// H200 beside blocks that fill 16 of its 132 SMs' shared memory (calibration/data/
// h200_dtsim_sustained.json, `held`): a Llama 3 8B block's forward and backward ran 1.17x as long
// (the share: 1.14x), GEMMs alone 1.21-1.89x; memory-bound kernels 0.98-1.08x, but their blocks
// could run beside those on the held SMs, whose registers were free (NCCL's CTAs take most).
double Device::contended(double t, double work) {
    std::erase_if(holds_, [t](const SmHold& h) { return h.end <= t; });
    if (work <= 0 || std::none_of(holds_.begin(), holds_.end(), [&](const SmHold& h) { return h.start < t + work; }))
        return work;
    const double sms = spec().sms;
    double left = work, clock = t;
    while (left > 0) {
        int taken = 0;
        double next = std::numeric_limits<double>::infinity();
        for (const SmHold& h : holds_) {
            if (h.start <= clock && clock < h.end) taken += h.ctas, next = std::min(next, h.end);
            else if (h.start > clock) next = std::min(next, h.start);
        }
        const double rate = std::max(sms - taken, 1.0) / sms;
        if (left <= (next - clock) * rate) {
            clock += left / rate;
            break;
        }
        left -= (next - clock) * rate;
        clock = next;
    }
    return clock - t;
}

void Device::end_run(const Transfer& t, Collective c, double bytes, int layer) {
    block_on(t);
    const TransferRecord* r = t.record();
    record(ops::of(c), layer, Stream::compute, r->start, r->end - r->start).bytes = bytes;
}

#if DTSIM_FRAMELESS_AWAIT
Device::Running Device::run(Collective c, Group& g, double bytes, int layer) {
    return Running(*this, c, g, bytes, layer);
}
#else
Task<Transfer> Device::run(Collective c, Group& g, double bytes, int layer) {
    const Transfer t(join(c, g, bytes, layer, false));  // held while parked: the record is not reused
    if (!t.ended()) co_await park_on(t, ops::of(c));
    end_run(t, c, bytes, layer);
    co_return t;
}
#endif

Transfer Device::send(int dst, double bytes, int tag, int layer, IdSet microbatches) {
    if (dst < 0 || dst >= world_->ranks())
        throw ScheduleError(fmt::format("rank {}: send to rank {}: destination must be in [0, {})", rank(), dst,
                                        world_->ranks()));
    TransferRecord* t = world_->network_.create();
    t->op = ops::send.id();
    const Arrival arrival{rank(), now(), last_p2p_};
    last_p2p_ = t;
    record_transfer(ops::send, layer, t, bytes, std::move(microbatches));
    const Cluster& cl = world_->cluster();
    const bool same_node = world_->node_of(rank()) == world_->node_of(dst);
    const Level l = same_node ? Level::intra_node : Level::inter_node;
    const int ports[2] = {World::tx(rank(), l), World::rx(dst, l)};
    world_->arm(t, dst == rank() ? std::span<const int>() : std::span<const int>(ports), {},
                dst == rank() ? CollectiveCost{} : p2p_cost(cl, bytes, same_node), std::span<const Arrival>(&arrival, 1));
    world_->inbox_[static_cast<std::size_t>(dst)].push_back(World::Message{rank(), tag, bytes, t});
    Device& d = world_->device(dst);
    if (d.want_src_ == rank() && d.want_tag_ == tag) {
        d.want_src_ = -1;
        world_->simulation().wake(d.engine());
    }
    return Transfer(t);
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
        co_await world_->simulation().park(*gpu_, Wait::receive(ops::recv, layer, src));
        it = find();
    }
    const Transfer tr(std::move(it->transfer));  // held while parked
    const TransferRecord* t = tr.record();
    const double bytes = it->bytes;
    inbox.erase(it);
    if (!t->ended) co_await world_->simulation().park(*gpu_, world_->wait_end(*this, t, ops::recv));
    record(ops::recv, layer, Stream::comm, t->start, t->end - t->start, std::move(microbatches)).bytes = bytes;
    block_on(tr);
}

}  // namespace dtsim::hw

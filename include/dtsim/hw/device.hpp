// A GPU of the hardware world, as a strategy coroutine drives it: a compute
// stream and a communication stream with their own clocks, collectives over
// groups that can be started now and awaited later, point-to-point transfers,
// and memory in bytes with its peak and an out-of-memory verdict.
//
//   Task<> step(Device& gpu, Group& dp) {
//       gpu.compute(hw::ops::backward, 1, 0.010);           // 10 ms on the compute stream
//       auto h = co_await gpu.all_reduce_start(dp, 25 * kMiB, 1);  // overlaps what follows
//       gpu.compute(hw::ops::backward, 0, 0.010);
//       co_await gpu.wait(h);                               // compute clock = max(clock, end)
//   }
//
// Every operation is recorded as a trace event with its stream, bytes, FLOPs
// and the rank's memory when it starts.
#pragma once

#include "dtsim/simulation.hpp"
#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/hw/group.hpp"
#include "dtsim/hw/network.hpp"

#include <array>
#include <coroutine>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtsim::hw {

class World;

// The operation names of the hardware world (trace-format.md: worlds add their own).
namespace ops {
inline const OpCode forward = dtsim::ops::forward;
inline const OpCode backward = dtsim::ops::backward;
inline const OpCode loss = dtsim::ops::loss;
inline const OpCode recompute = OpCode::of("recompute");
inline const OpCode backward_input = OpCode::of("backward_input");    // zero-bubble I (as dtsim::sched names it)
inline const OpCode backward_weight = OpCode::of("backward_weight");  // zero-bubble W
inline const OpCode embedding = OpCode::of("embedding");
inline const OpCode logits = OpCode::of("logits");
inline const OpCode optimizer = OpCode::of("optimizer");
inline const OpCode all_reduce = OpCode::of("all_reduce");
inline const OpCode all_gather = OpCode::of("all_gather");
inline const OpCode reduce_scatter = OpCode::of("reduce_scatter");
inline const OpCode broadcast = OpCode::of("broadcast");
inline const OpCode reduce = OpCode::of("reduce");
inline const OpCode send = OpCode::of("send");
inline const OpCode recv = OpCode::of("recv");
inline const OpCode model_states = OpCode::of("model_states");  // a memory label, not an event
OpCode of(Collective c);
}  // namespace ops

// A transfer: a handle on what the network knows of it. Its start and end
// are known only once the network has got that far (network.hpp); a rank
// that needs the end co_awaits Device::wait. Its start was set by the member
// that was ready last (the gate); the step's critical path continues
// backwards from `start` on the gate's compute stream at `gate_time` (earlier
// than `start` when the gate's communication stream was still busy with the
// transfers before: the path then runs back through them).
class Transfer {
public:
    Transfer() = default;  // nothing to move, ended at 0
    explicit Transfer(TransferRef r) : rec_(std::move(r)) {}
    // Nothing to move, ended at `t`.
    static Transfer at(double t) {
        Transfer x;
        x.at_ = t;
        return x;
    }
    [[nodiscard]] bool ended() const { return !rec_ || rec_->ended; }
    // Throw std::logic_error before the network has set them.
    [[nodiscard]] double start() const;
    [[nodiscard]] double end() const;
    [[nodiscard]] int gate() const { return rec_ ? rec_->gate : -1; }  // -1: no member (nothing to wait for)
    [[nodiscard]] double gate_time() const { return rec_ ? rec_->gate_time : at_; }
    [[nodiscard]] const TransferRecord* record() const { return rec_.get(); }

private:
    TransferRef rec_;  // keeps the record from reuse
    double at_ = 0;
};

// Where a rank's step time went. compute + comm + idle = step time once the run ends.
struct TimeSplit {
    double compute = 0;  // busy on the compute stream
    double comm = 0;     // blocked on a transfer that was moving (exposed communication)
    double idle = 0;     // blocked waiting for other ranks (bubbles, stragglers, the tail)
};

// What an allocation holds, for the breakdown of a peak (MemoryEvent::by_kind).
enum class MemoryKind : std::uint8_t {
    weights,      // the rank's weights, sharded or gathered, and cached fp8 copies
    gradients,    // gradients held, accumulated or awaiting their reduce-scatter
    optimizer,    // Adam's moments and master weights
    activations,  // what the forward keeps for the backward, recompute and the loss's tensors
    buffers,      // communication buffers (DDP's gradient buckets)
};
inline constexpr std::size_t kMemoryKinds = 5;
// "weights", "gradients", "optimizer", "activations", "buffers".
std::string_view kind_name(MemoryKind k);
using MemoryParts = std::array<double, kMemoryKinds>;  // bytes by MemoryKind

struct MemoryEvent {
    double bytes = 0;
    double time = 0;
    OpCode op;
    int layer = kNoLayer;
    MemoryParts by_kind{};  // `bytes` by what it holds
};

struct MemoryStats {
    double current = 0;
    MemoryParts current_by_kind{};
    MemoryEvent peak;                 // the largest `current` and the allocation that reached it
    std::optional<MemoryEvent> oom;   // the first allocation past capacity
};

// The asynchronous collective streams of a rank (Device::start).
enum class CommStream : std::uint8_t { data, tensor };
// The SMs a collective's kernel holds as NCCL's do, one per channel (Device::start).
inline constexpr int kNcclCtas = -1;

class Device {
public:
    Device(World& world, Gpu& gpu);
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    [[nodiscard]] int rank() const { return gpu_->rank(); }
    [[nodiscard]] World& world() const { return *world_; }
    [[nodiscard]] const Cluster& cluster() const;
    [[nodiscard]] const GpuSpec& spec() const;
    [[nodiscard]] Gpu& engine() const { return *gpu_; }
    // The compute stream's clock.
    [[nodiscard]] double now() const { return gpu_->clock(); }

    // ---- compute stream: each call advances the compute clock.
    void compute(OpCode op, int layer, double seconds, double flops = 0, IdSet microbatches = {},
                 double bytes = 0);
    // `count` GEMMs (m x k)(k x n) priced by the GPU's GEMM model.
    void gemm(OpCode op, int layer, double m, double n, double k, DType dtype, double count = 1,
              IdSet microbatches = {});
    // Memory-bound work moving `bytes` through HBM.
    void memory_bound(OpCode op, int layer, double bytes, IdSet microbatches = {});

    // ---- memory, in bytes. `op` and `layer` name the allocation in the peak and OOM verdicts;
    // `kind` says what it holds. One allocation may hold several kinds (the model states).
    void allocate(double bytes, MemoryKind kind, OpCode op, int layer = kNoLayer);
    void allocate(const MemoryParts& parts, OpCode op, int layer = kNoLayer);
    void release(double bytes, MemoryKind kind);
    [[nodiscard]] double memory() const { return memory_.current; }
    [[nodiscard]] const MemoryStats& memory_stats() const { return memory_; }
    // Where the world records events: the memory by kind, as samples of a time (the compute clock)
    // and the kMemoryKinds amounts (RankTrace::memory_by_kind): per moment of change, what is held
    // after it, preceded by the moment's highest where that was more.
    [[nodiscard]] const std::vector<double>& memory_log() const { return memory_log_; }

    // ---- collectives over a group; every member makes the same calls in the same order.
    // Asynchronous: runs on the communication stream once every member's data
    // and stream are ready, sharing its links with what else moves on them.
    // Never suspends (NCCL's launch does not wait for the other members); the
    // compute clock does not move. A member that never calls it leaves the
    // transfer unstarted: whoever waits for it is a deadlock, and a run that
    // ends with it is an error.
    // `stream`: the data-parallel and pipeline collectives share one (NCCL's stream); tensor
    // parallelism's overlapped collectives have their own (Transformer Engine's userbuffers), so
    // they do not queue behind a gradient reduction.
    // `sms`: the SMs its kernel holds from the compute stream while it runs: kNcclCtas, NCCL's
    // CTAs, one per channel (where GpuSpec::collectives_take_sms), or as many as given
    // (Transformer Engine's userbuffers: UbSms::held; 0 for copies by the copy engines and for
    // SMs the GEMM leaves by a margin).
    //
    // start(), wait() and run() are awaited at once (`co_await gpu.run(...)`), and do their work
    // when awaited. On the engine's fast path (DTSIM_FRAMELESS_AWAIT) they return awaiters that
    // live in the awaiting coroutine's frame (Starting, Waiting, Running, below): a rank's
    // collectives take no coroutine frame of their own. Otherwise they are coroutines.
#if DTSIM_FRAMELESS_AWAIT
    class Starting;
    class Waiting;
    class Running;
#else
    using Starting = Task<Transfer>;
    using Waiting = Task<>;
    using Running = Task<Transfer>;
#endif
    Starting start(Collective c, Group& g, double bytes, int layer = kNoLayer, CommStream stream = CommStream::data,
                   int sms = kNcclCtas);
    // (Not a flag: true would hold one SM.)
    Starting start(Collective c, Group& g, double bytes, int layer, CommStream stream, bool sms) = delete;
    Starting all_reduce_start(Group& g, double bytes, int layer = kNoLayer) {
        return start(Collective::all_reduce, g, bytes, layer);
    }
    Starting all_gather_start(Group& g, double bytes, int layer = kNoLayer) {
        return start(Collective::all_gather, g, bytes, layer);
    }
    Starting reduce_scatter_start(Group& g, double bytes, int layer = kNoLayer) {
        return start(Collective::reduce_scatter, g, bytes, layer);
    }
    // The compute stream waits for a transfer: clock = max(clock, end).
    // Suspends until the network knows the end.
    Waiting wait(Transfer t);
    // Whether `t` has ended by the compute clock; may suspend until the
    // network has reached the clock (every end before it known).
    Task<bool> done(Transfer t);

    // Blocking, on the compute stream (as Megatron's tensor-parallel
    // all-reduces): starts when every member's compute stream reaches it; the
    // rank suspends until the network knows its end, and the compute clock
    // moves there.
    Running run(Collective c, Group& g, double bytes, int layer = kNoLayer);
    Running all_reduce(Group& g, double bytes, int layer = kNoLayer) {
        return run(Collective::all_reduce, g, bytes, layer);
    }
    Running all_gather(Group& g, double bytes, int layer = kNoLayer) {
        return run(Collective::all_gather, g, bytes, layer);
    }
    Running reduce_scatter(Group& g, double bytes, int layer = kNoLayer) {
        return run(Collective::reduce_scatter, g, bytes, layer);
    }

#if DTSIM_FRAMELESS_AWAIT
    // start(): joins the collective and starts it when awaited; never suspends.
    class Starting {
    public:
        using dtsim_awaiter = void;
        using dtsim_awaited_at_once = void;
        Starting(Device& d, Collective c, Group& g, double bytes, int layer, CommStream stream, int sms)
            : d_(&d), g_(&g), bytes_(bytes), layer_(layer), sms_(sms), c_(c), stream_(stream) {}
        bool await_ready() const noexcept { return true; }
        void await_suspend(std::coroutine_handle<>) const noexcept {}
        Transfer await_resume() { return d_->begin(c_, *g_, bytes_, layer_, stream_, sms_); }

    private:
        Device* d_;
        Group* g_;
        double bytes_;
        int layer_, sms_;
        Collective c_;
        CommStream stream_;
    };
    // wait(): parks the rank until the network knows the transfer's end, unless it does already.
    class Waiting {
    public:
        using dtsim_awaiter = void;
        using dtsim_awaited_at_once = void;
        Waiting(Device& d, Transfer t) : d_(&d), t_(std::move(t)) {}
        bool await_ready() const noexcept { return t_.ended(); }
        template <class P>
        void await_suspend(std::coroutine_handle<P> h) {
            d_->park_on(t_, OpCode(t_.record()->op)).await_suspend(h);
        }
        void await_resume() { d_->block_on(t_); }

    private:
        Device* d_;
        Transfer t_;  // held while parked: the record is not reused
    };
    // run(): joins the collective when awaited and parks the rank until the network knows its end.
    class Running {
    public:
        using dtsim_awaiter = void;
        using dtsim_awaited_at_once = void;
        Running(Device& d, Collective c, Group& g, double bytes, int layer)
            : d_(&d), g_(&g), bytes_(bytes), layer_(layer), c_(c) {}
        bool await_ready() {
            t_ = Transfer(d_->join(c_, *g_, bytes_, layer_, false));
            return t_.ended();
        }
        template <class P>
        void await_suspend(std::coroutine_handle<P> h) {
            d_->park_on(t_, ops::of(c_)).await_suspend(h);
        }
        Transfer await_resume() {
            d_->end_run(t_, c_, bytes_, layer_);
            return std::move(t_);
        }

    private:
        Device* d_;
        Group* g_;
        double bytes_;
        int layer_;
        Collective c_;
        Transfer t_;  // held while parked: the record is not reused
    };
#endif

    // ---- point to point. `send` is eager (an isend): the transfer starts when
    // this rank's data and its send stream are ready, and the sender goes on
    // at once. `recv` suspends until a message from `src` with `tag` has been
    // sent (messages of one (src, tag) arrive in order) and the network knows
    // when it arrives; the compute clock moves there.
    Transfer send(int dst, double bytes, int tag, int layer = kNoLayer, IdSet microbatches = {});
    Task<> recv(int src, int tag, int layer = kNoLayer, IdSet microbatches = {});

    [[nodiscard]] const TimeSplit& time_split() const { return split_; }
    // FLOPs this rank executed (recompute included).
    [[nodiscard]] double flops() const { return flops_; }
    // Events this rank recorded.
    [[nodiscard]] std::size_t events() const { return events_; }
    // The factor on this rank's compute durations (stragglers; 1 by default).
    [[nodiscard]] double slowdown() const { return slowdown_; }
    // Compute operations this rank ran (the jitter's operation index).
    [[nodiscard]] std::uint64_t compute_ops() const { return compute_ops_; }

private:
    friend class World;
    // Joins this rank's next collective on `g`: the transfer of its round
    // (armed by the last member to join). Never suspends.
    TransferRecord* join(Collective c, Group& g, double bytes, int layer, bool async,
                         CommStream stream = CommStream::data);
    // start()'s work: joins, records the operation on the communication stream, holds SMs.
    Transfer begin(Collective c, Group& g, double bytes, int layer, CommStream stream, int sms);
    // run()'s end, once `t` has ended: the compute stream blocks on it and records the operation.
    void end_run(const Transfer& t, Collective c, double bytes, int layer);
    // Parks this rank until the network knows when `t` ends (its wait described as `op`'s).
#if DTSIM_FRAMELESS_AWAIT
    dtsim::detail::Park park_on(const Transfer& t, OpCode op);
#else
    Task<> park_on(const Transfer& t, OpCode op);
#endif
    // The compute stream blocks until `t` (ended) ends: split the wait into
    // idle and comm, and remember where the critical path jumps when it passes here.
    void block_on(const Transfer& t);
    // The event kept in the rank's log; in a world that records nothing, the world's one scratch
    // event, shared by every rank: fill it at once, never hold it across a co_await.
    Event& record(OpCode op, int layer, Stream stream, double start, double duration, IdSet batches = {});
    // A collective started on `stream` at the compute clock: when its kernel is expected to run
    // (from the clock, or once the stream's previous kernel is expected to end, for the group's
    // standalone cost) and the hold of its `sms` (start).
    void hold_sms(Collective c, const Group& g, double bytes, CommStream stream, int sms);
    // How long `work` seconds of compute starting at `t` take on the SMs the holds leave.
    double contended(double t, double work);
    // Records an operation of `t` on the communication stream; its times are
    // patched in when the network knows them.
    void record_transfer(OpCode op, int layer, const TransferRecord* t, double bytes, IdSet batches = {});

    // What a rank touches at nearly every event first (its time split and counts, the streams'
    // last transfers, the holds, the path's jumps, the memory in use), then the rest.
    World* world_;
    Gpu* gpu_;
    TimeSplit split_;
    double flops_ = 0;
    std::size_t events_ = 0;
    double slowdown_ = 1;
    std::uint64_t compute_ops_ = 0;
    // The last transfer on each stream (FIFO: the next starts after it ends).
    TransferRef last_comm_;     // collective stream
    TransferRef last_tp_comm_;  // the tensor-parallel overlap's stream
    TransferRef last_p2p_;   // send stream
    // The collectives' kernels expected to hold SMs from `start` to `end` (hold_sms), and when each
    // asynchronous stream's last kernel is expected to end.
    struct SmHold {
        double start, end;
        int ctas;
    };
    std::vector<SmHold> holds_;
    double data_stream_free_ = 0, tensor_stream_free_ = 0;
    // The compute stream's waits that the critical path jumps over: when the
    // clock moved to `resume`, the path continues on `gate` at `gate_time`.
    struct PathJump {
        double resume;
        double gate_time;
        int gate;
    };
    std::vector<PathJump> jumps_;
    void log_memory();

    MemoryStats memory_;
    std::vector<double> memory_log_;
    // recv: what this rank waits for
    int want_src_ = -1;
    int want_tag_ = 0;
};

}  // namespace dtsim::hw

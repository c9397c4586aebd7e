// The eight puzzle strategies as per-rank programs that dtsim-puzzle-real executes on GPUs.
// A program is what a rank of the strategy did, recorded by running the strategy itself
// (puzzles/<name>.hpp, the source `dtsim puzzle` runs) on the dtsim engine with the model of
// puzzle_model.hpp: the puzzle's operations in the strategy's order, plus what a real run
// needs besides: which buffer each operation reads and creates, and where buffers are freed.
// No CUDA here; unit-tested against tests/data/golden and the puzzle world on the CPU.
#pragma once

#include "dtsim/id_set.hpp"
#include "dtsim/trace.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::harness {

struct ModelDims {
    int layers = 0;
    int batches = 0;
    int ranks = 1;
    std::int64_t hidden = 512;  // the puzzle's HIDDEN: a layer weight is hidden x hidden
    std::int64_t tokens = 256;  // the puzzle's LENGTH: tokens per batch

    // Elements of a complete weight buffer: hidden*hidden rounded up to a multiple of
    // `ranks`, so that NCCL can split it into equal shards (the padding stays zero).
    [[nodiscard]] std::int64_t full_weight_elems() const;
    [[nodiscard]] std::int64_t weight_elems() const { return hidden * hidden; }
    [[nodiscard]] std::int64_t batch_elems() const { return tokens * hidden; }
};

enum class Op : std::uint8_t {
    load_weights,    // outs {weight, opt_state}: initialise the held shard, zero Adam's moments
    get_activation,  // outs {activation}: the input rows of `batches`
    fake_grad,       // outs {weight_grad}: a zero gradient (pipeline_fsdp's empty_grad)
    forward,         // ins {act, weight}; outs {act of layer+1}
    backward,        // ins {act, act_grad, weight}; outs {weight_grad, act_grad of layer-1}
    loss,            // ins {act of LAYERS}; outs {act_grad}
    update,          // ins {weight_grad, weight, opt_state}: Adam, in place on the held shard
    accumulate,      // ins {a, b}: a += b (the puzzle's WeightGrad `+`), no event
    allreduce,       // ins {buffer}: sum over all ranks, in place
    allgather,       // ins {shard}; outs {complete}
    scatterreduce,   // ins {complete}; outs {shard}: reduce-scatter, rank r keeps shard r
    send,            // ins {buffer} to `peer` (the puzzle's pass_to)
    recv,            // outs {buffer} from `peer` (the puzzle's receive)
    release,         // ins {buffer}: free it (no store holds it any more)
    set_final,       // ins {weight}: the final weight of `layer` (shard `shard` of `shards`), no event
};
std::string_view op_name(Op op);
// The event the operation logs in a trace ("pass" for send and recv), or empty.
std::string_view event_op(Op op);
[[nodiscard]] bool is_collective(Op op);
[[nodiscard]] bool is_communication(Op op);

enum class BufferKind : std::uint8_t { weight, opt_state, activation, activation_grad, weight_grad };
std::string_view buffer_kind_name(BufferKind k);

struct Buffer {
    BufferKind kind = BufferKind::weight;
    std::int64_t elems = 0;  // fp32 elements
};

// What a value is, without its buffer: what a pass carries from rank to rank and what a
// collective's members contribute (the sends and receives of two ranks must pair up).
struct Wire {
    BufferKind kind = BufferKind::weight;
    int layer = 0;
    IdSet batches;
    IdSet shards;
    int total = 1;
    int step = 0;
    std::int64_t elems = 0;
    friend bool operator==(const Wire&, const Wire&) = default;
};

struct Instr {
    Op op = Op::release;
    int layer = -1;            // the model layer (-1: none); loss: LAYERS
    std::vector<int> batches;  // forward, backward, get_activation
    std::vector<int> outs;     // buffers created: the executor allocates them just before the op
    std::vector<int> ins;      // buffers read (in-place operations also write them)
    int peer = -1;             // send: destination; recv: source
    int shard = 0;             // load_weights, update, set_final: which shard of the weight is held
    int shards = 1;            //   ... out of how many
    int step = 0;              // set_final: the weight's optimizer step
    std::int64_t grad_offset = 0;  // update: where the held shard starts inside the gradient buffer
    std::optional<Wire> message;   // send, recv: what travels
    double puzzle_memory = 0;  // the puzzle world's memory (units) when the operation starts
    std::int64_t live_bytes = 0;  // bytes of live buffers when it starts, before its outputs exist
};

// The event an instruction logs: layer (none for update and pass) and batches (forward and backward only).
std::optional<int> event_layer(const Instr& i);
std::vector<int> event_batches(const Instr& i);

struct RankProgram {
    int rank = 0;
    std::vector<Buffer> buffers;  // indexed by the ids in Instr::ins/outs
    std::vector<Instr> instrs;
};

// Sizes a strategy cannot run on GPUs with (unknown puzzle too): throws ArgError
// (host/cli.hpp) naming the size and the constraint: the tool's own (at least one layer,
// batch and rank, --hidden and --tokens) and the strategy's (puzzles/all.hpp: ddp needs
// batches == ranks, say).
void validate_dims(std::string_view puzzle, const ModelDims& dims);

// Runs the strategy `puzzle` (a name of puzzles/all.hpp's list) for every rank on the
// dtsim engine with the recording model and returns the ranks' programs, checked by
// check_programs. Throws ArgError for sizes validate_dims refuses, dtsim::ScheduleError
// (naming rank, operation and layer) when the strategy breaks a rule or deadlocks.
std::vector<RankProgram> build_programs(std::string_view puzzle, const ModelDims& dims);

// Cross-rank checks (throw dtsim::ScheduleError): the k-th collective of every rank is the
// same operation on the same layer and size; the sends from a to b pair up with b's
// receives from a; the ranks cannot deadlock even if every send waits for its receive (as
// NCCL's may: the engine's mailboxes hold a message, so a schedule that relies on that
// completes there); and, as the puzzle's check, every layer's final weights have step 1
// and together cover every shard.
void check_programs(const std::vector<RankProgram>& programs, const ModelDims& dims);

// Where and when a logged operation ran on a GPU.
struct EventTiming {
    double start = 0;     // seconds since the run's common origin
    double duration = 0;  // seconds
    double memory = 0;    // bytes of live tensors when it started, before its outputs were allocated
};

// The measured run as a dtsim trace of the hardware world (time_unit "s", memory_unit
// "byte"): for every rank, one event per logged instruction of its program, in order,
// timed by timings[rank][k], with its stream (compute or comm), its FLOPs (GEMMs) or bytes
// (communication); the summary computed from the events, `correct` as given.
Trace measured_trace(const std::vector<RankProgram>& programs, const ModelDims& dims,
                     const std::vector<std::vector<EventTiming>>& timings, nlohmann::json meta,
                     std::optional<bool> correct);

}  // namespace dtsim::harness

// The trace: every operation every rank performed, with its start, duration and
// the rank's memory when it started. This is the in-memory form of the trace
// JSON (docs/trace-format.md); the renderer, the exporters and the CLI
// read only this type.
#pragma once

#include "dtsim/errors.hpp"
#include "dtsim/id_set.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim {

// Operation names are interned: an event stores a 16-bit code, the name lives once.
class OpCode {
public:
    constexpr OpCode() = default;
    // Interns `name` (any string; the puzzle ops below have fixed codes).
    static OpCode of(std::string_view name);
    [[nodiscard]] std::string_view name() const;
    [[nodiscard]] constexpr std::uint16_t id() const { return id_; }
    friend constexpr bool operator==(OpCode, OpCode) = default;

    constexpr explicit OpCode(std::uint16_t id) : id_(id) {}

private:
    std::uint16_t id_ = 0;
};

namespace ops {
// Puzzle-world operations (trace-format.md fixes these names).
inline constexpr OpCode forward{0}, backward{1}, loss{2}, update{3}, allreduce{4}, allgather{5},
    scatterreduce{6}, pass{7};
}  // namespace ops

// What kind of work an operation is; drives colours and time accounting.
enum class OpKind : std::uint8_t { compute, update, collective, p2p, other };
OpKind op_kind(OpCode op);

enum class Stream : std::uint8_t { compute = 0, comm = 1 };

inline constexpr std::int32_t kNoLayer = -1;

// 64 bytes and aligned to 64: one cache line per recorded operation, so that
// appending an event touches a single line.
struct alignas(64) Event {
    OpCode op;
    Stream stream = Stream::compute;
    std::int32_t layer = kNoLayer;  // kNoLayer where the operation has none (JSON null)
    double start = 0;
    double duration = 0;
    double memory = 0;  // rank's memory when the event starts, before its result is stored
    IdSet batches;      // batch / microbatch ids (forward, backward)
    double bytes = 0;   // hardware world: bytes moved (0 = not recorded)
    double flops = 0;   // hardware world: FLOPs performed (0 = not recorded)

    [[nodiscard]] double end() const { return start + duration; }
};

static_assert(sizeof(IdSet) == 8 && sizeof(Event) == 64, "Event should fill one cache line");

struct RankTrace {
    int rank = 0;
    std::vector<Event> events;
    // How the rank's memory divides among Trace::memory_kinds over time, where the run records it
    // (the hardware world): samples of 1 + kinds numbers, a time and then the amount of each kind,
    // times never decreasing. A sample holds from its time until the next one's; before the first
    // the rank holds nothing. Empty where not recorded.
    std::vector<double> memory_by_kind;
};

struct Summary {
    double timesteps = 0;  // max over ranks of the start of the rank's last event
    double makespan = 0;   // end of the last event
    double max_memory = 0;
    int max_memory_rank = 0;
    double max_memory_time = 0;
    std::optional<bool> correct;  // absent when the run has no correctness check
};

struct Trace {
    std::string time_unit = "step";    // "step" (puzzle world) or "s"
    std::string memory_unit = "unit";  // "unit" (puzzle world) or "byte"
    nlohmann::json meta = nlohmann::json::object();
    Summary summary;
    std::optional<double> memory_capacity;  // per-GPU capacity, when known
    // What RankTrace::memory_by_kind divides memory into ("weights", "gradients", ...); empty where
    // the run does not say.
    std::vector<std::string> memory_kinds;
    std::vector<RankTrace> ranks;

    [[nodiscard]] std::size_t event_count() const;
    // The samples of `r`'s memory_by_kind: 0 where the trace names no kinds.
    [[nodiscard]] std::size_t memory_samples(const RankTrace& r) const {
        return memory_kinds.empty() ? 0 : r.memory_by_kind.size() / (1 + memory_kinds.size());
    }
    // Whether `r`'s memory_by_kind is whole samples (always, where the trace names no kinds: then
    // it is not read).
    [[nodiscard]] bool whole_memory_samples(const RankTrace& r) const {
        return memory_kinds.empty() || r.memory_by_kind.size() % (1 + memory_kinds.size()) == 0;
    }
};

// Timesteps, makespan and maximum memory (first in rank order, then event order)
// computed from the events; `correct` is left untouched.
void summarize(Trace& trace);

// One rank's share of the summary, folded event by event in the rank's order:
// summarize() folds a trace's events, a rank folds them as they are recorded
// (Gpu::summary; a world that completes events afterwards uses summarize()).
struct RankSummary {
    std::size_t events = 0;
    double last_start = 0;       // start of the last event
    double makespan = 0;         // latest end
    double max_memory = 0;       // the first event with the highest memory...
    double max_memory_time = 0;  // ...and its start
    friend bool operator==(const RankSummary&, const RankSummary&) = default;
    void add(double start, double end, double memory) {
        last_start = start;
        makespan = std::max(makespan, end);
        if (events++ == 0 || memory > max_memory) {
            max_memory = memory;
            max_memory_time = start;
        }
    }
};

// The summary, folded from the ranks' shares in rank order.
struct SummaryFold {
    Summary summary;
    bool have_memory = false;
    void add_rank(int rank, const RankSummary& r) {
        if (r.events == 0) return;
        summary.timesteps = std::max(summary.timesteps, r.last_start);
        summary.makespan = std::max(summary.makespan, r.makespan);
        if (!have_memory || r.max_memory > summary.max_memory) {
            have_memory = true;
            summary.max_memory = r.max_memory;
            summary.max_memory_rank = rank;
            summary.max_memory_time = r.max_memory_time;
        }
    }
};

// A failed run hands over what it did up to the failure (ScheduleError::partial_trace): `fill`
// writes the trace of what ran, which is then marked as failed (summary correct: false, meta
// "error": the message). Where that cannot be done (no memory left), the error stays as it was.
template <class Fill>
void attach_partial_trace(ScheduleError& e, Fill&& fill) noexcept {
    try {
        auto t = std::make_shared<Trace>();
        fill(*t);
        t->summary.correct = false;
        t->meta["error"] = e.what();
        e.partial_trace = std::move(t);
    } catch (...) {
    }
}

}  // namespace dtsim

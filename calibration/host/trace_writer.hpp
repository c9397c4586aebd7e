// The measured run as a dtsim trace (shared/spec/trace-format.md, version 1) in the
// hardware world: time_unit "s", memory_unit "byte". This writer is standalone (it needs
// only nlohmann_json) so that the harness builds without the simulator's libraries;
// dtsim's own reader (sim/trace_io.cpp) reads what it writes.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace dtsim::calib {

struct TraceEvent {
    std::string op;              // the puzzle's names: forward, backward, loss, update, allreduce, allgather, scatterreduce, pass
    std::optional<int> layer;    // JSON null where the operation has none
    double start = 0;            // seconds since the run's common origin
    double duration = 0;         // seconds
    double memory = 0;           // bytes held by the harness on this GPU when the event starts
    std::vector<int> batches;
    std::string stream;          // "compute" or "comm"
    double bytes = 0;            // bytes moved (communication), 0 = not recorded
    double flops = 0;            // floating-point operations (compute), 0 = not recorded
};

struct RankEvents {
    int rank = 0;
    std::vector<TraceEvent> events;
};

struct TraceSummary {
    double timesteps = 0;  // max over ranks of the start of the rank's last event
    double makespan = 0;   // end of the last event
    double max_memory = 0;
    int max_memory_rank = 0;
    double max_memory_time = 0;
};

// Maximum memory: the first largest in rank order, then event order (puzzle-semantics.md).
TraceSummary summarize(const std::vector<RankEvents>& ranks);

// The whole trace document. `meta` is written as given (puzzle, layers, batches, ranks,
// gpu, source "measured", ...); `correct` is omitted when absent.
nlohmann::json trace_json(const nlohmann::json& meta, const std::vector<RankEvents>& ranks,
                          std::optional<bool> correct);

// Writes `doc` to `path` (indented, trailing newline). Throws std::runtime_error naming the path.
void write_json_file(const std::string& path, const nlohmann::json& doc);

}  // namespace dtsim::calib

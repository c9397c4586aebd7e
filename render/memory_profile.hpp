// A rank's memory over time as a step function: each event's memory from its
// start until the next event starts (the last until the rank's last end).
#pragma once

#include "dtsim/trace.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dtsim::render::detail {

struct MemoryStep {
    double t0 = 0;
    double t1 = 0;
    double value = 0;
};

// Steps in time order, zero-length steps left out and neighbours with equal
// values merged. Events are ordered by start, ties kept in trace order.
std::vector<MemoryStep> memory_steps(const RankTrace& rank);

// Sample i of a rank's memory by kind (Trace::memory_kinds): its time, and the amount of each kind.
struct KindSample {
    double time = 0;
    const double* parts = nullptr;  // Trace::memory_kinds.size() amounts
    double total = 0;
};
KindSample kind_sample(const Trace& trace, const RankTrace& rank, std::size_t i);

// Whether a sample can be drawn: its time a finite number >= 0, its amounts >= 0 and their total finite.
bool drawable(const Trace& trace, const KindSample& s);

// The rank's sample with the largest total, the first of them in time; nullopt where it has none.
std::optional<std::size_t> largest_kind_sample(const Trace& trace, const RankTrace& rank);

// "weights 14.9 GiB, optimizer 14.9 GiB, activations 64 MiB": the kinds held in a sample (those
// above 0), in the trace's order of kinds.
std::string kind_parts_text(const Trace& trace, const KindSample& s, bool bytes);

}  // namespace dtsim::render::detail

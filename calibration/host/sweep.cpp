#include "host/sweep.hpp"

#include "host/cli.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>

namespace dtsim::harness {
namespace {

struct CollectiveName {
    Collective c;
    std::string_view name;
    std::string_view alias1;
    std::string_view alias2;
};
constexpr std::array<CollectiveName, 4> kCollectives{{
    {Collective::all_reduce, "all_reduce", "allreduce", "all-reduce"},
    {Collective::all_gather, "all_gather", "allgather", "all-gather"},
    {Collective::reduce_scatter, "reduce_scatter", "reducescatter", "reduce-scatter"},
    {Collective::sendrecv, "sendrecv", "send_recv", "send-recv"},
}};

constexpr std::array<DataType, 7> kTypes{{
    {"float", 4, 16777216.0},
    {"half", 2, 2048.0},
    {"bfloat16", 2, 256.0},
    {"double", 8, 9007199254740992.0},
    {"int32", 4, 2147483647.0},
    {"int8", 1, 127.0},
    {"uint8", 1, 255.0},
}};

std::string time_text(double us) { return us < 10000.0 ? fmt::format("{:7.2f}", us) : fmt::format("{:7.0f}", us); }

std::string columns(const std::optional<SweepRow>& r) {
    if (!r) return fmt::format("  {:>7}  {:>6}  {:>6}  {:>6}", "-", "-", "-", "-");
    return fmt::format("  {}  {:6.2f}  {:6.2f}  {:>6}", time_text(r->time_us), r->algbw_GBps, r->busbw_GBps,
                       r->wrong ? fmt::format("{}", *r->wrong) : std::string("N/A"));
}

}  // namespace

std::string_view collective_name(Collective c) {
    for (const auto& n : kCollectives)
        if (n.c == c) return n.name;
    return "?";
}

Collective parse_collective(std::string_view name) {
    for (const auto& n : kCollectives)
        if (name == n.name || name == n.alias1 || name == n.alias2) return n.c;
    throw ArgError(fmt::format(
        "--ops: unknown collective '{}'; the collectives are: all_reduce, all_gather, reduce_scatter, sendrecv", name));
}

std::string format_bytes(std::uint64_t bytes) {
    static constexpr std::string_view units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    std::size_t u = 0;
    while (u + 1 < std::size(units) && bytes != 0 && bytes % 1024 == 0) {
        bytes /= 1024;
        ++u;
    }
    return fmt::format("{} {}", bytes, units[u]);
}

std::vector<Collective> all_collectives() {
    return {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter, Collective::sendrecv};
}

double bus_bandwidth_factor(Collective c, int nranks) {
    const double n = nranks;
    switch (c) {
        case Collective::all_reduce: return 2.0 * (n - 1.0) / n;
        case Collective::all_gather:
        case Collective::reduce_scatter: return (n - 1.0) / n;
        case Collective::sendrecv: return 1.0;
    }
    return 1.0;
}

DataType parse_dtype(std::string_view name) {
    std::string_view canonical = name;
    if (name == "fp32" || name == "float32") canonical = "float";
    if (name == "fp16" || name == "float16") canonical = "half";
    if (name == "bf16") canonical = "bfloat16";
    if (name == "fp64" || name == "float64") canonical = "double";
    if (name == "int") canonical = "int32";
    for (const auto& t : kTypes)
        if (t.name == canonical) return t;
    throw ArgError(fmt::format(
        "--dtype: unknown data type '{}'; the types are: float, half, bfloat16, double, int32, int8, uint8", name));
}

std::vector<std::uint64_t> size_sweep(std::uint64_t min_bytes, std::uint64_t max_bytes, std::uint64_t step_factor) {
    if (min_bytes == 0) throw ArgError("--min-bytes must be at least 1");
    if (min_bytes > max_bytes)
        throw ArgError(fmt::format("--min-bytes ({}) is larger than --max-bytes ({})", min_bytes, max_bytes));
    if (step_factor < 2) throw ArgError(fmt::format("--step-factor must be at least 2, got {}", step_factor));
    std::vector<std::uint64_t> out;
    for (std::uint64_t s = min_bytes;;) {
        out.push_back(s);
        if (s > max_bytes / step_factor) break;  // s * f would pass max (or overflow)
        s *= step_factor;
    }
    return out;
}

SweepPoint sweep_point(Collective c, std::uint64_t requested_bytes, std::size_t type_size, int nranks) {
    SweepPoint p;
    const std::uint64_t count = requested_bytes / type_size;
    const auto n = static_cast<std::uint64_t>(nranks);
    switch (c) {
        case Collective::all_reduce:
        case Collective::sendrecv:
            p.count = count;
            p.send_count = count;
            p.recv_count = count;
            p.size_bytes = count * type_size;
            break;
        case Collective::all_gather:
            p.count = count / n;
            p.send_count = p.count;
            p.recv_count = p.count * n;
            p.size_bytes = p.recv_count * type_size;
            break;
        case Collective::reduce_scatter:
            p.count = count / n;
            p.send_count = p.count * n;
            p.recv_count = p.count;
            p.size_bytes = p.send_count * type_size;
            break;
    }
    return p;
}

SweepRow make_row(Collective c, const SweepPoint& p, double seconds, int nranks) {
    SweepRow r;
    r.size_bytes = static_cast<double>(p.size_bytes);
    r.count = static_cast<double>(p.count);
    r.time_us = seconds * 1e6;
    r.algbw_GBps = seconds > 0 ? r.size_bytes / 1e9 / seconds : 0.0;
    r.busbw_GBps = r.algbw_GBps * bus_bandwidth_factor(c, nranks);
    return r;
}

nlohmann::json row_json(const SweepRow& row) {
    // Rounded as nccl-tests prints them; sizes and counts are exact in a double.
    const auto round2 = [](double v) { return std::round(v * 100.0) / 100.0; };
    nlohmann::json j = nlohmann::json::object();
    j["size_bytes"] = row.size_bytes;
    j["count"] = row.count;
    j["time_us"] = round2(row.time_us);
    j["algbw_GBps"] = round2(row.algbw_GBps);
    j["busbw_GBps"] = round2(row.busbw_GBps);
    return j;
}

double check_value_for_rank(int rank) { return static_cast<double>(rank % 4 + 1); }

double expected_reduce_sum(int nranks) {
    double sum = 0;
    for (int r = 0; r < nranks; ++r) sum += check_value_for_rank(r);
    return sum;
}

bool check_is_exact(const DataType& dtype, int nranks) { return expected_reduce_sum(nranks) <= dtype.exact_integer_limit; }

std::string table_header(bool out_of_place, bool in_place) {
    std::string out;
    out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>30}  {:>30}\n", "", "", "", "",
                       out_of_place ? "out-of-place" : "", in_place ? "in-place" : "");
    out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
                       "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
                       "#wrong");
    out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
                       "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    return out;
}

std::string table_row(std::uint64_t size_bytes, std::uint64_t count, std::string_view type, std::string_view redop,
                      const std::optional<SweepRow>& out_of_place, const std::optional<SweepRow>& in_place) {
    return fmt::format("{:>12}  {:>12}  {:>8}  {:>6}{}{}\n", size_bytes, count, type, redop, columns(out_of_place),
                       columns(in_place));
}

nlohmann::json sweep_json(const nlohmann::json& meta, const SweepHardware& hw, const std::vector<SweepDataset>& datasets) {
    nlohmann::json out = nlohmann::json::object();
    out["description"] =
        "nccl-tests-style measurements taken by dtsim-collectives (calibration/README.md). busbw = algbw * factor: "
        "all_reduce 2(n-1)/n, reduce_scatter and all_gather (n-1)/n, sendrecv 1 (nccl-tests doc/PERFORMANCE.md). "
        "For reduce_scatter and all_gather size_bytes is the whole array (per-rank count x type size x n) and count "
        "is per rank. time_us is the mean over ranks of each rank's mean iteration time, timed with CUDA events.";
    out["meta"] = meta;
    nlohmann::json list = nlohmann::json::array();
    for (const auto& d : datasets) {
        nlohmann::json ds = nlohmann::json::object();
        const std::string placement = d.in_place ? "in-place" : "out-of-place";
        // The group in the id: sweeps of several machines can be calibrated together.
        ds["id"] = fmt::format("measured-{}x{}-{}-{}", hw.nodes, hw.gpus_per_node, collective_name(d.collective),
                               placement);
        ds["source"] = "measured: dtsim-collectives (this file's meta.command)";
        nlohmann::json h = nlohmann::json::object();
        h["gpu"] = hw.gpu;
        h["gpus_per_node"] = hw.gpus_per_node;
        h["nodes"] = hw.nodes;
        ds["hardware"] = h;
        ds["collective"] = collective_name(d.collective);
        ds["note"] = d.note.empty() ? placement : fmt::format("{}; {}", placement, d.note);
        ds["in_place"] = d.in_place;
        if (d.wrong_total) ds["wrong"] = *d.wrong_total;
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& r : d.rows) rows.push_back(row_json(r));
        ds["rows"] = rows;
        list.push_back(ds);
    }
    out["datasets"] = list;
    return out;
}

}  // namespace dtsim::harness

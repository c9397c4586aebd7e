// The bookkeeping of an NCCL collective sweep, following nccl-tests conventions
// (doc/PERFORMANCE.md and src/common.cu): which sizes to run, how many elements each
// rank sends, bus-bandwidth factors, the printed table and the JSON written with
// --out, in the schema of calibration/data/nccl_tests.json. No CUDA here.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::harness {

enum class Collective { all_reduce, all_gather, reduce_scatter, sendrecv };

// "all_reduce", "all_gather", "reduce_scatter", "sendrecv" (nccl_tests.json's spelling).
std::string_view collective_name(Collective c);
// Accepts those names and allreduce, allgather, reducescatter, send_recv. Throws ArgError (host/cli.hpp).
Collective parse_collective(std::string_view name);
std::vector<Collective> all_collectives();

// 4294967296 -> "4 GiB", 1536 -> "1536 B": the largest binary unit that divides exactly.
std::string format_bytes(std::uint64_t bytes);

// busbw = algbw * factor: all_reduce 2(n-1)/n; all_gather and reduce_scatter (n-1)/n;
// sendrecv 1 (nccl-tests doc/PERFORMANCE.md).
double bus_bandwidth_factor(Collective c, int nranks);

// An element type as nccl-tests names it (-d): float, half, bfloat16, double, int32, int8, uint8.
struct DataType {
    std::string_view name;
    std::size_t size = 0;
    // The largest integer every value of the type up to which is exact: bounds the
    // sums a correctness check may expect.
    double exact_integer_limit = 0;
};
// Accepts nccl-tests' names and fp32, fp16, bf16, fp64. Throws ArgError.
DataType parse_dtype(std::string_view name);

// min, min*f, min*f^2, ... up to and including max (nccl-tests -b/-e/-f). Throws ArgError
// when min is 0, min > max or f < 2 would never advance.
std::vector<std::uint64_t> size_sweep(std::uint64_t min_bytes, std::uint64_t max_bytes, std::uint64_t step_factor);

// What one row of the sweep moves, given the requested size in bytes.
struct SweepPoint {
    std::uint64_t size_bytes = 0;  // the size nccl-tests prints: the whole array (n * per-rank for gather/scatter)
    std::uint64_t count = 0;       // the count nccl-tests prints: per-rank count for all_gather and reduce_scatter
    std::uint64_t send_count = 0;  // elements each rank sends
    std::uint64_t recv_count = 0;  // elements each rank receives
};
// nccl-tests' rounding: count = bytes / type size, and for all_gather and reduce_scatter
// the per-rank count = count / n. A point with count 0 is not run.
SweepPoint sweep_point(Collective c, std::uint64_t requested_bytes, std::size_t type_size, int nranks);

// One measured row, in nccl_tests.json's units.
struct SweepRow {
    double size_bytes = 0;
    double count = 0;
    double time_us = 0;
    double algbw_GBps = 0;  // size_bytes / time, GB = 1e9 bytes
    double busbw_GBps = 0;
    std::optional<std::uint64_t> wrong;  // elements that failed the check (printed, not in the JSON row)
};
SweepRow make_row(Collective c, const SweepPoint& p, double seconds, int nranks);
// {"size_bytes", "count", "time_us", "algbw_GBps", "busbw_GBps"}: exactly nccl_tests.json's row keys.
nlohmann::json row_json(const SweepRow& row);

// A value pattern for the optional check: rank r sends (r % 4) + 1 everywhere, so the
// expected sums are small integers. Returns whether `dtype` holds the all_reduce sum of
// `nranks` ranks exactly (if not, the check is skipped).
double check_value_for_rank(int rank);
double expected_reduce_sum(int nranks);
bool check_is_exact(const DataType& dtype, int nranks);

// The printed table, as nccl-tests lays it out.
std::string table_header(bool out_of_place, bool in_place);
std::string table_row(std::uint64_t size_bytes, std::uint64_t count, std::string_view type, std::string_view redop,
                      const std::optional<SweepRow>& out_of_place, const std::optional<SweepRow>& in_place);

// The whole --out file. `meta` carries the run's description (GPU name and count, nodes,
// NCCL version, date, command line); each dataset is one collective in one placement.
struct SweepDataset {
    Collective collective = Collective::all_reduce;
    bool in_place = false;
    std::string note;
    std::optional<std::uint64_t> wrong_total;  // when checked
    std::vector<SweepRow> rows;
};
struct SweepHardware {
    std::string gpu;
    int gpus_per_node = 0;
    int nodes = 0;
};
nlohmann::json sweep_json(const nlohmann::json& meta, const SweepHardware& hw, const std::vector<SweepDataset>& datasets);

}  // namespace dtsim::harness

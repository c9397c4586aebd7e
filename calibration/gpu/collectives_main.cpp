// dtsim-collectives: NCCL collective sweeps in nccl-tests' conventions (calibration/README.md).
//
// For each collective and size, every rank runs --warmup untimed and --iters timed
// operations back to back on its stream; CUDA events around the timed ones give the
// rank's mean time per operation; the row's time is the mean over ranks (nccl-tests'
// default -a 1), or the max or min with --average.
#include "gpu/comm.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/kernels.hpp"
#include "host/cli.hpp"
#include "host/sweep.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

namespace dtsim::harness::gpu {
namespace {

struct Types {
    ncclDataType_t nccl;
    ElemType elem;
};

Types types_of(const DataType& t) {
    if (t.name == "float") return {ncclFloat32, ElemType::f32};
    if (t.name == "half") return {ncclFloat16, ElemType::f16};
    if (t.name == "bfloat16") return {ncclBfloat16, ElemType::bf16};
    if (t.name == "double") return {ncclFloat64, ElemType::f64};
    if (t.name == "int32") return {ncclInt32, ElemType::i32};
    if (t.name == "int8") return {ncclInt8, ElemType::i8};
    return {ncclUint8, ElemType::u8};
}

enum class Average { mean, max, min, rank0 };

Average parse_average(const std::string& s) {
    if (s == "avg" || s == "mean") return Average::mean;
    if (s == "max") return Average::max;
    if (s == "min") return Average::min;
    if (s == "rank0") return Average::rank0;
    throw ArgError(fmt::format("--average must be avg, max, min or rank0, got \"{}\"", s));
}

struct RankBuffers {
    void* send = nullptr;
    void* recv = nullptr;
    unsigned long long* wrong = nullptr;
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
};

class Sweep {
public:
    Sweep(Communicator& comm, DataType dtype, std::uint64_t max_bytes)
        : comm_(comm), dtype_(dtype), types_(types_of(dtype)), n_(comm.world_size()) {
        // Every collective's largest buffer is at most the largest requested size.
        for (auto& r : comm_.local()) {
            DTSIM_CUDA(cudaSetDevice(r.device));
            RankBuffers b;
            DTSIM_CUDA(cudaMalloc(&b.send, std::max<std::uint64_t>(max_bytes, 64)));
            DTSIM_CUDA(cudaMalloc(&b.recv, std::max<std::uint64_t>(max_bytes, 64)));
            DTSIM_CUDA(cudaMemset(b.send, 0, std::max<std::uint64_t>(max_bytes, 64)));
            DTSIM_CUDA(cudaMemset(b.recv, 0, std::max<std::uint64_t>(max_bytes, 64)));
            DTSIM_CUDA(cudaMalloc(reinterpret_cast<void**>(&b.wrong), sizeof(unsigned long long)));
            DTSIM_CUDA(cudaEventCreate(&b.start));
            DTSIM_CUDA(cudaEventCreate(&b.stop));
            buffers_.push_back(b);
        }
    }
    ~Sweep() {
        for (std::size_t i = 0; i < buffers_.size(); ++i) {
            cudaSetDevice(comm_.local()[i].device);
            cudaFree(buffers_[i].send);
            cudaFree(buffers_[i].recv);
            cudaFree(buffers_[i].wrong);
            cudaEventDestroy(buffers_[i].start);
            cudaEventDestroy(buffers_[i].stop);
        }
    }
    Sweep(const Sweep&) = delete;
    Sweep& operator=(const Sweep&) = delete;

    // One operation on every local rank (one NCCL group).
    void launch(Collective c, const SweepPoint& p, bool in_place) {
        const std::size_t ts = dtype_.size;
        DTSIM_NCCL(ncclGroupStart());
        for (std::size_t i = 0; i < buffers_.size(); ++i) {
            const LocalRank& r = comm_.local()[i];
            char* send = static_cast<char*>(buffers_[i].send);
            char* recv = static_cast<char*>(buffers_[i].recv);
            const auto rank = static_cast<std::size_t>(r.rank);
            switch (c) {
                case Collective::all_reduce:
                    DTSIM_NCCL(ncclAllReduce(in_place ? recv : send, recv, p.count, types_.nccl, ncclSum, r.comm,
                                             r.stream));
                    break;
                case Collective::all_gather:
                    // In place: each rank's contribution already sits at its place in the output.
                    DTSIM_NCCL(ncclAllGather(in_place ? recv + rank * p.send_count * ts : send, recv, p.send_count,
                                             types_.nccl, r.comm, r.stream));
                    break;
                case Collective::reduce_scatter:
                    // In place: the output is this rank's part of the input.
                    DTSIM_NCCL(ncclReduceScatter(in_place ? recv : send, in_place ? recv + rank * p.recv_count * ts : recv,
                                                 p.recv_count, types_.nccl, ncclSum, r.comm, r.stream));
                    break;
                case Collective::sendrecv: {
                    const int next = (r.rank + 1) % n_;
                    const int prev = (r.rank - 1 + n_) % n_;
                    DTSIM_NCCL(ncclSend(in_place ? recv : send, p.count, types_.nccl, next, r.comm, r.stream));
                    DTSIM_NCCL(ncclRecv(recv, p.count, types_.nccl, prev, r.comm, r.stream));
                    break;
                }
            }
        }
        DTSIM_NCCL(ncclGroupEnd());
    }

    // Runs the operation once on the check pattern; the number of wrong elements over all
    // ranks, or nothing where the check does not apply.
    std::optional<std::uint64_t> check(Collective c, const SweepPoint& p, bool in_place) {
        if (!check_is_exact(dtype_, n_)) return std::nullopt;
        if (c == Collective::sendrecv && in_place) return std::nullopt;  // sends and receives one buffer
        const std::size_t ts = dtype_.size;
        for (std::size_t i = 0; i < buffers_.size(); ++i) {
            const LocalRank& r = comm_.local()[i];
            DTSIM_CUDA(cudaSetDevice(r.device));
            char* send = static_cast<char*>(buffers_[i].send);
            char* recv = static_cast<char*>(buffers_[i].recv);
            const auto rank = static_cast<std::size_t>(r.rank);
            void* src = send;
            if (in_place) src = c == Collective::all_gather ? recv + rank * p.send_count * ts : recv;
            DTSIM_CUDA(cudaMemsetAsync(recv, 0, std::max(p.recv_count, p.send_count) * ts, r.stream));
            fill_value(src, static_cast<std::int64_t>(p.send_count), types_.elem, check_value_for_rank(r.rank),
                       r.stream);
            DTSIM_CUDA(cudaMemsetAsync(buffers_[i].wrong, 0, sizeof(unsigned long long), r.stream));
        }
        launch(c, p, in_place);
        for (std::size_t i = 0; i < buffers_.size(); ++i) {
            const LocalRank& r = comm_.local()[i];
            DTSIM_CUDA(cudaSetDevice(r.device));
            char* recv = static_cast<char*>(buffers_[i].recv);
            const auto rank = static_cast<std::size_t>(r.rank);
            const auto count = static_cast<std::int64_t>(p.recv_count);
            switch (c) {
                case Collective::all_reduce:
                    count_mismatches(recv, count, types_.elem, expected_reduce_sum(n_), 0, buffers_[i].wrong, r.stream);
                    break;
                case Collective::all_gather:
                    count_mismatches(recv, count, types_.elem, 0, static_cast<std::int64_t>(p.send_count),
                                     buffers_[i].wrong, r.stream);
                    break;
                case Collective::reduce_scatter:
                    count_mismatches(in_place ? recv + rank * p.recv_count * ts : recv, count, types_.elem,
                                     expected_reduce_sum(n_), 0, buffers_[i].wrong, r.stream);
                    break;
                case Collective::sendrecv:
                    count_mismatches(recv, count, types_.elem, check_value_for_rank((r.rank - 1 + n_) % n_), 0,
                                     buffers_[i].wrong, r.stream);
                    break;
            }
        }
        wait_streams(comm_.local(), comm_.timeout());
        std::vector<std::vector<double>> wrong;
        for (auto& b : buffers_) {
            unsigned long long w = 0;
            DTSIM_CUDA(cudaMemcpy(&w, b.wrong, sizeof w, cudaMemcpyDeviceToHost));
            wrong.push_back({static_cast<double>(w)});
        }
        const auto total = allreduce_doubles(comm_.local(), wrong, ncclSum, comm_.timeout());
        return static_cast<std::uint64_t>(total[0][0]);
    }

    // Mean seconds per operation, combined over ranks as --average says.
    double time(Collective c, const SweepPoint& p, bool in_place, int warmup, int iters, Average avg) {
        for (int i = 0; i < warmup; ++i) launch(c, p, in_place);
        barrier(comm_.local(), comm_.timeout());
        for (std::size_t i = 0; i < buffers_.size(); ++i)
            DTSIM_CUDA(cudaEventRecord(buffers_[i].start, comm_.local()[i].stream));
        for (int i = 0; i < iters; ++i) launch(c, p, in_place);
        for (std::size_t i = 0; i < buffers_.size(); ++i)
            DTSIM_CUDA(cudaEventRecord(buffers_[i].stop, comm_.local()[i].stream));
        wait_streams(comm_.local(), comm_.timeout());
        std::vector<std::vector<double>> secs;
        for (std::size_t i = 0; i < buffers_.size(); ++i) {
            float ms = 0;
            DTSIM_CUDA(cudaEventElapsedTime(&ms, buffers_[i].start, buffers_[i].stop));
            const double s = ms * 1e-3 / iters;
            secs.push_back({s, s, s, comm_.local()[i].rank == 0 ? s : 0.0});
        }
        // {sum, max, min, rank 0's}: one all-reduce per statistic.
        const auto sum = allreduce_doubles(comm_.local(), secs, ncclSum, comm_.timeout());
        switch (avg) {
            case Average::mean: return sum[0][0] / n_;
            case Average::rank0: return sum[0][3];
            case Average::max: return allreduce_doubles(comm_.local(), secs, ncclMax, comm_.timeout())[0][1];
            case Average::min: return allreduce_doubles(comm_.local(), secs, ncclMin, comm_.timeout())[0][2];
        }
        return sum[0][0] / n_;
    }

private:
    Communicator& comm_;
    DataType dtype_;
    Types types_;
    int n_;
    std::vector<RankBuffers> buffers_;
};

struct Options {
    std::vector<std::string> ops{"all_reduce", "all_gather", "reduce_scatter", "sendrecv"};
    std::uint64_t min_bytes = 1024;
    std::uint64_t max_bytes = 4ull << 30;
    std::uint64_t step_factor = 2;
    int iters = 20;
    int warmup = 5;
    std::string dtype = "float";
    std::string placement = "both";
    std::string average = "avg";
    bool check = false;
    std::string out;
    BootstrapOptions boot;
};

void add_options(CLI::App& app, Options& o) {
    app.add_option("--ops", o.ops, "collectives to sweep")
        ->delimiter(',')
        ->type_name("LIST")
        ->default_str("all_reduce,all_gather,reduce_scatter,sendrecv");
    app.add_option("--min-bytes", o.min_bytes, "smallest size (nccl-tests -b)")
        ->transform(byte_size())
        ->type_name("SIZE")
        ->default_str("1K");
    app.add_option("--max-bytes", o.max_bytes, "largest size (nccl-tests -e)")
        ->transform(byte_size())
        ->type_name("SIZE")
        ->default_str("4G");
    app.add_option("--step-factor", o.step_factor, "multiply the size by F each step (nccl-tests -f)")
        ->check(at_least(2))
        ->type_name("F")
        ->capture_default_str();
    app.add_option("--iters", o.iters, "timed iterations per size (nccl-tests -n)")
        ->check(at_least(1))
        ->type_name("N")
        ->capture_default_str();
    app.add_option("--warmup", o.warmup, "untimed iterations per size (nccl-tests -w)")
        ->check(at_least(0))
        ->type_name("N")
        ->capture_default_str();
    app.add_option("--dtype", o.dtype, "float, half, bfloat16, double, int32, int8, uint8 (nccl-tests -d)")
        ->type_name("TYPE")
        ->capture_default_str();
    app.add_option("--placement", o.placement, "out, in or both (out-of-place and in-place columns)")
        ->check(CLI::IsMember({"out", "in", "both"}))
        ->type_name("WHICH")
        ->capture_default_str();
    app.add_option("--average", o.average, "combine ranks' times: avg, max, min or rank0 (nccl-tests -a)")
        ->check(CLI::IsMember({"avg", "mean", "max", "min", "rank0"}))
        ->type_name("HOW")
        ->capture_default_str();
    app.add_flag("--check", o.check, "also check every result against the expected values (nccl-tests -c)");
    app.add_option("--out", o.out, "write the rows as JSON (schema of calibration/data/nccl_tests.json)")
        ->type_name("FILE");
    add_launch_options(app, o.boot, true);
}

int run(const Options& o, const std::string& command) {
    std::vector<Collective> ops;
    for (const auto& name : o.ops) ops.push_back(parse_collective(name));
    if (ops.empty()) throw ArgError("--ops: no collective given");
    const DataType dtype = parse_dtype(o.dtype);
    const auto sizes = size_sweep(o.min_bytes, o.max_bytes, o.step_factor);
    const int iters = o.iters;
    const int warmup = o.warmup;
    const bool run_out = o.placement != "in";
    const bool run_in = o.placement != "out";
    const Average average = parse_average(o.average);
    const BootstrapOptions& boot = o.boot;

    Communicator comm(boot);
    const int n = comm.world_size();
    const bool root = comm.is_root();
    const std::string gpu = comm.gpu_name();
    if (root) {
        fmt::print("# dtsim-collectives: {} x {} ({}), NCCL {}\n", n, gpu, comm.launch_description(),
                   nccl_version_string());
        fmt::print("# sizes {} .. {} x{}, {} warmup + {} timed iterations, dtype {}, time = {} over ranks\n",
                   format_bytes(sizes.front()), format_bytes(sizes.back()), o.step_factor, warmup, iters,
                   dtype.name, o.average);
        if (o.check && !check_is_exact(dtype, n))
            fmt::print("# --check skipped: {} cannot hold the sums of {} ranks exactly\n", dtype.name, n);
        std::fflush(stdout);
    }

    Sweep sweep(comm, dtype, sizes.back());
    std::vector<SweepDataset> datasets;
    double busbw_sum = 0;
    int busbw_rows = 0;
    for (Collective c : ops) {
        // NCCL_ALGO in the note: `dtsim calibrate` and `dtsim validate` read it as the algorithm NCCL was told to use.
        const char* nccl_algo = std::getenv("NCCL_ALGO");
        SweepDataset out_ds{c, false,
                            fmt::format("{}; iters {}; warmup {}{}", dtype.name, iters, warmup,
                                        nccl_algo && *nccl_algo ? fmt::format("; NCCL_ALGO={}", nccl_algo) : ""),
                            {}, {}};
        SweepDataset in_ds{c, true, out_ds.note, {}, {}};
        if (root) fmt::print("#\n# {}\n{}", collective_name(c), table_header(run_out, run_in));
        for (std::uint64_t bytes : sizes) {
            const SweepPoint p = sweep_point(c, bytes, dtype.size, n);
            if (p.count == 0) continue;
            std::optional<SweepRow> out_row, in_row;
            if (run_out) {
                std::optional<std::uint64_t> wrong;
                if (o.check) wrong = sweep.check(c, p, false);
                out_row = make_row(c, p, sweep.time(c, p, false, warmup, iters, average), n);
                out_row->wrong = wrong;
                if (wrong) out_ds.wrong_total = out_ds.wrong_total.value_or(0) + *wrong;
                out_ds.rows.push_back(*out_row);
                busbw_sum += out_row->busbw_GBps;
                ++busbw_rows;
            }
            if (run_in) {
                std::optional<std::uint64_t> wrong;
                if (o.check) wrong = sweep.check(c, p, true);
                in_row = make_row(c, p, sweep.time(c, p, true, warmup, iters, average), n);
                in_row->wrong = wrong;
                if (wrong) in_ds.wrong_total = in_ds.wrong_total.value_or(0) + *wrong;
                in_ds.rows.push_back(*in_row);
            }
            if (root) {
                fmt::print("{}", table_row(p.size_bytes, p.count, dtype.name,
                                           c == Collective::sendrecv || c == Collective::all_gather ? "none" : "sum",
                                           out_row, in_row));
                std::fflush(stdout);
            }
        }
        if (run_out) datasets.push_back(std::move(out_ds));
        if (run_in) datasets.push_back(std::move(in_ds));
    }

    std::uint64_t wrong_total = 0;
    for (const auto& d : datasets) wrong_total += d.wrong_total.value_or(0);
    if (root) {
        if (busbw_rows > 0) fmt::print("# Avg bus bandwidth (out-of-place): {:.3f} GB/s\n", busbw_sum / busbw_rows);
        if (o.check) fmt::print("# Out of bounds values: {} {}\n", wrong_total, wrong_total ? "FAILED" : "OK");
        if (!o.out.empty()) {
            const int per_node = comm.nodes() > 0 && n % comm.nodes() == 0 ? n / comm.nodes() : 0;
            nlohmann::json meta = run_meta("dtsim-collectives", gpu, command);
            meta.update({
                {"gpu_count", n},
                {"nodes", comm.nodes()},
                {"gpus_per_node", per_node},
                {"launch", comm.launch_description()},
                {"nccl_version", nccl_version_string()},
                {"dtype", dtype.name},
                {"iters", iters},
                {"warmup", warmup},
                {"time_over_ranks", o.average},
                {"timing", "CUDA events around --iters back-to-back operations on each rank's stream"},
            });
            write_json_file(o.out, sweep_json(meta, {gpu, per_node, comm.nodes()}, datasets));
            fmt::print("# wrote {}\n", o.out);
        }
    }
    return wrong_total == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dtsim::harness::gpu

int main(int argc, char** argv) {
    using namespace dtsim::harness;
    CLI::App app{"NCCL collective sweeps (all_reduce, all_gather, reduce_scatter, sendrecv) in nccl-tests' "
                 "conventions",
                 "dtsim-collectives"};
    app.footer("Exit status: 0 done, 1 a run failed or --check found wrong values, 2 bad arguments.");
    gpu::Options options;
    gpu::add_options(app, options);
    return run_tool(app, argc, argv, [&] { return gpu::run(options, command_line(argc, argv)); });
}

// dtsim-puzzle-real: the eight puzzle strategies run on real GPUs (calibration/README.md).
//
// Each rank executes its seed schedule (host/schedules.cpp) with real tensors and NCCL;
// each logged operation is timed with CUDA events from a common origin (an all-reduce
// right before it); the run with the median makespan is written as a dtsim trace in
// seconds and bytes, next to which `dtsim render` and `dtsim compare` show the simulation.
// The result is checked against the basic schedule run on each GPU: every final weight
// must match the reference within lr / 4, up to a small fraction of near-zero gradients
// whose Adam step may flip sign under a different summation order.
#include "gpu/comm.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/puzzle_executor.hpp"
#include "host/args.hpp"
#include "host/schedule.hpp"
#include "host/trace_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

namespace dtsim::calib::gpu {
namespace {

struct Setup {
    std::string puzzle;
    ModelDims dims;
    ModelDims reference_dims;
    std::vector<RankProgram> programs;
    RankProgram reference;
    ExecOptions exec;
    int warmup = 2;
    int iters = 5;
    bool check = true;
    std::size_t max_events = 0;
};

// What rank 0 gathers from everyone.
struct Gathered {
    std::vector<double> makespans;                 // per measured iteration
    std::size_t chosen = 0;                        // the median one
    std::vector<std::vector<EventTiming>> events;  // per rank, of the chosen iteration
    CheckResult check;                             // worst over ranks
    std::size_t workspace_bytes = 0;
};

std::size_t count_events(const RankProgram& p) {
    return static_cast<std::size_t>(
        std::count_if(p.instrs.begin(), p.instrs.end(), [](const Instr& i) { return !event_op(i.op).empty(); }));
}

// One rank's whole run; every rank calls the same NCCL operations in the same order.
void run_rank(LocalRank& lr, const Setup& setup, std::chrono::seconds timeout, Gathered* out) {
    DTSIM_CUDA(cudaSetDevice(lr.device));
    std::span<LocalRank> self(&lr, 1);
    const RankProgram& program = setup.programs.at(static_cast<std::size_t>(lr.rank));

    ReferenceWeights reference;
    if (setup.check) {
        PuzzleExecutor ref(lr, setup.reference, setup.reference_dims, setup.exec);
        (void)ref.run(false, nullptr, &reference);
    }

    PuzzleExecutor exec(lr, program, setup.dims, setup.exec);
    for (int i = 0; i < setup.warmup; ++i) (void)exec.run(true, nullptr, nullptr);
    std::vector<std::vector<EventTiming>> iterations;
    for (int i = 0; i < setup.iters; ++i) iterations.push_back(exec.run(true, setup.check ? &reference : nullptr, nullptr));
    const CheckResult check = setup.check ? exec.check_result() : CheckResult{};

    // Makespan of each iteration over all ranks; pick the median.
    std::vector<double> ends;
    for (const auto& it : iterations) {
        double end = 0;
        for (const auto& e : it) end = std::max(end, e.start + e.duration);
        ends.push_back(end);
    }
    const auto all_ends = allgather_doubles(self, {ends}, timeout)[0];
    const auto world = static_cast<std::size_t>(setup.dims.ranks);
    const auto n_iters = static_cast<std::size_t>(setup.iters);
    std::vector<double> makespans(n_iters, 0.0);
    for (std::size_t r = 0; r < world; ++r)
        for (std::size_t i = 0; i < n_iters; ++i) makespans[i] = std::max(makespans[i], all_ends[r * n_iters + i]);
    std::vector<std::size_t> order(n_iters);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return makespans[a] < makespans[b]; });
    const std::size_t chosen = order[(n_iters - 1) / 2];

    // The chosen iteration's events of every rank, padded to the longest program.
    std::vector<double> mine(setup.max_events * 3, 0.0);
    const auto& picked = iterations[chosen];
    for (std::size_t k = 0; k < picked.size(); ++k) {
        mine[3 * k] = picked[k].start;
        mine[3 * k + 1] = picked[k].duration;
        mine[3 * k + 2] = picked[k].memory;
    }
    const auto all_events = allgather_doubles(self, {mine}, timeout)[0];
    const auto all_checks =
        allgather_doubles(self, {{check.max_abs_diff, check.mismatches, check.compared}}, timeout)[0];

    if (lr.rank != 0) return;
    out->makespans = makespans;
    out->chosen = chosen;
    out->events.assign(world, {});
    for (std::size_t r = 0; r < world; ++r) {
        const std::size_t n = count_events(setup.programs[r]);
        for (std::size_t k = 0; k < n; ++k) {
            const double* p = &all_events[(r * setup.max_events + k) * 3];
            out->events[r].push_back(EventTiming{p[0], p[1], p[2]});
        }
    }
    for (std::size_t r = 0; r < world; ++r) {
        out->check.max_abs_diff = std::max(out->check.max_abs_diff, all_checks[3 * r]);
        out->check.mismatches += all_checks[3 * r + 1];
        out->check.compared += all_checks[3 * r + 2];
    }
    out->workspace_bytes = exec.workspace_bytes();
}

nlohmann::json build_trace(const Setup& setup, const Gathered& g, const Communicator& comm, const std::string& gpu,
                           const std::string& command, std::optional<bool>& correct) {
    const ModelDims& d = setup.dims;
    std::vector<RankEvents> ranks;
    for (std::size_t r = 0; r < setup.programs.size(); ++r) {
        const RankProgram& p = setup.programs[r];
        RankEvents re;
        re.rank = static_cast<int>(r);
        std::size_t k = 0;
        for (const Instr& in : p.instrs) {
            if (event_op(in.op).empty()) continue;
            const EventTiming& t = g.events[r].at(k++);
            TraceEvent e;
            e.op = std::string(event_op(in.op));
            e.layer = event_layer(in);
            e.start = t.start;
            e.duration = t.duration;
            e.memory = t.memory;
            e.batches = event_batches(in);
            e.stream = is_communication(in.op) ? "comm" : "compute";
            const auto bytes_of = [&](int id) {
                return static_cast<double>(p.buffers.at(static_cast<std::size_t>(id)).elems) * sizeof(float);
            };
            const double rows = static_cast<double>(in.batches.size()) * static_cast<double>(d.tokens);
            const double hh = static_cast<double>(d.hidden) * static_cast<double>(d.hidden);
            switch (in.op) {
                case Op::forward: e.flops = 2.0 * rows * hh; break;
                case Op::backward: e.flops = 6.0 * rows * hh; break;  // recompute, dx, dw
                case Op::allreduce:
                case Op::scatterreduce:
                case Op::send: e.bytes = bytes_of(in.ins.at(0)); break;
                case Op::allgather:
                case Op::recv: e.bytes = bytes_of(in.outs.at(0)); break;
                default: break;
            }
            re.events.push_back(std::move(e));
        }
        ranks.push_back(std::move(re));
    }
    const double allowed = setup.exec.tf32 ? 1e-2 : 1e-3;
    if (setup.check) correct = g.check.compared > 0 && g.check.mismatches <= allowed * g.check.compared;
    nlohmann::json meta = {
        {"puzzle", setup.puzzle},
        {"layers", d.layers},
        {"batches", d.batches},
        {"ranks", d.ranks},
        {"gpu", gpu},
        {"source", "measured"},
        {"tool", "dtsim-puzzle-real"},
        {"hidden", d.hidden},
        {"tokens", d.tokens},
        {"dtype", "fp32"},
        {"tf32", setup.exec.tf32},
        {"optimizer", {{"name", "adam"}, {"lr", setup.exec.adam.lr}, {"beta1", setup.exec.adam.beta1},
                       {"beta2", setup.exec.adam.beta2}, {"eps", setup.exec.adam.eps}}},
        {"nodes", comm.nodes()},
        {"launch", comm.launch_description()},
        {"nccl_version", nccl_version_string()},
        {"cuda_runtime", cuda_runtime_version_string()},
        {"cuda_driver", cuda_driver_version_string()},
        {"date", utc_timestamp()},
        {"host", host_name()},
        {"command", command},
        {"warmup", setup.warmup},
        {"iters", setup.iters},
        {"iteration", g.chosen},
        {"makespans", g.makespans},
        {"workspace_bytes", g.workspace_bytes},
        {"memory",
         "bytes of the rank's live tensors (the five stores) when the operation starts, before its outputs are "
         "allocated; excludes the backward workspace, cuBLAS and NCCL internals"},
        {"timing", "CUDA events on each rank's single stream; start is from an origin recorded right after a "
                   "one-element all-reduce over all ranks"},
    };
    if (setup.check)
        meta["check"] = {{"reference", "basic schedule on each GPU"},
                         {"tolerance", setup.exec.tolerance > 0 ? setup.exec.tolerance : setup.exec.adam.lr / 4},
                         {"max_abs_diff", g.check.max_abs_diff},
                         {"mismatches", g.check.mismatches},
                         {"compared", g.check.compared},
                         {"allowed_mismatch_fraction", allowed}};
    return trace_json(meta, ranks, correct);
}

int run(int argc, char** argv) {
    ArgParser args("dtsim-puzzle-real", "run a puzzle strategy's schedule on real GPUs and write a measured dtsim trace");
    args.add_option("puzzle", "NAME", "basic, grad_accum, ddp, wsdp, fsdp, pipeline, gpipe, pipeline_fsdp");
    args.add_flag("list", "list the puzzles with their seed sizes and exit");
    args.add_option("layers", "L", "layers (default: the puzzle's seed size)");
    args.add_option("batches", "B", "batches (default: the puzzle's seed size)");
    args.add_option("ranks", "R", "GPUs (default: the seed size, or WORLD_SIZE when launched per GPU)");
    args.add_option("hidden", "H", "layer width (the puzzle's HIDDEN)", "512");
    args.add_option("tokens", "T", "tokens per batch (the puzzle's LENGTH)", "256");
    args.add_option("iters", "N", "measured iterations; the median makespan's is written", "5");
    args.add_option("warmup", "N", "unmeasured iterations first", "2");
    args.add_option("lr", "X", "Adam learning rate", "1e-3");
    args.add_flag("tf32", "let the fp32 GEMMs use TF32 tensor cores");
    args.add_flag("no-check", "skip the comparison with the basic schedule's weights");
    args.add_option("out", "FILE", "trace file (default: PUZZLE.measured.json)");
    args.add_option("mode", "MODE", "auto, single (this process drives every GPU) or multi (one process per GPU)",
                    "auto");
    args.add_option("device", "GPU", "multi-process mode: this process's GPU (default: the local rank)");
    args.add_option("rendezvous", "HOST:PORT", "multi-process mode: where rank 0 serves the NCCL id "
                                               "(default MASTER_ADDR:MASTER_PORT+1)");
    args.add_option("timeout", "SECONDS", "give up on the rendezvous or on stuck GPU work after this long", "300");
    args.parse(argc, argv);
    if (args.help_requested()) {
        fmt::print("{}", args.help());
        return 0;
    }
    if (args.flag("list")) {
        fmt::print("{:<14} {:>6} {:>7} {:>5}  {}\n", "puzzle", "layers", "batches", "ranks", "");
        for (const auto& p : puzzles())
            fmt::print("{:<14} {:>6} {:>7} {:>5}  {}\n", p.name, p.layers, p.batches, p.ranks, p.summary);
        return 0;
    }

    Setup setup;
    const PuzzleInfo& info = puzzle_info(args.str("puzzle"));
    setup.puzzle = std::string(info.name);
    setup.dims.layers = args.has("layers") ? static_cast<int>(args.integer("layers")) : info.layers;
    setup.dims.batches = args.has("batches") ? static_cast<int>(args.integer("batches")) : info.batches;
    setup.dims.ranks = info.ranks;
    setup.dims.hidden = args.integer_at_least("hidden", 1);
    setup.dims.tokens = args.integer_at_least("tokens", 1);

    BootstrapOptions boot;
    boot.mode = parse_launch_mode(args.str("mode"));
    if (args.has("device")) boot.device = static_cast<int>(args.integer_at_least("device", 0));
    if (args.has("rendezvous")) boot.rendezvous = parse_endpoint(args.str("rendezvous"));
    boot.timeout = std::chrono::seconds(args.integer_at_least("timeout", 1));

    // Settle the number of ranks and build every schedule before touching a GPU, so that
    // a size the puzzle cannot run fails at once.
    std::optional<ProcessPlace> place;
    if (boot.mode != LaunchMode::single_process) place = detect_process_place(process_environment(), boot.rendezvous);
    if (args.has("ranks")) setup.dims.ranks = static_cast<int>(args.integer_at_least("ranks", 1));
    else if (place) setup.dims.ranks = place->world_size;
    if (place && place->world_size != setup.dims.ranks)
        throw ArgError(fmt::format("{} runs {} ranks but the launcher started {} processes", setup.puzzle,
                                   setup.dims.ranks, place->world_size));
    setup.programs = build_programs(setup.puzzle, setup.dims);
    setup.reference_dims = setup.dims;
    setup.reference_dims.ranks = 1;
    setup.reference = build_rank_program("basic", setup.reference_dims, 0);
    for (const auto& p : setup.programs) setup.max_events = std::max(setup.max_events, count_events(p));
    setup.exec.adam.lr = static_cast<float>(args.number("lr"));
    setup.exec.tf32 = args.flag("tf32");
    setup.exec.timeout = boot.timeout;
    setup.warmup = static_cast<int>(args.integer_at_least("warmup", 0));
    setup.iters = static_cast<int>(args.integer_at_least("iters", 1));
    setup.check = !args.flag("no-check");
    if (!place) boot.ngpus = setup.dims.ranks;

    Communicator comm(boot);
    const std::string gpu = comm.gpu_name();
    if (comm.is_root())
        fmt::print("dtsim-puzzle-real: {} (layers {}, batches {}, ranks {}, hidden {}, tokens {}) on {} x {} ({})\n",
                   setup.puzzle, setup.dims.layers, setup.dims.batches, setup.dims.ranks, setup.dims.hidden,
                   setup.dims.tokens, comm.world_size(), gpu, comm.launch_description());

    Gathered gathered;
    auto local = comm.local();
    if (local.size() == 1) {
        run_rank(local[0], setup, boot.timeout, &gathered);
    } else {
        // One thread per GPU, each with its own communicator. The first failure is the
        // cause; the others then stop ("stopped because a thread ... failed").
        std::mutex error_mutex;
        std::exception_ptr first_error;
        std::vector<std::thread> threads;
        for (std::size_t i = 0; i < local.size(); ++i) {
            threads.emplace_back([&, i] {
                try {
                    run_rank(local[i], setup, boot.timeout, &gathered);
                } catch (...) {
                    {
                        std::lock_guard<std::mutex> lock(error_mutex);
                        if (!first_error) first_error = std::current_exception();
                    }
                    request_abort();
                }
            });
        }
        for (auto& t : threads) t.join();
        if (first_error) std::rethrow_exception(first_error);
    }

    if (!comm.is_root()) return 0;
    std::optional<bool> correct;
    const auto doc = build_trace(setup, gathered, comm, gpu, args.command_line(), correct);
    const std::string out = args.has("out") ? args.str("out") : setup.puzzle + ".measured.json";
    write_json_file(out, doc);
    const auto& s = doc["summary"];
    fmt::print("makespan {:.1f} us (iteration {} of {}), last start {:.1f} us, max memory {} bytes on rank {}\n",
               s["makespan"].get<double>() * 1e6, gathered.chosen, setup.iters, s["timesteps"].get<double>() * 1e6,
               s["max_memory"].get<double>(), s["max_memory_rank"].get<int>());
    if (correct)
        fmt::print("check against the basic schedule: {} ({} of {} weights differ by more than lr/4; max |diff| {:.3g})\n",
                   *correct ? "correct" : "WRONG", gathered.check.mismatches, gathered.check.compared,
                   gathered.check.max_abs_diff);
    fmt::print("wrote {}\n", out);
    return correct.value_or(true) ? 0 : 2;
}

}  // namespace
}  // namespace dtsim::calib::gpu

int main(int argc, char** argv) {
    try {
        return dtsim::calib::gpu::run(argc, argv);
    } catch (const std::exception& e) {
        fmt::print(stderr, "dtsim-puzzle-real: error: {}\n", e.what());
        return 1;
    }
}

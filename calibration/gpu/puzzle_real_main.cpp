// dtsim-puzzle-real: the eight puzzle strategies run on real GPUs (calibration/README.md).
//
// Each rank executes its program, recorded by running the strategy of puzzles/ (the source
// `dtsim puzzle` runs) on the dtsim engine (host/puzzle_model.hpp), with real tensors and NCCL;
// each logged operation is timed with CUDA events from a common origin (an all-reduce
// right before it); the run with the median makespan is written as a dtsim trace in
// seconds and bytes (--trace), which `dtsim render` draws as it draws a simulated run's.
// The result is checked against the basic strategy run on each GPU: every final weight
// must match the reference within lr / 4, up to a small fraction of near-zero gradients
// whose Adam step may flip sign under a different summation order.
#include "gpu/comm.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/puzzle_executor.hpp"
#include "host/cli.hpp"
#include "host/schedule.hpp"

#include "dtsim/puzzle/registry.hpp"
#include "dtsim/trace_io.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

namespace dtsim::harness::gpu {
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

Trace build_trace(const Setup& setup, const Gathered& g, const Communicator& comm, const std::string& gpu,
                  const std::string& command) {
    const ModelDims& d = setup.dims;
    const double allowed = setup.exec.tf32 ? 1e-2 : 1e-3;
    std::optional<bool> correct;
    if (setup.check) correct = g.check.compared > 0 && g.check.mismatches <= allowed * g.check.compared;
    nlohmann::json meta = run_meta("dtsim-puzzle-real", gpu, command);
    meta.update({
        {"puzzle", setup.puzzle},
        {"layers", d.layers},
        {"batches", d.batches},
        {"ranks", d.ranks},
        {"source", "measured"},
        {"hidden", d.hidden},
        {"tokens", d.tokens},
        {"dtype", "fp32"},
        {"tf32", setup.exec.tf32},
        {"optimizer", {{"name", "adam"}, {"lr", setup.exec.adam.lr}, {"beta1", setup.exec.adam.beta1},
                       {"beta2", setup.exec.adam.beta2}, {"eps", setup.exec.adam.eps}}},
        {"nodes", comm.nodes()},
        {"launch", comm.launch_description()},
        {"nccl_version", nccl_version_string()},
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
    });
    if (setup.check)
        meta["check"] = {{"reference", "basic schedule on each GPU"},
                         {"tolerance", setup.exec.tolerance > 0 ? setup.exec.tolerance : setup.exec.adam.lr / 4},
                         {"max_abs_diff", g.check.max_abs_diff},
                         {"mismatches", g.check.mismatches},
                         {"compared", g.check.compared},
                         {"allowed_mismatch_fraction", allowed}};
    return measured_trace(setup.programs, d, g.events, std::move(meta), correct);
}

struct Options {
    std::string puzzle;
    bool list = false;
    int layers = 0, batches = 0, ranks = 0;  // 0: the puzzle's seed size (ranks: or the launcher's)
    std::int64_t hidden = 512;
    std::int64_t tokens = 256;
    int iters = 5;
    int warmup = 2;
    float lr = 1e-3f;
    bool tf32 = false;
    bool no_check = false;
    std::string trace;
    BootstrapOptions boot;
};

void add_options(CLI::App& app, Options& o) {
    std::vector<std::string> names;
    for (const auto& p : puzzle::puzzles()) names.push_back(p.name);
    app.add_option("--puzzle", o.puzzle, "the puzzle to run (--list shows their seed sizes)")
        ->check(CLI::IsMember(names))
        ->type_name("NAME");
    app.add_flag("--list", o.list, "list the puzzles with their seed sizes and exit");
    app.add_option("--layers", o.layers, "layers (default: the puzzle's seed size)")
        ->check(at_least(1))
        ->type_name("L");
    app.add_option("--batches", o.batches, "batches (default: the puzzle's seed size)")
        ->check(at_least(1))
        ->type_name("B");
    app.add_option("--ranks", o.ranks, "GPUs (default: the seed size, or WORLD_SIZE when launched per GPU)")
        ->check(at_least(1))
        ->type_name("R");
    app.add_option("--hidden", o.hidden, "layer width (the puzzle's HIDDEN)")
        ->check(at_least(1))
        ->type_name("H")
        ->capture_default_str();
    app.add_option("--tokens", o.tokens, "tokens per batch (the puzzle's LENGTH)")
        ->check(at_least(1))
        ->type_name("T")
        ->capture_default_str();
    app.add_option("--iters", o.iters, "measured iterations; the median makespan's is written")
        ->check(at_least(1))
        ->type_name("N")
        ->capture_default_str();
    app.add_option("--warmup", o.warmup, "unmeasured iterations first")
        ->check(at_least(0))
        ->type_name("N")
        ->capture_default_str();
    app.add_option("--lr", o.lr, "Adam learning rate")->check(CLI::PositiveNumber)->type_name("X")->default_str("1e-3");
    app.add_flag("--tf32", o.tf32, "let the fp32 GEMMs use TF32 tensor cores");
    app.add_flag("--no-check", o.no_check, "skip the comparison with the basic strategy's weights");
    app.add_option("--trace", o.trace, "trace file (default: PUZZLE.measured.json)")->type_name("FILE");
    add_launch_options(app, o.boot, false);
}

int run(const Options& o, const std::string& command) {
    if (o.list) {
        fmt::print("{:<14} {:>6} {:>7} {:>5}  {}\n", "puzzle", "layers", "batches", "ranks", "");
        for (const auto& p : puzzle::puzzles())
            fmt::print("{:<14} {:>6} {:>7} {:>5}  {}\n", p.name, p.layers, p.batches, p.ranks, p.title);
        return 0;
    }
    const puzzle::PuzzleInfo* info = puzzle::find_puzzle(o.puzzle);
    if (!info) throw ArgError("--puzzle is required (--list shows the puzzles)");

    Setup setup;
    setup.puzzle = info->name;
    setup.dims.layers = o.layers > 0 ? o.layers : info->layers;
    setup.dims.batches = o.batches > 0 ? o.batches : info->batches;
    setup.dims.ranks = info->ranks;
    setup.dims.hidden = o.hidden;
    setup.dims.tokens = o.tokens;
    BootstrapOptions boot = o.boot;

    // Settle the number of ranks and build every program before touching a GPU, so that
    // a size the puzzle cannot run fails at once.
    std::optional<ProcessPlace> place;
    if (boot.mode != LaunchMode::single_process) place = detect_process_place(process_environment(), boot.rendezvous);
    if (o.ranks > 0)
        setup.dims.ranks = o.ranks;
    else if (place)
        setup.dims.ranks = place->world_size;
    if (place && place->world_size != setup.dims.ranks)
        throw ArgError(fmt::format("{} runs {} ranks but the launcher started {} processes", setup.puzzle,
                                   setup.dims.ranks, place->world_size));
    setup.programs = build_programs(setup.puzzle, setup.dims);
    setup.reference_dims = setup.dims;
    setup.reference_dims.ranks = 1;
    setup.reference = build_programs("basic", setup.reference_dims).at(0);
    for (const auto& p : setup.programs) setup.max_events = std::max(setup.max_events, count_events(p));
    setup.exec.adam.lr = o.lr;
    setup.exec.tf32 = o.tf32;
    setup.exec.timeout = boot.timeout;
    setup.warmup = o.warmup;
    setup.iters = o.iters;
    setup.check = !o.no_check;
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
    const Trace trace = build_trace(setup, gathered, comm, gpu, command);
    const std::string out = o.trace.empty() ? setup.puzzle + ".measured.json" : o.trace;
    write_trace_file(trace, out);
    const Summary& s = trace.summary;
    fmt::print("makespan {:.1f} us (iteration {} of {}), last start {:.1f} us, max memory {} bytes on rank {}\n",
               s.makespan * 1e6, gathered.chosen, setup.iters, s.timesteps * 1e6, s.max_memory, s.max_memory_rank);
    const std::optional<bool> correct = s.correct;
    if (correct)
        fmt::print("check against the basic strategy: {} ({} of {} weights differ by more than lr/4; max |diff| {:.3g})\n",
                   *correct ? "correct" : "WRONG", gathered.check.mismatches, gathered.check.compared,
                   gathered.check.max_abs_diff);
    fmt::print("wrote {}\n", out);
    return correct.value_or(true) ? 0 : 1;
}

}  // namespace
}  // namespace dtsim::harness::gpu

int main(int argc, char** argv) {
    using namespace dtsim::harness;
    CLI::App app{"run a puzzle strategy on real GPUs and write a measured dtsim trace", "dtsim-puzzle-real"};
    app.footer("Exit status: 0 done and correct, 1 a run failed or its final weights are wrong, 2 bad arguments.");
    gpu::Options options;
    gpu::add_options(app, options);
    return run_tool(app, argc, argv, [&] { return gpu::run(options, command_line(argc, argv)); });
}

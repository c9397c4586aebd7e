// dtsim-bench: how fast the engine simulates the puzzle strategies at scale,
// printed as figures (never a timed test). Each configuration runs in a child process so that its peak RSS
// is its own; a baseline in the same run (appending the same events to plain
// vectors, no coroutines) turns machine noise into a ratio.
#include "dtsim/puzzle/registry.hpp"

#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtsim::bench {
namespace {

// Bad arguments (exit status 2).
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

std::string puzzle_names() {
    std::string names;
    for (const auto& p : puzzle::puzzles()) names += (names.empty() ? "" : ", ") + p.name;
    return names;
}

struct BenchOptions {
    std::vector<int> ranks{1024, 4096, 16384};
    int layers = 32;
    std::vector<std::string> strategies{"ddp", "fsdp"};
    int repeat = 1;
};

struct Figures {
    double wall_s = 0;
    double cpu_s = 0;  // user + system time of the same run: what the run costs when the machine is shared
    double baseline_ratio = 0;  // wall / baseline of the same run, the lowest over runs (events kept)
    std::size_t ops = 0;
    long peak_rss_kib = 0;  // the child process's high-water mark after its first run (see measure)
    bool correct = false;
};

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
    return s(u.ru_utime) + s(u.ru_stime);
}

long peak_rss_kib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The cost of merely recording the same events: one vector of events per rank.
double baseline(const Trace& t) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<RankTrace> copy(t.ranks.size());
    for (std::size_t r = 0; r < t.ranks.size(); ++r) {
        auto& out = copy[r].events;
        double clock = 0;
        for (const auto& e : t.ranks[r].events) {
            auto& n = out.emplace_back();
            n.op = e.op;
            n.layer = e.layer;
            n.start = clock;
            n.duration = e.duration;
            n.memory = e.memory;
            n.batches = e.batches;
            clock += e.duration;
        }
    }
    const double s = seconds_since(t0);
    if (copy.empty() || copy.back().events.size() != t.ranks.back().events.size()) throw std::logic_error("baseline");
    return s;
}

// Folds the figures of one more run (or round) of a configuration into `best`: the fastest wall
// and CPU times and the lowest baseline ratio, each the best of its own, the largest peak RSS, and
// correct only if every run was.
void keep_best(Figures& best, const Figures& f, bool first) {
    if (first) {
        best = f;
        return;
    }
    if (f.ops != best.ops)
        throw std::logic_error("bench: two runs of the same configuration recorded different operation counts");
    best.wall_s = std::min(best.wall_s, f.wall_s);
    best.cpu_s = std::min(best.cpu_s, f.cpu_s);
    best.baseline_ratio = std::min(best.baseline_ratio, f.baseline_ratio);
    best.peak_rss_kib = std::max(best.peak_rss_kib, f.peak_rss_kib);
    best.correct = best.correct && f.correct;
}

Figures measure(const puzzle::PuzzleInfo& p, int layers, int ranks, int repeat, puzzle::Keep keep) {
    Figures f;
    for (int i = 0; i < repeat; ++i) {
        Figures one;
        const double c0 = cpu_seconds();
        auto t0 = std::chrono::steady_clock::now();
        auto run = puzzle::run_strategy(p.strategy, layers, ranks, ranks, puzzle::puzzle_costs(),
                                        nlohmann::json::object(), keep);
        one.wall_s = seconds_since(t0);
        one.cpu_s = cpu_seconds() - c0;
        one.ops = run.events;
        one.correct = run.trace.summary.correct.value_or(false);
        // The memory one run needs: the high-water mark before anything else allocates (the
        // baseline's copy of the events, a later run whose arenas cannot reuse the heap the
        // first run's logs left). Includes the bench's own few MiB.
        if (i == 0) one.peak_rss_kib = peak_rss_kib();
        // The ratio of a run to the baseline taken right after it, in the same conditions.
        if (keep == puzzle::Keep::events) one.baseline_ratio = one.wall_s / baseline(run.trace);
        keep_best(f, one, i == 0);
    }
    return f;
}

// What a run that the system would not give enough memory says (as dtsim does), not "std::bad_alloc".
constexpr const char* kOutOfMemory = "out of memory (the run needs more memory than the system would give)";

// Runs `measure` in a child process and reads its figures back through a pipe.
Figures measure_isolated(const puzzle::PuzzleInfo& p, int layers, int ranks, int repeat, puzzle::Keep keep) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("bench: pipe() failed");
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("bench: fork() failed");
    if (pid == 0) {
        close(fds[0]);
        std::string line;
        try {
            Figures f = measure(p, layers, ranks, repeat, keep);
            line = fmt::format("{} {} {} {} {} {}\n", f.wall_s, f.cpu_s, f.baseline_ratio, f.ops,
                               f.peak_rss_kib, f.correct ? 1 : 0);
        } catch (const std::bad_alloc&) {
            line = fmt::format("error {}\n", kOutOfMemory);
        } catch (const std::exception& e) {
            line = fmt::format("error {}\n", e.what());
        }
        ssize_t n = write(fds[1], line.data(), line.size());
        _exit(n == static_cast<ssize_t>(line.size()) ? 0 : 1);
    }
    close(fds[1]);
    std::string text;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (text.starts_with("error ")) {
        while (text.ends_with('\n')) text.pop_back();
        throw std::runtime_error(
            fmt::format("bench: {} at {} layers and {} ranks: {}", p.name, layers, ranks, text.substr(6)));
    }
    std::istringstream in(text);
    Figures f;
    int correct = 0;
    if (!(in >> f.wall_s >> f.cpu_s >> f.baseline_ratio >> f.ops >> f.peak_rss_kib >> correct))
        throw std::runtime_error(fmt::format("bench: the child process for {} at {} ranks failed", p.name, ranks));
    f.correct = correct != 0;
    return f;
}

constexpr int kRunsPerChild = 3;

void run_bench(const BenchOptions& o) {
    for (const auto& name : o.strategies)  // before anything is printed
        if (!puzzle::find_puzzle(name))
            throw UsageError(fmt::format("unknown strategy '{}'; the puzzles are: {}", name, puzzle_names()));
    fmt::print("dtsim-bench: strategies at {} layers, batches = ranks (one batch per rank); best of {} round(s), each\n"
               "running every rank count once, in turn\n",
               o.layers, o.repeat);
    fmt::print("'ops' are simulated operations (trace events); 'keeps' is what the run keeps: every event (the trace,\n"
               "for files and pictures) or the summary only (what `dtsim puzzle` keeps without --trace/--svg);\n"
               "'baseline' appends the same events to plain vectors (a ratio against machine noise); ops/s and ns/op\n"
               "are per wall-clock second; 'cpu s' is the run's user + system time; 'peak RSS' is the high-water mark\n"
               "of a process that has made one run (the bench's own few MiB included)\n\n");
    fmt::print("{:<10} {:<7} {:>7} {:>11} {:>9} {:>9} {:>13} {:>9} {:>10} {:>11} {:>12} {}\n", "strategy", "keeps",
               "ranks", "ops", "wall s", "cpu s", "ops/s", "ns/op", "cpu ns/op", "x baseline", "peak RSS", "correct");
    for (const auto& name : o.strategies) {
        const auto* p = puzzle::find_puzzle(name);
        if (!p) throw UsageError(fmt::format("unknown strategy '{}'", name));
        for (const auto keep : {puzzle::Keep::events, puzzle::Keep::summary}) {
            const char* keeps = keep == puzzle::Keep::events ? "events" : "summary";
            // Round by round, every rank count once per round (a child process each): a burst of
            // noise from this machine's neighbours then slows every rank count alike, instead of
            // all the runs of one, and the ratio below stays meaningful. The child runs the
            // configuration three times and reports the best: in a fresh process the first run
            // takes the page faults of all its memory, the second a few more, and from the third
            // on the memory is the process's own.
            std::vector<Figures> best(o.ranks.size());
            for (int round = 0; round < o.repeat; ++round) {
                for (std::size_t i = 0; i < o.ranks.size(); ++i) {
                    keep_best(best[i], measure_isolated(*p, o.layers, o.ranks[i], kRunsPerChild, keep), round == 0);
                }
            }
            for (std::size_t i = 0; i < o.ranks.size(); ++i) {
                const Figures& f = best[i];
                const double ns = f.wall_s * 1e9 / static_cast<double>(f.ops);
                const double cpu_ns = f.cpu_s * 1e9 / static_cast<double>(f.ops);
                const std::string ratio =
                    keep == puzzle::Keep::events ? fmt::format("{:.1f}", f.baseline_ratio) : "-";
                fmt::print("{:<10} {:<7} {:>7} {:>11} {:>9.3f} {:>9.3f} {:>13.3e} {:>9.1f} {:>10.1f} {:>11} {:>9.1f} MiB {}\n",
                           name, keeps, o.ranks[i], f.ops, f.wall_s, f.cpu_s, static_cast<double>(f.ops) / f.wall_s, ns,
                           cpu_ns, ratio, static_cast<double>(f.peak_rss_kib) / 1024.0, f.correct ? "yes" : "NO");
            }
            if (o.ranks.size() > 1) {
                auto per_op = [](const Figures& f, double s) { return s / static_cast<double>(f.ops); };
                const Figures& first = best.front();
                const Figures& last = best.back();
                fmt::print("{:<10} {:<7} per-op cost at {} ranks / at {} ranks: wall x{:.2f}, cpu x{:.2f} (flat = x1.00)\n",
                           name, keeps, o.ranks.back(), o.ranks.front(),
                           per_op(last, last.wall_s) / per_op(first, first.wall_s),
                           per_op(last, last.cpu_s) / per_op(first, first.cpu_s));
            }
        }
    }
    // The engine alone: every rank records an event and joins a collective, `layers`
    // times; no stores, no values. What the puzzle model adds is the difference.
    fmt::print("\nengine alone (each rank: record an event, join an all-reduce; repeated {} times, every event kept; the run,\n"
               "spawning the ranks' coroutines included, timed after the simulation is constructed):\n", o.layers);
    for (int r : o.ranks) {
        const auto c0 = std::chrono::steady_clock::now();
        Simulation sim(r);
        const double construct_s = seconds_since(c0);
        auto t0 = std::chrono::steady_clock::now();
        sim.run([&sim, layers = o.layers](Gpu& g) -> Task<> {
            for (int k = 0; k < layers; ++k) {
                g.record(ops::forward, k, 1, 0);
                co_await sim.world().collective(g, ops::allreduce, k, 1, [](int& a, int b, int) { a += b; });
            }
        });
        const double s = seconds_since(t0);
        const double n = static_cast<double>(r) * o.layers;
        fmt::print("  {:>7} ranks: {:.3f} s, {:.1f} ns per rank-collective, {:.3e} collective-ops/s (constructing: {:.3f} s)\n",
                   r, s, s * 1e9 / n, n / s, construct_s);
    }
    fmt::print("\nreference puzzle figures at the canonical sizes (the seed's printed Timesteps / Maximum Memory):\n");
    for (const auto& name : o.strategies) {
        const auto* p = puzzle::find_puzzle(name);
        auto s = puzzle::run_strategy(p->strategy, p->layers, p->batches, p->ranks).trace.summary;
        fmt::print("  {:<10} layers {} ranks {}: timesteps {} (target {}), max memory {} (target {})\n", name, p->layers,
                   p->ranks, s.timesteps, p->target_steps, s.max_memory, p->target_memory);
    }
}

// A whole-number option's check, worded as dtsim's (sim/cli/commands.hpp): "--ranks: 'x' is not a
// whole number (expected 1 to 1048576)", not CLI11's "Value x not in range".
CLI::Validator whole_number(long long lo, long long hi) {
    return {[lo, hi](std::string& s) -> std::string {
                const char* b = s.data() + (s.starts_with('+') ? 1 : 0);
                const char* e = s.data() + s.size();
                long long v = 0;
                const auto [end, ec] = std::from_chars(b, e, v);
                const std::string shown = s.size() <= 64 ? s : s.substr(0, 64) + "...";
                if (b == e || end != e || (ec != std::errc() && ec != std::errc::result_out_of_range))
                    return fmt::format("'{}' is not a whole number (expected {} to {})", shown, lo, hi);
                if (ec == std::errc::result_out_of_range || v < lo || v > hi)
                    return fmt::format("{} is out of range (expected {} to {})", shown, lo, hi);
                s = std::to_string(v);
                return {};
            },
            fmt::format("INT in [{} - {}]", lo, hi)};
}

}  // namespace
}  // namespace dtsim::bench

int main(int argc, char** argv) {
    using namespace dtsim::bench;
    BenchOptions o;
    CLI::App app{"dtsim-bench: how fast the engine simulates the puzzle strategies at scale (prints figures)",
                 "dtsim-bench"};
    app.add_option("--ranks", o.ranks, "Rank counts to simulate")
        ->delimiter(',')
        ->transform(whole_number(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--layers", o.layers, "Layers")->transform(whole_number(1, 4096))->capture_default_str();
    app.add_option("--strategies", o.strategies, "Puzzle strategies to run")->delimiter(',')->capture_default_str();
    app.add_option("--repeat", o.repeat,
                   "Rounds; each runs every rank count once, in turn, and the best round per rank count is reported")
        ->transform(whole_number(1, 100))
        ->capture_default_str();
    try {
        app.parse(argc, argv);
        run_bench(o);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {  // one line and exit status 2, as dtsim's usage errors
        fmt::print(stderr, "dtsim-bench: error: {} (see 'dtsim-bench --help')\n", e.what());
        return 2;
    } catch (const UsageError& e) {
        fmt::print(stderr, "dtsim-bench: error: {}\n", e.what());
        return 2;
    } catch (const std::bad_alloc&) {
        std::fflush(stdout);
        fmt::print(stderr, "dtsim-bench: error: {}\n", kOutOfMemory);
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "dtsim-bench: error: {}\n", e.what());
        return 1;
    }
    return 0;
}

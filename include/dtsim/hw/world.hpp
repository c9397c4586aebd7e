// The hardware world: a simulation of `ranks` GPUs of a cluster, the groups
// strategies communicate over, and the network whose link ports transfers
// share (network.hpp: max-min fair sharing, end times final in time order).
//
//   hw::World world(cluster, 16);
//   hw::Group& dp = world.group({0, 8}, "dp0");
//   world.run([&](hw::Device& gpu) -> Task<> { ... });
//   Trace trace = world.take_trace();
#pragma once

#include "dtsim/simulation.hpp"
#include "dtsim/hw/device.hpp"
#include "dtsim/hw/group.hpp"
#include "dtsim/hw/network.hpp"
#include "dtsim/hw/stragglers.hpp"
#include "dtsim/hw/topology.hpp"

#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace dtsim::hw {

// The step's critical path, walked backwards from the end of the step: from
// the rank that finished last (the lowest on ties) along its compute stream
// until the latest wait that moved its clock to the end of a transfer whose
// start it did not set itself (a member ready later, or an earlier transfer on
// its stream, did); there the path runs back through that transfer (and the
// transfers that held the gate's stream before it) to the time the member
// ready last (the gate) was ready, and goes on along the gate's stream. Time on
// a rank's stream (its compute, its waits for transfers it gated itself) counts
// for that rank; time spent in transfers another member gated counts as
// `transfers`. on_rank + transfers = the step time.
struct CriticalPath {
    std::vector<double> on_rank;  // seconds, per rank
    double transfers = 0;         // seconds
    int rank = 0;                 // the rank the path spends the most time on (the lowest on ties)
    int jumps = 0;                // transfers the path went through
};

class World {
public:
    // `ranks` GPUs placed in order on the cluster's nodes (rank r on node r / gpus_per_node), or
    // where `placement` says: rank r is the cluster's GPU placement[r] (ascending, distinct), as when
    // one rank is simulated for its data- and tensor-parallel twins (twin_gpus in job.hpp).
    World(Cluster cluster, int ranks, std::vector<int> placement = {});
    ~World();
    World(const World&) = delete;
    World& operator=(const World&) = delete;

    [[nodiscard]] int ranks() const { return sim_.ranks(); }
    [[nodiscard]] const Cluster& cluster() const { return cluster_; }
    [[nodiscard]] Simulation& simulation() { return sim_; }
    Device& device(int rank) { return *devices_.at(static_cast<std::size_t>(rank)); }
    // A new communicator over `members` (distinct ranks), kept by the world. `whole`, the
    // cluster's GPUs of a group some of whose members the world does not simulate (their
    // replicas run the same program at the same times), sets its size and shape: its
    // collectives are priced for the whole group, on the simulated members' ports.
    Group& group(std::vector<int> members, std::string name, std::vector<int> whole = {});
    // The cluster's GPU that rank `rank` is, and its node.
    [[nodiscard]] int placement(int rank) const {
        return placement_.empty() ? rank : placement_[static_cast<std::size_t>(rank)];
    }
    [[nodiscard]] int node_of(int rank) const { return cluster_.node_of(placement(rank)); }
    Group& everyone() { return *everyone_; }
    // The collective algorithm (default: the cluster's).
    void set_algorithm(Algorithm a) { algorithm_ = a; }
    [[nodiscard]] Algorithm algorithm() const { return algorithm_; }
    // Whether operations are kept as trace events (default). Off, a run still
    // counts them and keeps every figure of the report (clocks, time split,
    // FLOPs, memory), but take_trace() has no events, and a deadlock report
    // cannot name the ranks' last events: for large runs that need no trace.
    // Before run(): throws std::logic_error once it has started.
    void set_recording(bool on);
    [[nodiscard]] bool recording() const { return recording_; }

    // Slow GPUs (by the cluster's GPU: a rank's placement) and per-operation jitter (by rank) on the
    // compute streams (before run()).
    void set_stragglers(Stragglers s);
    [[nodiscard]] const Stragglers& stragglers() const { return stragglers_; }

    // Runs `body(device)` as one coroutine per rank until all finish; rethrows
    // what the engine throws (ScheduleError, DeadlockError, ...). Once.
    void run(const std::function<Task<>(Device&)>& body);
    // The end of the last operation of any rank (after run()).
    [[nodiscard]] double step_time() const { return step_time_; }
    // The critical path of the step (after run()).
    [[nodiscard]] CriticalPath critical_path() const;
    // The events (time in s, memory in bytes), summarized; empties the log.
    Trace take_trace(nlohmann::json meta = nlohmann::json::object());
    // The links and the transfers on them.
    [[nodiscard]] const Network& network() const { return network_; }

private:
    friend class Device;
    friend class Group;
    // Per rank and level a transmit and a receive port (full duplex).
    static int tx(int rank, Level level) { return rank * 4 + static_cast<int>(level) * 2; }
    static int rx(int rank, Level level) { return tx(rank, level) + 1; }
    // Arms `t` on `ports` with the duration of `cost` and wakes whatever that settles.
    void arm(TransferRecord* t, std::span<const int> ports, std::span<const double> weights,
             const CollectiveCost& cost, std::span<const Arrival> arrivals);
    // Applies the network's patches to the trace and wakes its ranks; whether any woke.
    bool drain();
    // The engine's idle hook: the network's next instant.
    bool advance();
    // Registers `gpu` to wake when `t` (not ended) ends; the Wait to park it with.
    Wait wait_end(Device& gpu, const TransferRecord* t, OpCode op);
    // Ranks parked on collectives some member never called: say so.
    void describe_stuck();
    // A collective some member never called (after the run).
    void check_open_rounds() const;

    std::vector<Arrival> spare_arrivals(int members) {
        if (spare_.empty()) {
            std::vector<Arrival> v;
            v.reserve(static_cast<std::size_t>(members));
            return v;
        }
        std::vector<Arrival> v = std::move(spare_.back());
        spare_.pop_back();
        return v;
    }
    void recycle_arrivals(std::vector<Arrival>&& v) {
        v.clear();
        spare_.push_back(std::move(v));
    }

    struct Message {
        int src;
        int tag;
        double bytes;
        TransferRef transfer;
    };

    Cluster cluster_;
    std::vector<int> placement_;  // empty: rank r is GPU r
    Algorithm algorithm_;
    Simulation sim_;
    Network network_;  // ports: per rank and level, transmit then receive (tx, rx)
    std::vector<std::unique_ptr<Device>> devices_;
    std::deque<Group> groups_;
    Group* everyone_ = nullptr;
    std::vector<std::vector<Message>> inbox_;  // per destination rank
    std::vector<std::vector<Arrival>> spare_;  // arrival lists of closed rounds, for reuse
    // Per rank: what it waits for when parked on a transfer (the engine's Wait
    // points here; fixed buffers, so the text can be rewritten in place).
    static constexpr std::size_t kWaitText = 384;
    std::vector<std::unique_ptr<char[]>> wait_text_;
    double step_time_ = 0;
    bool recording_ = true;
    bool started_ = false;
    Stragglers stragglers_;
    // Where every rank's operation goes when the world does not record (Device::record): one event,
    // in cache. (The engine's own, Simulation::scratch_, serves Gpu::record.)
    Event scratch_;
};

}  // namespace dtsim::hw

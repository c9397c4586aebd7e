// A communicator over a subset of ranks (a data-, tensor- or pipeline-parallel
// group, or everyone) with its place in the topology. A collective on a group
// involves only its members and crosses only the levels its members span.
#pragma once

#include "dtsim/simulation.hpp"
#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/hw/network.hpp"

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dtsim::hw {

class World;

class Group {
public:
    [[nodiscard]] const std::string& name() const { return comm_->name(); }
    // The ranks of the whole group. Where data-parallel replicas are simulated once
    // (World's placement), a group may span replicas the world does not hold: members()
    // are the simulated ones, size() and shape() the whole group's.
    [[nodiscard]] int size() const { return size_; }
    [[nodiscard]] const std::vector<int>& members() const { return comm_->members(); }
    // Position of `rank` in the group (members sorted by rank), or -1.
    [[nodiscard]] int position(int rank) const { return comm_->position(rank); }
    [[nodiscard]] const GroupShape& shape() const { return shape_; }
    [[nodiscard]] Communicator& communicator() const { return *comm_; }
    // What one collective of `bytes` (nccl-tests' S) costs on this group. A group calls the
    // same few collectives again and again (every microbatch, every layer), so it keeps each
    // (collective, algorithm, size) it priced: collective_cost depends on nothing else that can change.
    [[nodiscard]] CollectiveCost cost(Collective c, double bytes) const;

private:
    friend class World;
    friend class Device;
    Group(World& world, Communicator& comm, GroupShape shape, std::vector<int> ports, std::vector<double> weights)
        : world_(&world), comm_(&comm), shape_(shape), size_(shape.ranks), ports_(std::move(ports)),
          weights_(std::move(weights)), calls_(static_cast<std::size_t>(comm.size()), 0) {}
    // The members this world simulates: a round arms once each has called.
    [[nodiscard]] int simulated() const { return comm_->size(); }
    World* world_;
    Communicator* comm_;
    GroupShape shape_;
    int size_;
    std::vector<int> ports_;       // the link ports its collectives occupy (World::tx, World::rx)
    std::vector<double> weights_;  // their weights (network.hpp); empty: all 1
    struct PricedKey {
        Collective collective;
        Algorithm algorithm;  // the world's, which a run may set after making its groups
        double bytes;
        bool operator==(const PricedKey&) const = default;
    };
    struct PricedHash {
        std::size_t operator()(const PricedKey& k) const noexcept {
            return std::hash<double>{}(k.bytes) * 31 + static_cast<std::size_t>(k.collective) * 7 +
                   static_cast<std::size_t>(k.algorithm);
        }
    };
    mutable std::unordered_map<PricedKey, CollectiveCost, PricedHash> priced_;
    // The last few it was asked for, looked at before the map: a group alternates between a
    // couple of (collective, size), and comparing four keys in the group itself costs less than
    // hashing a double and reading a bucket and a node elsewhere. Filled in turn (recent_next_).
    static constexpr std::size_t kRecent = 4;
    mutable std::array<std::pair<PricedKey, CollectiveCost>, kRecent> recent_{};
    mutable std::uint32_t recent_used_ = 0;
    mutable std::uint32_t recent_next_ = 0;

    // Joining a collective does not suspend a member (a blocking one then
    // waits for the transfer's end): the k-th call of every member joins
    // round k, and the last member to call arms its transfer.
    struct Round {
        TransferRecord* transfer = nullptr;
        OpCode op;
        int layer = kNoLayer;
        int first_rank = -1;
        std::vector<Arrival> arrivals;
    };
    std::vector<std::uint64_t> calls_;  // per member position: collectives called
    std::uint64_t base_ = 0;            // call index of rounds_.front()
    std::deque<Round> rounds_;          // the open rounds
};

}  // namespace dtsim::hw

// The values of the puzzle world (docs/puzzle-semantics.md): weights,
// optimizer states, activations and their gradients, with the shard and batch
// sets that say which part of the layer or which batches they cover.
#pragma once

#include "dtsim/id_set.hpp"

#include <string>

namespace dtsim::puzzle {

struct Weight {
    int layer = 0;
    int step = 0;
    IdSet shards = IdSet::single(0);
    int total = 1;

    [[nodiscard]] bool is_complete() const { return shards.size() == total; }
    // Union of the shards (same layer and same total required).
    [[nodiscard]] Weight combine(const Weight& other) const;
    void combine_into(const Weight& other);  // the same, in place
    // Keeps shard `s` of `n`; the weight must be complete.
    [[nodiscard]] Weight shard(int s, int n) const;
    [[nodiscard]] std::string str() const;
};

struct OptState {
    int layer = 0;
    int step = 0;
    IdSet shards = IdSet::single(0);
    int total = 1;

    [[nodiscard]] bool is_complete() const { return shards.size() == total; }
    [[nodiscard]] OptState combine(const OptState& other) const;
    void combine_into(const OptState& other);  // the same, in place
    [[nodiscard]] OptState shard(int s, int n) const;
    [[nodiscard]] std::string str() const;
};

// The input of `layer` for a set of batches (layer 0: the model input).
struct Activation {
    int layer = 0;
    IdSet batches;
    [[nodiscard]] std::string str() const;
};

// The gradient consumed by backward(layer).
struct ActivationGrad {
    int layer = 0;
    IdSet batches;
    [[nodiscard]] std::string str() const;
};

struct WeightGrad {
    int layer = 0;
    IdSet batches;
    IdSet shards = IdSet::single(0);
    int total = 1;

    [[nodiscard]] bool is_complete() const { return shards.size() == total; }
    [[nodiscard]] WeightGrad combine(const WeightGrad& other) const;
    void combine_into(const WeightGrad& other);  // the same, in place
    [[nodiscard]] WeightGrad shard(int s, int n) const;
    [[nodiscard]] std::string str() const;
};

// Sum of two gradients of the same layer and shards: unions the batches.
// Throws std::invalid_argument (turned into a PuzzleError by the model) otherwise.
WeightGrad operator+(const WeightGrad& a, const WeightGrad& b);
WeightGrad& operator+=(WeightGrad& a, const WeightGrad& b);

}  // namespace dtsim::puzzle

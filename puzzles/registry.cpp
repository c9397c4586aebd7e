#include "dtsim/puzzle/registry.hpp"

#include "all.hpp"

#include <string>
#include <vector>

namespace dtsim::puzzle {

std::span<const PuzzleInfo> puzzles() {
    // The list of puzzles/all.hpp, for the puzzle world's model.
    static const std::vector<PuzzleInfo> all = [] {
        std::vector<PuzzleInfo> out;
        for (const PuzzleStrategy<Model>& p : all_puzzles<Model>)
            out.push_back({std::string(p.name), p.strategy, p.layers, p.batches, p.ranks, p.target_steps,
                           p.target_memory, std::string(p.title)});
        return out;
    }();
    return all;
}

const PuzzleInfo* find_puzzle(std::string_view name) {
    for (const auto& p : puzzles())
        if (p.name == name) return &p;
    return nullptr;
}

}  // namespace dtsim::puzzle

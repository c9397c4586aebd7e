// Pipeline runs on the ideal cluster, shared by the schedule and uneven-stage tests.
#pragma once

#include "dtsim/hw/run.hpp"
#include "fixtures.hpp"

#include <string>

namespace dtsim::hw::test {

// `name` over p pipeline ranks, m microbatches of one sequence, a model of `layers` layers.
inline json pipeline(const std::string& name, int p, int m, int layers) {
    return {{"cluster", ideal_cluster(1, p)},
            {"model", small_model(layers)},
            {"training", {{"global_batch", m}, {"micro_batch", 1}}},
            {"strategy", {{"name", name}, {"pp", p}}}};
}

inline RunResult run(const json& doc, bool keep = false) {
    return simulate(parse_config(doc, "test.json"), {.keep_trace = keep});
}

// What loading and running `doc` reports as a config error, or "no error".
inline std::string config_error(const json& doc) {
    try {
        run(doc);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace dtsim::hw::test

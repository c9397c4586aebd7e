#include "host/trace_writer.hpp"

#include <fmt/format.h>

#include <fstream>
#include <stdexcept>

namespace dtsim::calib {

TraceSummary summarize(const std::vector<RankEvents>& ranks) {
    TraceSummary s;
    bool have_memory = false;
    for (const auto& r : ranks) {
        if (r.events.empty()) continue;
        s.timesteps = std::max(s.timesteps, r.events.back().start);
        for (const auto& e : r.events) {
            s.makespan = std::max(s.makespan, e.start + e.duration);
            if (!have_memory || e.memory > s.max_memory) {
                have_memory = true;
                s.max_memory = e.memory;
                s.max_memory_rank = r.rank;
                s.max_memory_time = e.start;
            }
        }
    }
    return s;
}

nlohmann::json trace_json(const nlohmann::json& meta, const std::vector<RankEvents>& ranks,
                          std::optional<bool> correct) {
    using nlohmann::json;
    json doc = json::object();
    doc["format"] = "dtsim-trace";
    doc["version"] = 1;
    doc["time_unit"] = "s";
    doc["memory_unit"] = "byte";
    doc["meta"] = meta;
    const TraceSummary s = summarize(ranks);
    json summary = json::object();
    summary["timesteps"] = s.timesteps;
    summary["makespan"] = s.makespan;
    summary["max_memory"] = s.max_memory;
    summary["max_memory_rank"] = s.max_memory_rank;
    summary["max_memory_time"] = s.max_memory_time;
    if (correct) summary["correct"] = *correct;
    doc["summary"] = summary;
    json list = json::array();
    for (const auto& r : ranks) {
        json events = json::array();
        for (const auto& e : r.events) {
            json ev = json::object();
            ev["op"] = e.op;
            ev["layer"] = e.layer ? json(*e.layer) : json(nullptr);
            ev["start"] = e.start;
            ev["duration"] = e.duration;
            ev["memory"] = e.memory;
            ev["batches"] = e.batches;
            if (!e.stream.empty()) ev["stream"] = e.stream;
            if (e.bytes > 0) ev["bytes"] = e.bytes;
            if (e.flops > 0) ev["flops"] = e.flops;
            events.push_back(std::move(ev));
        }
        json rank = json::object();
        rank["rank"] = r.rank;
        rank["events"] = std::move(events);
        list.push_back(std::move(rank));
    }
    doc["ranks"] = std::move(list);
    return doc;
}

void write_json_file(const std::string& path, const nlohmann::json& doc) {
    std::ofstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(fmt::format("{}: cannot open for writing", path));
    f << doc.dump(1) << '\n';
    if (!f) throw std::runtime_error(fmt::format("{}: write failed", path));
}

}  // namespace dtsim::calib

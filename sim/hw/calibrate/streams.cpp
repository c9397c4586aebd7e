// dtsim-membw's bandwidth files (streams.hpp) and the streaming fraction they give.
#include "streams.hpp"

#include "hw/config/reading.hpp"
#include "tables.hpp"

#include <fmt/format.h>

#include <string_view>

namespace dtsim::hw::calib {

namespace {
using Value = json_reader::Value;
constexpr std::string_view kStreamFileKeys[] = {"source", "note", "description", "meta", "memory_bandwidth"};
constexpr std::string_view kStreamRowKeys[] = {"kernel", "bytes_per_array", "bytes_moved", "GBps", "time_us"};
}  // namespace

bool is_stream_file(const nlohmann::json& j) { return j.is_object() && j.contains("memory_bandwidth"); }

void read_streams(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    root.keys(kStreamFileKeys);
    const Value section = root["memory_bandwidth"];
    section.keys({"gpu", "rows"});
    StreamSet set;
    set.id = stem;
    set.file = file;
    // dtsim-membw writes a description and no source; one is added where the file is shipped.
    set.source = root.has("source")        ? root["source"].string()
                 : root.has("description") ? root["description"].string()
                                           : "";
    set.gpu = gpu_named(section["gpu"]);
    const Value rows = section["rows"];
    if (rows.size() == 0) rows.fail("no rows: expected one object per kernel and array size");
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Value r = rows.at(i);
        r.keys(kStreamRowKeys);
        set.rows.push_back({r["kernel"].choice({"copy", "triad"}), r["bytes_per_array"].real(ranges::message_bytes),
                            r["GBps"].real(ranges::bandwidth_GBps)});
    }
    out.streams.push_back(std::move(set));
}

double stream_fraction(const StreamSet& s, double hbm_bytes_per_s) {
    std::vector<double> rates;
    for (const auto& p : s.rows)
        if (p.array_bytes >= kStreamMinArrayBytes) rates.push_back(p.gbps * 1e9);
    if (rates.empty() || !(hbm_bytes_per_s > 0)) return 0;
    return median_of(std::move(rates)) / hbm_bytes_per_s;
}

}  // namespace dtsim::hw::calib

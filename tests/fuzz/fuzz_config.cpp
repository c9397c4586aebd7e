// libFuzzer target: the config loader on a JSON document in memory. Any input
// must either load or be rejected with a ConfigError. The document is parsed as
// the loader parses a file (json_reader::parse_text: at most 256 levels of nesting;
// an invalid document is rejected there), then read by parse_config. Lines at the
// start of the input of the form "@set PATH=VALUES" are parsed as `--set` is
// (parse_setting) and the first run of their sweep is applied.
#include "dtsim/hw/config.hpp"
#include "json/reader.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    std::vector<dtsim::hw::Override> overrides;
    try {
        while (text.substr(0, 5) == "@set ") {
            const auto nl = text.find('\n');
            const std::string line(text.substr(5, nl == std::string_view::npos ? std::string_view::npos : nl - 5));
            const dtsim::hw::Setting s = dtsim::hw::parse_setting(line);
            overrides.push_back({s.path, s.values.front()});
            text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        }
    } catch (const dtsim::hw::ConfigError&) {
        return 0;
    }
    static const dtsim::json_reader::Dialect dialect{
        .raise = [](const std::string& file, const std::string& path, const std::string& message) {
            throw dtsim::hw::ConfigError(file, path, message);
        }};
    try {
        const nlohmann::json doc = dtsim::json_reader::parse_text(std::string(text), "fuzz.json", dialect);
        const dtsim::hw::Config c = dtsim::hw::parse_config(doc, "fuzz.json", overrides);
        // What `dtsim run` derives before simulating must be defined for any accepted config.
        (void)c.gpus();
        (void)c.microbatches();
    } catch (const dtsim::hw::ConfigError&) {
    }
    return 0;
}

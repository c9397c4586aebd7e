// libFuzzer target: the config loader's include mechanism (load_config on
// files). The input is up to four documents separated by lines "----"; they are
// written as f0.json .. f3.json into a private temporary directory and f0.json
// is loaded, so includes ("include": "f1.json"), merging, cycles and missing
// files are exercised. Inputs containing '/' or '\' are skipped: no include can
// then name a file outside that directory (a JSON escape would need '\').
#include "dtsim/hw/config.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace {
const std::filesystem::path& directory() {
    static const std::filesystem::path dir = [] {
        std::string tmpl = (std::filesystem::temp_directory_path() / "dtsim-fuzz-XXXXXX").string();
        if (!mkdtemp(tmpl.data())) std::abort();
        return std::filesystem::path(tmpl);
    }();
    return dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    if (text.find_first_of("/\\") != std::string_view::npos) return 0;
    const auto& dir = directory();
    std::size_t start = 0;
    int files = 0;
    for (; files < 4; ++files) {
        const auto sep = text.find("\n----\n", start);
        const auto part = text.substr(start, sep == std::string_view::npos ? std::string_view::npos : sep - start);
        std::ofstream(dir / ("f" + std::to_string(files) + ".json"), std::ios::binary | std::ios::trunc) << part;
        if (sep == std::string_view::npos) break;
        start = sep + 6;
    }
    for (int i = files + 1; i < 4; ++i) std::filesystem::remove(dir / ("f" + std::to_string(i) + ".json"));
    try {
        const dtsim::hw::Config c = dtsim::hw::load_config((dir / "f0.json").string());
        (void)c.microbatches();
    } catch (const dtsim::hw::ConfigError&) {
    }
    return 0;
}

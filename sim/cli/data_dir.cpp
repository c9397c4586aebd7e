// Where the dtsim command finds the data it ships (configs/, calibration/data/):
// the folder DTSIM_DATA_DIR names; else share/dtsim beside the installed
// command (PREFIX/bin/dtsim reads PREFIX/share/dtsim); else share/dtsim in the
// build tree, which links it to the source tree (sim/cli/CMakeLists.txt).
#include "commands.hpp"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace dtsim::cli {

namespace fs = std::filesystem;

std::string data_dir(bool required) {
    if (const char* env = std::getenv("DTSIM_DATA_DIR"); env && *env) {
        std::error_code ec;
        if (!fs::is_directory(env, ec))
            throw UsageError(fmt::format("DTSIM_DATA_DIR is \"{}\", which is not a folder", env));
        return env;
    }
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    std::vector<fs::path> tried;
    if (!ec)
        for (const fs::path& candidate : {exe.parent_path().parent_path() / "share" / "dtsim",
                                          exe.parent_path() / "share" / "dtsim"}) {
            tried.push_back(candidate);
            if (fs::is_directory(candidate / "configs", ec)) return candidate.string();
        }
    if (!required) return "";
    std::string looked;
    for (const auto& t : tried) looked += (looked.empty() ? "" : ", ") + t.string();
    throw UsageError(fmt::format("dtsim's shipped data (configs/, calibration/data/) was not found{}; set "
                                         "DTSIM_DATA_DIR to the folder that holds them",
                                         looked.empty() ? "" : " (looked in " + looked + ")"));
}

}  // namespace dtsim::cli

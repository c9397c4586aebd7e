#include "dtsim/hw/data_dir.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace dtsim::hw {

namespace fs = std::filesystem;

DataDir find_data_dir() {
    DataDir out;
    if (const char* env = std::getenv("DTSIM_DATA_DIR"); env && *env) {
        std::error_code ec;
        if (!fs::is_directory(env, ec))
            throw std::invalid_argument(fmt::format("DTSIM_DATA_DIR is \"{}\", which is not a folder", env));
        out.path = env;
        return out;
    }
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return out;
    for (const fs::path& candidate :
         {exe.parent_path().parent_path() / "share" / "dtsim", exe.parent_path() / "share" / "dtsim"}) {
        out.looked_in.push_back(candidate.string());
        if (fs::is_directory(candidate / "configs", ec)) {
            out.path = candidate.string();
            return out;
        }
    }
    return out;
}

}  // namespace dtsim::hw

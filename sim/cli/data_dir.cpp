// Where the dtsim command finds the data it ships (configs/, calibration/data/): the lookup of
// dtsim/hw/data_dir.hpp, its failures said as usage errors (nothing has run).
#include "commands.hpp"

#include "dtsim/hw/data_dir.hpp"

#include <stdexcept>

namespace dtsim::cli {

std::string data_dir(bool required) {
    hw::DataDir d;
    try {
        d = hw::find_data_dir();
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }
    if (!d.path.empty() || !required) return d.path;
    std::string looked;
    for (const auto& t : d.looked_in) looked += (looked.empty() ? "" : ", ") + t;
    throw UsageError(fmt::format("dtsim's shipped data (configs/, calibration/data/) was not found{}; set "
                                 "DTSIM_DATA_DIR to the folder that holds them",
                                 looked.empty() ? "" : " (looked in " + looked + ")"));
}

}  // namespace dtsim::cli

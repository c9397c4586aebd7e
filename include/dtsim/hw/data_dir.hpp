// Where the data dtsim ships lies: the shipped configs (configs/) and measurements
// (calibration/data/), under one folder.
#pragma once

#include <string>
#include <vector>

namespace dtsim::hw {

struct DataDir {
    std::string path;                    // the folder; "" when none was found
    std::vector<std::string> looked_in;  // where it was looked for, when DTSIM_DATA_DIR is not set
};

// The folder DTSIM_DATA_DIR names, when it is set (std::invalid_argument when that is not a
// folder); else the first of share/dtsim above the running program's folder and share/dtsim in
// it that holds configs/: PREFIX/bin/dtsim reads PREFIX/share/dtsim as installed, build/dtsim
// and build/bench/dtsim-hw-bench read build/share/dtsim, which the build links to the source
// tree's folders (sim/cli/CMakeLists.txt).
DataDir find_data_dir();

}  // namespace dtsim::hw

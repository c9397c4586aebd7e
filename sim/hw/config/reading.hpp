// How configs and ground-truth files are read (private to dtsim::hw): with the
// JSON reader (sim/json/reader.hpp) in the dialect whose errors are ConfigErrors,
// and the physical ranges of their real numbers.
#pragma once

#include "dtsim/hw/config.hpp"
#include "json/reader.hpp"

namespace dtsim::hw {

// Errors are ConfigError(file, path, message); an object's members are "keys".
const json_reader::Dialect& config_dialect();

// The physical ranges of the real numbers of configs and ground-truth files, in the units of
// their keys. Each is far wider than any hardware has (the fastest GPUs of 2024 peak at a few
// PFLOP/s in fp8, with 8 TB/s of HBM and 1.8 TB/s of NVLink per GPU: NVIDIA's B200 datasheet),
// and narrow enough that no result overflows a double or prints hundreds of digits: a peak or
// a bandwidth has a floor (1 GFLOP/s, 1 MB/s), a time, a size or a factor a ceiling.
// Bandwidths go up to 1e12 GB/s, the "infinitely fast" links and memory of idealised configs
// (tests/hw/fixtures.hpp): a transfer then takes no time, which overflows nothing.
namespace ranges {
inline constexpr Range peak_tflops{"a peak", "TFLOP/s", 1e-3, 1e6};
inline constexpr Range throughput_tflops{"a throughput", "TFLOP/s", 0, 1e6, true};
inline constexpr Range memory_GiB{"a memory size", "GiB", 0, 1e6, true};
inline constexpr Range memory_TBps{"a memory bandwidth", "TB/s", 1e-6, 1e9};
inline constexpr Range power_W{"a board power", "W", 0, 1e6, true};  // (0, 1 MW]
inline constexpr Range power_exponent{"an exponent of power", "", 0, 4, true};  // (0, 4]
inline constexpr Range bandwidth_GBps{"a bandwidth", "GB/s", 1e-3, 1e12};
inline constexpr Range measured_GBps{"a bandwidth", "GB/s", 0, 1e12};  // a measurement, 0 allowed
inline constexpr Range latency_us{"a latency", "us", 0, 1e6};  // up to a second
inline constexpr Range time_us{"a time", "us", 0, 1e12, true};  // a measured time: up to 11 days
inline constexpr Range bytes{"a byte count", "bytes", 0, 1e18};
inline constexpr Range message_bytes{"a message size", "bytes", 0, 1e18, true};
inline constexpr Range count{"a count", "", 0, 1e18};
inline constexpr Range bucket_MiB{"a bucket size", "MiB", 0, 1e9, true};
inline constexpr Range dimension{"a matrix dimension", "", 0, 1e9, true};
inline constexpr Range tokens{"a sequence length", "tokens", 0, 1e9};
inline constexpr Range timed_tokens{"a sequence length", "tokens", 0, 1e9, true};  // a timed call's: > 0
inline constexpr Range slowdown{"a slowdown factor", "", 0, 1e3, true};
inline constexpr Range jitter_cv{"a coefficient of variation", "", 0, 100};
inline constexpr Range kernel_bytes{"bytes an element", "bytes", 0, 1e4, true};  // (0, 10 kB]
inline constexpr Range kernel_factor{"a factor on counted bytes", "", 0, 100, true};
inline constexpr Range jitter_sigma{"a lognormal sigma", "", 0, 3};  // a cv of 90
}  // namespace ranges

}  // namespace dtsim::hw

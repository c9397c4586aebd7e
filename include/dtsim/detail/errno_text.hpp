// The system's text for an errno value, for the messages of files that cannot be read or written.
#pragma once

#include <cstring>
#include <string>

namespace dtsim::detail {

namespace errno_detail {
// strerror_r is GNU's (it returns the text, in the buffer or not) or POSIX's (it fills the buffer).
[[maybe_unused]] inline std::string text(const char* text, const char*, int) { return text; }
[[maybe_unused]] inline std::string text(int rc, const char* buffer, int err) {
    return rc == 0 ? std::string(buffer) : "Unknown error " + std::to_string(err);
}
}  // namespace errno_detail

// What std::strerror(err) says ("No such file or directory"), safe to call on several threads at
// once, which std::strerror need not be (a sweep's runs read their files on threads of their own).
inline std::string errno_text(int err) {
    char buffer[256] = {};
    return errno_detail::text(strerror_r(err, buffer, sizeof buffer), buffer, err);
}

}  // namespace dtsim::detail

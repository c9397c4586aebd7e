// Writing an output file so that a file under its final name is always complete. Every file dtsim
// writes (traces, pictures, Chrome traces, charts, schedules, calibrated clusters) goes through here.
//
// A name that is a regular file or does not exist yet is written to a temporary file in the same
// folder, ".NAME.tmp.PID", and renamed onto NAME only once everything is written, flushed and the
// file closed without error; the temporary file is removed on any failure, an exception from the
// writer, or an interrupt (dtsim/interrupt.hpp), and NAME is then left as it was. A name that
// exists and is something else (a device such as /dev/null or /dev/full, a FIFO, a symbolic link)
// cannot be renamed onto, and is opened and written in place; a failed write is reported all the
// same. Errors name the file and the system's reason:
//   "t.json: cannot open for writing: Permission denied"
//   "/dev/full: write failed: No space left on device"
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>

namespace dtsim::detail {

// Writes `path` with `write`, which puts the file's bytes on the stream it is given. Throws
// std::runtime_error when the file cannot be opened, written or put in place (the writer's own
// exceptions pass as they are, except that a failure of the stream is reported with its reason),
// and dtsim::Interrupted when an interrupt is requested while the file is written.
void write_output_file(const std::string& path, const std::function<void(std::ostream&)>& write);

// The same for bytes already made.
void write_output_file(const std::string& path, std::string_view bytes);

}  // namespace dtsim::detail

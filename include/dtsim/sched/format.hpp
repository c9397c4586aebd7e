// Reading and writing schedules: the per-rank text lists and PyTorch's CSV.
//
// Text (any extension but .csv):
//     # comment (also after actions)
//     rank 0: 0F0 0F1 0F2 0F3 0B0 0F4 0B1 ...
//     rank 1: 1F0 1F1 1F2 1B0 ...
//   One `rank R:` (or `R:`) header per rank, followed by its actions separated by
//   spaces and/or commas; a line without a header continues the previous rank.
//   `[`, `]` and the token `None` (PyTorch's idle slot) are ignored, so a
//   rank's list printed by Python (`0: [0F0, 0F1, None, 0B0]`) reads as is.
//   Ranks may come in any order; each of 0..R-1 exactly once. An overlapped
//   pair is one token, `(0F5;7B2)OVERLAP_F_B` (spaces allowed inside the
//   parentheses); both of its actions are located at the token.
//
// CSV (.csv): torch.distributed.pipelining's `_dump_csv`/`_load_csv` format: row r
//   is rank r's actions, one action per cell (`csv.writer` rows of `str(action)`).
//   Empty cells are idle slots (PyTorch writes `None` as an empty cell) and are
//   skipped; a cell `(0F5;7B2)OVERLAP_F_B` is an overlapped pair (PyTorch's
//   str() of an OVERLAP_F_B action); an empty line is a rank without actions, as for Python's csv.reader
//   (so a blank line at the end adds an idle rank). LF or CRLF line ends; RFC 4180
//   quoting.
//   A row with SEND/RECV cells is PyTorch's "compute_comms" format, without them
//   "compute_only"; both read the same way. Written with LF line ends and no
//   quoting (actions need none).
#pragma once

#include "dtsim/sched/schedule.hpp"

#include <iosfwd>
#include <stdexcept>
#include <string>

namespace dtsim::sched {

// A file that cannot be read as a schedule. what() is
// "SOURCE:LINE:COLUMN: ..." (text) or "SOURCE:LINE: cell C (rank R): ..." (CSV).
class ScheduleFormatError : public std::runtime_error, public InputError {
public:
    using std::runtime_error::runtime_error;
};

enum class FileFormat { text, csv };
// .csv (any case) is CSV; everything else is text.
FileFormat format_from_path(const std::string& path);

// `source` names the input in error messages. The result's name is empty and
// its source and locations are filled.
Schedule read_schedule_text(std::istream& in, const std::string& source);
Schedule read_schedule_csv(std::istream& in, const std::string& source);
// By extension; the schedule's name is the file's stem.
Schedule read_schedule_file(const std::string& path);

// The text form starts with a comment naming the schedule and its sizes.
void write_schedule_text(const Schedule& schedule, std::ostream& out);
void write_schedule_csv(const Schedule& schedule, std::ostream& out);
// By extension. Throws std::runtime_error when the file cannot be written.
void write_schedule_file(const Schedule& schedule, const std::string& path);

}  // namespace dtsim::sched

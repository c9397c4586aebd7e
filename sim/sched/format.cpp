#include "dtsim/sched/format.hpp"

#include "dtsim/detail/errno_text.hpp"
#include "dtsim/detail/output_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <map>
#include <ostream>
#include <string_view>
#include <system_error>

namespace dtsim::sched {
namespace {

std::string lower_ascii(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Reads one line, stripping a trailing CR (CRLF files).
bool next_line(std::istream& in, std::string& line) {
    if (!std::getline(in, line)) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

// Text a message quotes: at most `max` bytes of it ("0F0xxxxxxxx... (50000 bytes)").
std::string shorten(std::string_view text, std::size_t max = 48) {
    if (text.size() <= max) return std::string(text);
    std::size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
    return fmt::format("{}... ({} bytes)", text.substr(0, cut), text.size());
}

// An action's error as a message gives it: each quoted piece of the action ('...') shortened, so
// that a cell of 50 KB is not echoed whole; a message that is still long is cut.
std::string shorten_quotes(const std::string& message) {
    std::string out;
    std::size_t i = 0;
    while (i < message.size()) {
        const auto open = message.find('\'', i);
        if (open == std::string::npos) {
            out.append(message, i, std::string::npos);
            break;
        }
        const auto close = message.find('\'', open + 1);
        if (close == std::string::npos) {
            out.append(message, i, std::string::npos);
            break;
        }
        out.append(message, i, open - i);
        out += '\'' + shorten(std::string_view(message).substr(open + 1, close - open - 1)) + '\'';
        i = close + 1;
    }
    constexpr std::size_t kLongest = 1024;  // the longest message of a short action is under 400 bytes
    return shorten(out, kLongest);
}

// Collects the per-rank lists of a file, whatever its format, with duplicate and
// gap checks on the rank numbers.
class Builder {
public:
    explicit Builder(std::string source) : source_(std::move(source)) {}

    void start_rank(int rank, int line, int column) {
        if (auto it = first_line_.find(rank); it != first_line_.end())
            throw ScheduleFormatError(fmt::format("{}:{}:{}: rank {} is listed twice (first at line {})", source_, line,
                                                  column, rank, it->second));
        first_line_[rank] = line;
        current_ = rank;
        if (static_cast<std::size_t>(rank) >= ranks_.size()) {
            ranks_.resize(static_cast<std::size_t>(rank) + 1);
            locs_.resize(ranks_.size());
        }
    }
    [[nodiscard]] int current() const { return current_; }
    void add(const Action& a, const Location& where) {
        ranks_[static_cast<std::size_t>(current_)].push_back(a);
        locs_[static_cast<std::size_t>(current_)].push_back(where);
    }
    Schedule finish() {
        if (first_line_.empty()) throw ScheduleFormatError(fmt::format("{}: no ranks: the file lists no schedule", source_));
        for (int r = 0; r < static_cast<int>(ranks_.size()); ++r)
            if (!first_line_.count(r))
                throw ScheduleFormatError(fmt::format("{}: rank {} is missing: the ranks must be 0..{}, each listed once",
                                                      source_, r, ranks_.size() - 1));
        Schedule s;
        s.source = source_;
        s.ranks = std::move(ranks_);
        s.locations = std::move(locs_);
        return s;
    }

private:
    std::string source_;
    std::map<int, int> first_line_;  // rank -> line of its header
    int current_ = -1;
    std::vector<std::vector<Action>> ranks_;
    std::vector<std::vector<Location>> locs_;
};

// "rank 12:" or "12:" at the start of `s` (after spaces). On success sets the
// rank and the position after the colon.
bool parse_rank_header(const std::string& s, std::size_t& pos, int& rank, const std::string& where) {
    std::size_t p = pos;
    while (p < s.size() && is_space(s[p])) ++p;
    std::size_t q = p;
    bool word = false;
    if (s.compare(q, 4, "rank") == 0 || s.compare(q, 4, "Rank") == 0) {
        q += 4;
        word = true;
        while (q < s.size() && is_space(s[q])) ++q;
    }
    const std::size_t digits = q;
    long long v = 0;
    while (q < s.size() && std::isdigit(static_cast<unsigned char>(s[q]))) {
        v = v * 10 + (s[q] - '0');
        if (v > (1 << 20)) throw ScheduleFormatError(fmt::format("{}: rank number too large", where));
        ++q;
    }
    if (q == digits) {
        if (word) throw ScheduleFormatError(fmt::format("{}: expected a rank number after 'rank'", where));
        return false;
    }
    std::size_t c = q;
    while (c < s.size() && is_space(s[c])) ++c;
    if (c >= s.size() || s[c] != ':') {
        if (word) throw ScheduleFormatError(fmt::format("{}: expected ':' after 'rank {}'", where, v));
        return false;  // an action such as 0F0 starts with digits too
    }
    rank = static_cast<int>(v);
    pos = c + 1;
    return true;
}

}  // namespace

FileFormat format_from_path(const std::string& path) {
    return lower_ascii(std::filesystem::path(path).extension().string()) == ".csv" ? FileFormat::csv
                                                                                   : FileFormat::text;
}

Schedule read_schedule_text(std::istream& in, const std::string& source) {
    Builder b(source);
    std::string line;
    int lineno = 0;
    while (next_line(in, line)) {
        ++lineno;
        if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
        std::size_t pos = 0;
        int rank = -1;
        if (parse_rank_header(line, pos, rank, fmt::format("{}:{}:{}", source, lineno, 1)))
            b.start_rank(rank, lineno, 1);
        // Tokens separated by spaces and commas; brackets ignored.
        while (pos < line.size()) {
            const char c = line[pos];
            if (is_space(c) || c == ',' || c == '[' || c == ']') {
                ++pos;
                continue;
            }
            const std::size_t start = pos;
            if (c == '(') {  // an OVERLAP_F_B pair: its sub-actions may have spaces around them
                const std::size_t close = line.find(')', pos);
                pos = close == std::string::npos ? line.size() : close;
            }
            while (pos < line.size() && !is_space(line[pos]) && line[pos] != ',' && line[pos] != '[' &&
                   line[pos] != ']')
                ++pos;
            const std::string token = line.substr(start, pos - start);
            const int column = static_cast<int>(start) + 1;
            if (token == "None") continue;
            if (b.current() < 0)
                throw ScheduleFormatError(fmt::format("{}:{}:{}: expected 'rank N:' before the first action, got '{}'",
                                                      source, lineno, column, shorten(token)));
            try {
                for (const Action& a : parse_slot(token)) b.add(a, Location{lineno, column, 0});
            } catch (const std::invalid_argument& e) {
                throw ScheduleFormatError(fmt::format("{}:{}:{}: rank {}: {}", source, lineno, column, b.current(),
                                                      shorten_quotes(e.what())));
            }
        }
    }
    return b.finish();
}

Schedule read_schedule_csv(std::istream& in, const std::string& source) {
    Builder b(source);
    struct Cell {
        std::string text;
        int line;
    };
    std::vector<std::vector<Cell>> rows;
    std::vector<int> row_line;
    std::string line;
    int lineno = 0;
    while (next_line(in, line)) {
        ++lineno;
        std::vector<Cell> cells;
        row_line.push_back(lineno);
        if (line.empty()) {  // csv.reader: an empty line is an empty row
            rows.push_back(std::move(cells));
            continue;
        }
        std::string cell;
        std::size_t i = 0;
        bool quoted_cell = false;
        for (;;) {
            if (i < line.size() && line[i] == '"' && cell.find_first_not_of(" \t") == std::string::npos) {
                // A quoted field, possibly spanning lines.
                quoted_cell = true;
                cell.clear();
                ++i;
                for (;;) {
                    if (i >= line.size()) {
                        std::string more;
                        if (!next_line(in, more))
                            throw ScheduleFormatError(fmt::format("{}:{}: cell {} (rank {}): unterminated quoted field",
                                                                  source, row_line.back(), cells.size() + 1,
                                                                  rows.size()));
                        ++lineno;
                        cell += '\n';
                        line = std::move(more);
                        i = 0;
                        continue;
                    }
                    if (line[i] == '"') {
                        if (i + 1 < line.size() && line[i + 1] == '"') {
                            cell += '"';
                            i += 2;
                            continue;
                        }
                        ++i;
                        break;
                    }
                    cell += line[i++];
                }
            }
            if (i >= line.size() || line[i] == ',') {
                cells.push_back(Cell{cell, row_line.back()});
                cell.clear();
                quoted_cell = false;
                if (i >= line.size()) break;
                ++i;
                continue;
            }
            if (quoted_cell)
                throw ScheduleFormatError(fmt::format("{}:{}: cell {} (rank {}): unexpected '{}' after a quoted field",
                                                      source, row_line.back(), cells.size() + 1, rows.size(), line[i]));
            cell += line[i++];
        }
        rows.push_back(std::move(cells));
    }
    for (std::size_t r = 0; r < rows.size(); ++r) {
        b.start_rank(static_cast<int>(r), row_line[r], 1);
        for (std::size_t c = 0; c < rows[r].size(); ++c) {
            const std::string& text = rows[r][c].text;
            if (text.find_first_not_of(" \t") == std::string::npos) continue;  // an idle slot (None)
            try {
                for (const Action& a : parse_slot(text)) b.add(a, Location{row_line[r], 0, static_cast<int>(c) + 1});
            } catch (const std::invalid_argument& e) {
                throw ScheduleFormatError(
                    fmt::format("{}:{}: cell {} (rank {}): {}", source, row_line[r], c + 1, r, shorten_quotes(e.what())));
            }
        }
    }
    return b.finish();
}

namespace {
std::ifstream open_in(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw ScheduleFormatError(fmt::format("{}: cannot open: it is a directory", path));
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        const int err = errno;
        throw ScheduleFormatError(err != 0 ? fmt::format("{}: cannot open: {}", path, detail::errno_text(err))
                                           : fmt::format("{}: cannot open", path));
    }
    return in;
}
}  // namespace

Schedule read_schedule_file(const std::string& path) {
    std::ifstream in = open_in(path);
    Schedule s = format_from_path(path) == FileFormat::csv ? read_schedule_csv(in, path) : read_schedule_text(in, path);
    s.name = std::filesystem::path(path).stem().string();
    return s;
}

void write_schedule_text(const Schedule& s, std::ostream& out) {
    out << fmt::format("# dtsim pipeline schedule{}: {} ranks, {} stages, {} microbatches{}\n",
                       s.name.empty() ? "" : " " + s.name, s.num_ranks(), s.num_stages(), s.num_microbatches(),
                       s.lowered() ? ", with communication actions" : "");
    out << "# rank R: its actions in order; <stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><microbatch>\n";
    for (int r = 0; r < s.num_ranks(); ++r) {
        std::string line = fmt::format("rank {}:", r);
        for (const auto& a : action_strings(s.ranks[static_cast<std::size_t>(r)])) {
            line += ' ';
            line += a;
        }
        out << line << '\n';
    }
}

void write_schedule_csv(const Schedule& s, std::ostream& out) {
    for (const auto& rank : s.ranks) {
        std::string line;
        const std::vector<std::string> cells = action_strings(rank);
        for (std::size_t i = 0; i < cells.size(); ++i) {
            if (i > 0) line += ',';
            line += cells[i];
        }
        out << line << '\n';
    }
}

void write_schedule_file(const Schedule& s, const std::string& path) {
    const bool csv = format_from_path(path) == FileFormat::csv;
    detail::write_output_file(path, [&](std::ostream& out) {
        if (csv)
            write_schedule_csv(s, out);
        else
            write_schedule_text(s, out);
    });
}

}  // namespace dtsim::sched

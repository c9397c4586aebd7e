// A progress line for a long command, on standard output when it is a terminal (never on a pipe or
// a file, so output compared byte for byte never holds one): shown once the command has run for a
// second, redrawn at most five times a second, and erased (clear) before the result prints.
#pragma once

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace dtsim::cli {

class Progress {
public:
    Progress() : terminal_(isatty(fileno(stdout)) != 0) {}
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;
    ~Progress() { clear(); }

    // Whether a line would be drawn now: the caller builds its text only then.
    [[nodiscard]] bool due() const {
        if (!terminal_) return false;
        const auto now = Clock::now();
        return now - start_ >= std::chrono::seconds(1) && now - shown_at_ >= std::chrono::milliseconds(200);
    }
    void show(const std::string& text) {
        shown_at_ = Clock::now();
        shown_ = true;
        fmt::print("\r\033[K{}", text);
        std::fflush(stdout);
    }
    void clear() {
        if (!shown_) return;
        fmt::print("\r\033[K");
        std::fflush(stdout);
        shown_ = false;
    }
    [[nodiscard]] double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

private:
    using Clock = std::chrono::steady_clock;
    bool terminal_, shown_ = false;
    Clock::time_point start_ = Clock::now(), shown_at_ = start_;
};

}  // namespace dtsim::cli

// Output files: written to a temporary file beside the final name and renamed onto it when
// complete (see dtsim/detail/output_file.hpp).
#include "dtsim/detail/errno_text.hpp"
#include "dtsim/detail/output_file.hpp"

#include "dtsim/interrupt.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <ostream>
#include <stdexcept>
#include <streambuf>
#include <vector>

namespace dtsim::detail {
namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
    throw std::runtime_error(err != 0 ? fmt::format("{}: {}: {}", path, what, errno_text(err))
                                      : fmt::format("{}: {}", path, what));
}

// A stream buffer over a file descriptor that keeps the reason of the first failed write, and
// stops writing (and records the request) once an interrupt is requested: it looks for one each
// time it writes its buffer out.
class FileBuffer : public std::streambuf {
public:
    explicit FileBuffer(int fd) : fd_(fd), buffer_(kSize) { setp(buffer_.data(), buffer_.data() + buffer_.size()); }
    [[nodiscard]] int error() const { return error_; }
    [[nodiscard]] int interrupted() const { return interrupted_; }

protected:
    int_type overflow(int_type ch) override {
        if (!drain()) return traits_type::eof();
        if (!traits_type::eq_int_type(ch, traits_type::eof())) {
            *pptr() = traits_type::to_char_type(ch);
            pbump(1);
        }
        return traits_type::not_eof(ch);
    }

    std::streamsize xsputn(const char* s, std::streamsize n) override {
        if (n <= epptr() - pptr() || (drain() && n < static_cast<std::streamsize>(buffer_.size()))) {
            if (error_ != 0 || interrupted_ != 0) return 0;
            std::memcpy(pptr(), s, static_cast<std::size_t>(n));
            pbump(static_cast<int>(n));
            return n;
        }
        return put(s, static_cast<std::size_t>(n)) ? n : 0;  // a large write goes out as it is
    }

    int sync() override { return drain() ? 0 : -1; }

private:
    static constexpr std::size_t kSize = std::size_t{1} << 16;

    bool drain() {
        const auto n = static_cast<std::size_t>(pptr() - pbase());
        setp(buffer_.data(), buffer_.data() + buffer_.size());
        return n == 0 ? error_ == 0 && interrupted_ == 0 : put(buffer_.data(), n);
    }

    bool put(const char* p, std::size_t n) {
        if (error_ != 0 || interrupted_ != 0) return false;
        if ((interrupted_ = interrupt_requested()) != 0) return false;
        while (n > 0) {
            const ssize_t w = ::write(fd_, p, std::min<std::size_t>(n, std::size_t{1} << 30));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                error_ = w < 0 ? errno : EIO;
                return false;
            }
            p += w;
            n -= static_cast<std::size_t>(w);
        }
        return true;
    }

    int fd_;
    std::vector<char> buffer_;
    int error_ = 0;
    int interrupted_ = 0;
};

// Runs the writer on the open file `fd` and closes it; throws (the file closed) when anything fails.
void write_and_close(int fd, const std::string& path, const std::function<void(std::ostream&)>& write) {
    FileBuffer buffer(fd);
    std::ostream out(&buffer);
    try {
        write(out);
        out.flush();
    } catch (...) {
        ::close(fd);
        if (buffer.interrupted() != 0) throw Interrupted(buffer.interrupted());
        if (buffer.error() != 0) fail(path, "write failed", buffer.error());  // rather than the writer's words for it
        throw;
    }
    if (buffer.interrupted() != 0) {
        ::close(fd);
        throw Interrupted(buffer.interrupted());
    }
    if (buffer.error() != 0 || !out) {
        ::close(fd);
        fail(path, "write failed", buffer.error());
    }
    if (::close(fd) != 0) fail(path, "write failed", errno);  // a delayed write error (NFS, a full quota)
}

// ".NAME.tmp.PID" beside NAME (with NAME shortened to keep the name within NAME_MAX bytes), and a
// number after it where a file of that name is left from an earlier run.
std::string temporary_name(const std::string& folder, const std::string& name, int attempt) {
    std::string tail = fmt::format(".tmp.{}", static_cast<long>(::getpid()));
    if (attempt > 0) tail += fmt::format(".{}", attempt);
    const std::size_t room = NAME_MAX - 1 - tail.size();
    return folder + "." + name.substr(0, room) + tail;
}

}  // namespace

void write_output_file(const std::string& path, const std::function<void(std::ostream&)>& write) {
    if (path.empty()) throw std::runtime_error("cannot write a file without a name");
    struct stat target {};
    struct stat link {};
    const bool exists = ::stat(path.c_str(), &target) == 0;  // what a symbolic link points to
    const bool symlink = ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
    if (exists && S_ISDIR(target.st_mode)) fail(path, "cannot open for writing", EISDIR);

    // Not a regular file (a device, a FIFO) or a symbolic link: in place.
    if (symlink || (exists && !S_ISREG(target.st_mode))) {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0) fail(path, "cannot open for writing", errno);
        write_and_close(fd, path, write);
        return;
    }

    const auto slash = path.rfind('/');
    const std::string folder = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    const std::string name = path.substr(folder.size());
    // A file that cannot be written is not replaced either.
    if (exists && ::access(path.c_str(), W_OK) != 0) fail(path, "cannot open for writing", errno);
    if (name.size() > NAME_MAX) fail(path, "cannot open for writing", ENAMETOOLONG);
    std::string temporary;
    int fd = -1;
    for (int attempt = 0; fd < 0; ++attempt) {
        temporary = temporary_name(folder, name, attempt);
        fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && (errno != EEXIST || attempt == 100)) fail(path, "cannot open for writing", errno);
    }
    // A file that is replaced keeps its permissions.
    if (exists) (void)::fchmod(fd, target.st_mode & 07777);
    try {
        write_and_close(fd, path, write);
    } catch (...) {
        ::unlink(temporary.c_str());
        throw;
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(temporary.c_str());
        fail(path, "cannot put the written file in place", err);
    }
}

void write_output_file(const std::string& path, std::string_view bytes) {
    write_output_file(path, [bytes](std::ostream& out) {
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    });
}

}  // namespace dtsim::detail

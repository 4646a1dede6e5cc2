// Reading and owning source files.
#include <dsl/base/source.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

namespace dsl {

std::string_view SourceFile::line_text(unsigned line) const {
    if (line == 0) return {};
    std::size_t begin = 0;
    for (unsigned l = 1; l < line; ++l) {
        begin = text.find('\n', begin);
        if (begin == std::string::npos) return {};
        ++begin;
    }
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view view(text.data() + begin, end - begin);
    if (!view.empty() && view.back() == '\r') view.remove_suffix(1);
    return view;
}

namespace {

// Why a file of this type is not read, or null for a regular file.
const char* not_regular(mode_t mode) {
    if (S_ISREG(mode)) return nullptr;
    if (S_ISDIR(mode)) return "it is a directory, not a regular file";
    if (S_ISFIFO(mode)) return "it is a FIFO (named pipe), not a regular file";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "it is a device, not a regular file";
    if (S_ISSOCK(mode)) return "it is a socket, not a regular file";
    return "it is not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, std::string& error) {
    // Looked at before opening (opening a FIFO waits for a writer; a device may act on being opened), and
    // again after, through the descriptor, in case the name changed in between.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        error = std::strerror(errno);
        return -1;
    }
    if (const char* why = not_regular(st.st_mode)) {
        error = why;
        return -1;
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        error = std::strerror(errno);
        return -1;
    }
    if (::fstat(fd, &st) != 0 || not_regular(st.st_mode)) {
        error = not_regular(st.st_mode) ? not_regular(st.st_mode) : std::strerror(errno);
        ::close(fd);
        return -1;
    }
    return fd;
}

bool read_regular_file(const std::string& path, std::string& text, std::string& error) {
    const int fd = open_regular_file(path, error);
    if (fd < 0) return false;
    text.clear();
    char buffer[65536];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            error = std::strerror(errno);
            ::close(fd);
            return false;
        }
        if (n == 0) break;
        text.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return true;
}

const SourceFile* SourceManager::load(const std::string& path) {
    std::string text;
    if (!read_regular_file(path, text, last_error_)) return nullptr;
    return add(path, std::move(text));
}

const SourceFile* SourceManager::add(std::string path, std::string text) {
    files_.push_back(SourceFile{std::move(path), std::move(text)});
    return &files_.back();
}

}  // namespace dsl

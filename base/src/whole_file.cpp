// Whole-or-nothing files: a temporary file beside the destination, synced, renamed into place.
#include <dsl/base/whole_file.hpp>

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsl {

namespace fs = std::filesystem;

namespace {

fs::path folder_of(const std::string& path) {
    const fs::path p(path);
    return p.has_parent_path() ? p.parent_path() : fs::path(".");
}

void sync_folder(const fs::path& folder) {
    const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

}  // namespace

std::string this_host() {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    std::string host(name);
    for (char& c : host)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
    return host.empty() ? "unknown" : host;
}

std::string writer_tag(const Writer& w) { return fmt::format("{}-{}", w.pid, w.host); }

Writer this_writer() { return Writer{static_cast<long>(::getpid()), this_host()}; }

std::optional<Writer> writer_of(std::string_view tag) {
    const std::size_t dash = tag.find('-');
    if (dash == 0 || dash == std::string_view::npos || dash > 9 || dash + 1 == tag.size()) return std::nullopt;
    const std::string_view digits = tag.substr(0, dash), host = tag.substr(dash + 1);
    if (digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
    for (char c : host)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return std::nullopt;
    return Writer{std::stol(std::string(digits)), std::string(host)};
}

bool writer_ended(const Writer& w) { return w.host == this_host() && process_ended(w.pid); }

std::string temporary_beside(const std::string& path, const Writer& writer) {
    const fs::path p(path);
    return (folder_of(path) / fmt::format(".{}.tmp-{}", p.filename().string(), writer_tag(writer))).string();
}

std::string temporary_beside(const std::string& path, long pid) { return temporary_beside(path, {pid, this_host()}); }

std::string temporary_beside(const std::string& path) { return temporary_beside(path, static_cast<long>(::getpid())); }

namespace {

// Whether process `pid` has ended but is not yet reaped by its parent (state Z in /proc/PID/stat, after the
// parenthesized name): a rank that mpirun ended may stay so a moment after the command is over.
bool zombie(long pid) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string line;
    if (!std::getline(stat, line)) return false;
    const std::size_t name_end = line.rfind(')');
    return name_end != std::string::npos && name_end + 2 < line.size() && line[name_end + 2] == 'Z';
}

}  // namespace

bool process_ended(long pid) {
    if (pid == static_cast<long>(::getpid())) return false;
    if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
    return zombie(pid);
}

std::vector<std::string> remove_debris(const std::string& path) {
    std::vector<std::string> removed;
    const std::string prefix = "." + fs::path(path).filename().string() + ".tmp-";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(folder_of(path), ec)) {
        const std::string f = e.path().filename().string();
        if (f.size() <= prefix.size() || f.compare(0, prefix.size(), prefix) != 0) continue;
        const auto writer = writer_of(std::string_view(f).substr(prefix.size()));
        if (!writer) continue;
        std::error_code type_ec;
        if (!fs::is_regular_file(fs::symlink_status(e.path(), type_ec))) continue;
        if (writer_ended(*writer) && ::unlink(e.path().c_str()) == 0) removed.push_back(e.path().string());
    }
    return removed;
}

int move_into_place(const std::string& temp, const std::string& path, bool replace) {
    // link() fails where anything has the name: the no-replace move, on every POSIX file system.
    if (replace ? ::rename(temp.c_str(), path.c_str()) != 0 : ::link(temp.c_str(), path.c_str()) != 0) return errno;
    if (!replace) ::unlink(temp.c_str());
    sync_folder(folder_of(path));
    return 0;
}

bool write_whole(const std::string& path, const std::string& bytes, bool replace, std::string& why) {
    WholeFile f(path);
    if (f.write(bytes) && f.commit(replace)) return true;
    why = f.error();
    return false;
}

WholeFile::WholeFile(std::string path) : path_(std::move(path)), temp_(temporary_beside(path_)) {
    remove_debris(path_);
    ::unlink(temp_.c_str());  // this process's own, from an earlier write that ended without removing it
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(errno);
}

WholeFile::~WholeFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_.empty()) ::unlink(temp_.c_str());
}

void WholeFile::fail(int err) {
    if (error_.empty()) error_ = fmt::format("cannot write '{}': {}", path_, std::strerror(err != 0 ? err : EIO));
}

bool WholeFile::write(std::string_view bytes) {
    for (std::size_t done = 0; ok() && done < bytes.size();) {
        const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail(n < 0 ? errno : ENOSPC);
        if (n > 0) done += static_cast<std::size_t>(n);
    }
    return ok();
}

bool WholeFile::commit(bool replace) {
    if (!ok()) return false;
    if (::fsync(fd_) != 0) fail(errno);
    const int closed = ::close(fd_);
    fd_ = -1;
    if (closed != 0) fail(errno);
    if (!ok()) return false;
    if (const int err = move_into_place(temp_, path_, replace); err == EEXIST) {
        error_ = fmt::format("'{}' exists; it is left as it is (--force replaces it)", path_);
        return false;
    } else if (err != 0) {
        fail(err);
        return false;
    }
    temp_.clear();
    return true;
}

}  // namespace dsl

// One writer per checkpoint folder: a lock file beside it that names its holder (process and machine), held
// with flock, which the kernel releases however the holder ends; a lock left by a process of another machine
// is never taken as stale from here.
#include <dsl/backend/checkpoint.hpp>

#include <dsl/base/whole_file.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsl::backend {

namespace fs = std::filesystem;

namespace {

fs::path lock_path(const std::string& dir) {
    fs::path target = fs::path(dir).lexically_normal();
    if (!target.has_filename()) target = target.parent_path();
    const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
    return parent / fmt::format(".{}.lock", target.filename().string());
}

// Who holds the lock open at `fd`, as its holder wrote it ("process 12 on host 'a'").
std::string holder_of(int fd) {
    char text[512] = {};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    std::string h(text, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    while (!h.empty() && h.back() == '\n') h.pop_back();
    return h.empty() ? "another process" : h;
}

std::string held_message(const std::string& dir, const fs::path& lock, int fd) {
    return fmt::format(
        "'{}' is being saved into by another run ({}, holding '{}'); two runs saving into one folder would replace "
        "each other's checkpoints: wait for it to end, or save elsewhere",
        dir, holder_of(fd), lock.string());
}

// The machine a lock's text names ("process 12 on host 'a'"); none where it names none.
std::optional<std::string> host_of(const std::string& holder) {
    const std::string key = " on host '";
    const std::size_t at = holder.find(key);
    if (at == std::string::npos) return std::nullopt;
    const std::size_t end = holder.find('\'', at + key.size());
    if (end == std::string::npos) return std::nullopt;
    return holder.substr(at + key.size(), end - at - key.size());
}

// Why flock failed, and what a user of a shared file system does about it.
std::string lock_failure(const fs::path& lock, int err) {
    const bool unsupported = err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK || err == EINVAL;
    return fmt::format("cannot lock '{}': {}{}", lock.string(), std::strerror(err),
                       unsupported ? " (the file system takes no locks: on Lustre, mount it with -o flock; on NFS, "
                                     "without -o nolock or local_lock)"
                                   : "");
}

}  // namespace

SaveLock::~SaveLock() {
    if (fd_ < 0) return;
    ::unlink(path_.c_str());  // while still held: a run that opened it meanwhile finds it gone, and tries again
    ::close(fd_);
}

std::unique_ptr<SaveLock> lock_checkpoint_folder(const std::string& dir, std::string& error) {
    const fs::path lock = lock_path(dir);
    std::error_code ec;
    fs::create_directories(lock.parent_path(), ec);
    for (int attempt = 0; attempt < 100; ++attempt) {
        const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
            error = fmt::format("cannot create the lock '{}': {}", lock.string(), std::strerror(errno));
            return nullptr;
        }
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            error = err == EWOULDBLOCK ? held_message(dir, lock, fd) : lock_failure(lock, err);
            ::close(fd);
            return nullptr;
        }
        // The file held must be the one under the name: a holder that ended may have removed it meanwhile.
        struct stat held {
        }, named{};
        if (::fstat(fd, &held) == 0 && ::stat(lock.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
            held.st_ino == named.st_ino) {
            // A lock file is removed by its holder when it lets go; one still here was left by a holder that
            // ended without doing so. Of this machine, flock says it ended (the kernel let its lock go). Of
            // another, nothing here can say: flock may reach only this machine (Lustre's localflock, NFS's
            // local_lock), so its run may still be saving. It stays refused until that machine's run takes
            // it again, or the user, knowing the run has ended, removes the file.
            const std::string holder = holder_of(fd);
            const auto host = host_of(holder);
            const Writer me = this_writer();
            if (host && *host != me.host) {
                error = fmt::format(
                    "'{}' may be being saved into by another run ({}, holding '{}'); from this machine nothing can "
                    "tell whether that run has ended: if it has, remove '{}' and run again",
                    dir, holder, lock.string(), lock.string());
                ::close(fd);
                return nullptr;
            }
            const std::string text = fmt::format("process {} on host '{}'\n", me.pid, me.host);
            if (::ftruncate(fd, 0) != 0 ||
                ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
                error = fmt::format("cannot write the lock '{}': {}", lock.string(), std::strerror(errno));
                ::unlink(lock.c_str());
                ::close(fd);
                return nullptr;
            }
            return std::unique_ptr<SaveLock>(new SaveLock(lock.string(), fd));
        }
        ::close(fd);
    }
    error = fmt::format("cannot lock '{}': it keeps being replaced", lock.string());
    return nullptr;
}

}  // namespace dsl::backend

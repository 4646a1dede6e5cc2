// A data file watched while a run reads it (data_files.cpp, collections.cpp).
#pragma once

#include <dsl/backend/watchdog.hpp>
#include <dsl/base/error.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <string>
#include <utility>

namespace dsl::backend::data {

// True on the thread that reads ahead of the step (prefetch.cpp): its reads are not the process's waits (the
// step's wait for them is), so the watchdog is not told of them.
inline thread_local bool reading_ahead = false;

// A data file watched while a run reads it: its size and modification time as opened, checked before every
// read through a descriptor of its own, so that a file rewritten in place (cut short, or refilled with another
// shape) stops the run with a user error naming it, and one replaced by rename keeps being read as opened.
class FileGuard {
public:
    FileGuard() = default;
    explicit FileGuard(const std::string& path)
        : path_(path),
          reading_("a read of '" + path + "'"),
          fd_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)) {
        if (fd_ >= 0) ::fstat(fd_, &opened_);
    }
    // A file opened again after the run checked it (a collection's, whose files are not all kept open):
    // `checked` is its status then, so that a file rewritten or replaced in between is a change too.
    FileGuard(const std::string& path, const struct stat& checked) : FileGuard(path) {
        if (fd_ < 0) return;
        replaced_ = opened_.st_ino != checked.st_ino || opened_.st_dev != checked.st_dev;
        opened_ = checked;
    }
    FileGuard(FileGuard&& o) noexcept
        : path_(std::move(o.path_)),
          reading_(std::move(o.reading_)),
          fd_(std::exchange(o.fd_, -1)),
          opened_(o.opened_),
          replaced_(o.replaced_) {}
    FileGuard& operator=(FileGuard&& o) noexcept {
        std::swap(path_, o.path_);
        std::swap(reading_, o.reading_);
        std::swap(fd_, o.fd_);
        std::swap(opened_, o.opened_);
        std::swap(replaced_, o.replaced_);
        return *this;
    }
    ~FileGuard() {
        if (fd_ >= 0) ::close(fd_);
    }
    // Runs `read`; a failure of it in a file that changed meanwhile is said as the change.
    template <typename F>
    void read(F&& read) const {
        check();
        if (reading_ahead) return checked(read);
        // A read that never returns (a file system that hangs) is named by the watchdog.
        const Awaiting watched(reading_.c_str(), -1);
        checked(read);
    }
    void check() const {
        struct stat now {};
        if (fd_ < 0 || ::fstat(fd_, &now) != 0) return;
        std::string what;
        if (replaced_)
            what = "another file took its name since the run checked it";
        else if (now.st_size != opened_.st_size)
            what = fmt::format("its size went from {} to {} bytes", opened_.st_size, now.st_size);
        else if (now.st_mtim.tv_sec != opened_.st_mtim.tv_sec || now.st_mtim.tv_nsec != opened_.st_mtim.tv_nsec)
            what = "it was written (its modification time changed)";
        if (what.empty()) return;
        throw UserError(fmt::format(
            "{}: the file changed while the run read it: {}; a file rewritten in place under a run mixes two data "
            "sets (replace it by renaming a new file over it instead, which the run does not see)",
            path_, what));
    }

private:
    template <typename F>
    void checked(F&& read) const {
        try {
            read();
        } catch (const UserError&) {
            check();
            throw;
        }
    }

    std::string path_, reading_;  // the file, and "a read of 'FILE'" for the watchdog
    int fd_ = -1;
    struct stat opened_ {};
    bool replaced_ = false;  // opened again, another file than the one checked
};

}  // namespace dsl::backend::data

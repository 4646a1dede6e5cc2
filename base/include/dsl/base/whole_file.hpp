// Files written whole or not at all: under a temporary name beside their destination (".NAME.tmp-PID"),
// flushed to the disk, and moved into place only when whole, so that a reader of the destination sees the
// earlier file or the new one, never a part; the debris of a killed write is removed by the next write.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsl {

// ".NAME.tmp-PID" beside `path`: where process `pid` writes `path` until it is whole.
std::string temporary_beside(const std::string& path, long pid);
std::string temporary_beside(const std::string& path);  // this process's

// Whether process `pid` no longer runs on this machine (its temporary files are debris): gone, or ended and
// not yet reaped.
bool process_ended(long pid);

// Removes the temporary files beside `path` (".NAME.tmp-PID", regular files) that writes of processes no
// longer running left behind: the names removed. A process of another machine writing there meanwhile is
// not told from an ended one; dsl's writers are its first process, on the machine that started the command.
std::vector<std::string> remove_debris(const std::string& path);

// Moves the whole file `temp` to `path`, replacing what is there where `replace`, else failing with EEXIST
// where anything is; then makes the folder's change durable. 0, or the errno of the failure (`temp` is
// left for the caller to remove).
int move_into_place(const std::string& temp, const std::string& path, bool replace);

// Writes `bytes` to `path` whole or not at all, as above; an earlier `path` is replaced only where
// `replace`. False with `why` naming the file ("cannot write 'F': No space left on device", "'F' exists;
// ...") on failure, with the earlier file as it was.
bool write_whole(const std::string& path, const std::string& bytes, bool replace, std::string& why);

// A file written in pieces (a trace, measured times) into temporary_beside(path) until commit() moves it
// into place; removed when destroyed uncommitted. Every write is checked: once one fails, ok() is false and
// error() names the file and the reason.
class WholeFile {
public:
    explicit WholeFile(std::string path);
    ~WholeFile();
    WholeFile(const WholeFile&) = delete;
    WholeFile& operator=(const WholeFile&) = delete;

    bool write(std::string_view bytes);
    // Flushes, syncs and moves the file into place (replacing what is there where `replace`).
    bool commit(bool replace = true);
    bool ok() const { return error_.empty(); }
    const std::string& error() const { return error_; }

private:
    void fail(int err);

    std::string path_, temp_, error_;
    int fd_ = -1;
};

}  // namespace dsl

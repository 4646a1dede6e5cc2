// Files written whole or not at all: under a temporary name beside their destination (".NAME.tmp-PID-HOST"),
// flushed to the disk, and moved into place only when whole, so that a reader of the destination sees the
// earlier file or the new one, never a part; the debris of a killed write is removed by the next write.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsl {

// This machine's name as temporary names and locks record it: gethostname's, each character outside
// [A-Za-z0-9._-] written '_', so that it fits in a file name.
std::string this_host();

// The process that wrote a temporary name, as the name records it: "PID-HOST" (".NAME.tmp-PID-HOST").
// On a file system that several machines share, a process number alone says nothing: the host does.
struct Writer {
    long pid = 0;
    std::string host;
};
std::string writer_tag(const Writer& w);                // "PID-HOST"
Writer this_writer();                                   // this process, on this machine
std::optional<Writer> writer_of(std::string_view tag);  // the writer a tag names; none where it is not one
// Whether `w` has ended, provably: a process of this machine that is gone, or ended and not yet reaped. A
// process of another machine is never judged ended from here, whatever this machine's processes are.
bool writer_ended(const Writer& w);

// ".NAME.tmp-PID-HOST" beside `path`: where process `pid` of this machine writes `path` until it is whole.
std::string temporary_beside(const std::string& path, const Writer& writer);
std::string temporary_beside(const std::string& path, long pid);  // of this machine
std::string temporary_beside(const std::string& path);            // this process's

// Whether process `pid` no longer runs on this machine (its temporary files are debris): gone, or ended and
// not yet reaped.
bool process_ended(long pid);

// Removes the temporary files beside `path` (".NAME.tmp-PID-HOST", regular files) that writes of ended
// processes of this machine left behind: the names removed. Those of other machines, and names without a
// host (of an older dsl), are left: nothing here can tell that their writer has ended.
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

// Source files owned for the whole run, and locations (1-based line and column) that point into them.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace dsl {

// Every input file is opened here: only a regular file, so that a FIFO (which would wait for a writer
// forever), a device such as /dev/zero (which never ends) or a folder is refused at once. The descriptor
// (close it), or -1 with `error` saying why.
int open_regular_file(const std::string& path, std::string& error);

// A regular file's whole text; false with `error` saying why.
bool read_regular_file(const std::string& path, std::string& text, std::string& error);

struct SourceFile {
    std::string path;  // as the user named it, for messages
    std::string text;

    // The text of 1-based line `line`, without its newline; empty when out of range.
    std::string_view line_text(unsigned line) const;
};

struct Location {
    const SourceFile* file = nullptr;  // null: no place in a file (a command-line value, say)
    unsigned line = 0;                 // 1-based
    unsigned col = 0;                  // 1-based, in bytes
    unsigned length = 1;               // span under the caret

    bool known() const { return file != nullptr && line > 0; }
};

// Owns every file read during a run; the addresses of its files never change, so locations stay valid.
class SourceManager {
public:
    // Reads `path`; nullopt when it cannot be read (the caller reports why, with `last_error()`).
    const SourceFile* load(const std::string& path);
    const SourceFile* add(std::string path, std::string text);
    const std::string& last_error() const { return last_error_; }

private:
    std::deque<SourceFile> files_;
    std::string last_error_;
};

}  // namespace dsl

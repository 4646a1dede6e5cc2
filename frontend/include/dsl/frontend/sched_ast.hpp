// The owned syntax tree of a `.sched` file: global settings and per-layer entries, as written.
#pragma once

#include <dsl/base/source.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dsl::frontend {

// value ::= integer | name | string | '?'        '?' leaves the value open for the auto-scheduler
struct SchedValue {
    enum class Kind { integer, word, string, open };
    Kind kind = Kind::open;
    std::int64_t integer = 0;
    std::string text;  // Kind::word and Kind::string
    Location loc;
};

// setting ::= name '=' value
struct Setting {
    std::string key;
    Location loc;  // of the key
    SchedValue value;
};

// entry ::= ('default' | 'layer' pattern | 'block' name) {setting}
// pattern ::= a layer name, where '*' matches any run of characters (dots included)
struct SchedEntry {
    enum class Selector { all, layer, block };  // all: the `default` entry
    Selector selector = Selector::all;
    std::string pattern;  // empty for `default`
    Location loc;         // of the keyword
    Location pattern_loc;
    std::vector<Setting> settings;
};

// file ::= {setting | entry}       top-level settings: procs, platform, batch
struct SchedFile {
    const SourceFile* source = nullptr;
    std::vector<Setting> globals;
    std::vector<SchedEntry> entries;
};

}  // namespace dsl::frontend

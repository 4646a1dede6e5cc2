// The owned syntax tree of a `.platform` file: settings and measured times, as written.
#pragma once

#include <dsl/base/source.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dsl::frontend {

// value ::= number [unit] | word        `16 GiB`, `0.6`, `gpu`
struct PlatformValue {
    enum class Kind { number, word };
    Kind kind = Kind::number;
    double number = 0.0;
    std::string number_text;  // as written, so that printing gives the same text back
    std::string unit;         // empty when none is written; `GB/s`, `us`
    std::string word;         // Kind::word
    Location loc;             // of the whole value, number and unit
    Location unit_loc;        // of the unit, when there is one

    std::string text() const;  // as written: the number and its unit, or the word
};

// setting ::= key '=' value
struct PlatformSetting {
    std::string key;
    Location loc;  // of the key
    PlatformValue value;
};

// field ::= name '=' dims        `x=1x18x65x65`
struct PlatformField {
    std::string key;
    std::vector<std::int64_t> dims;
    Location loc;  // of the name
};

// measurement ::= 'time' kernel {field} '=' number unit
struct PlatformTime {
    std::string kernel;  // `conv.forward`
    Location loc;        // of the keyword
    Location kernel_loc;
    std::vector<PlatformField> fields;  // in file order
    PlatformValue value;
};

// file ::= {setting | measurement}
struct PlatformFile {
    const SourceFile* source = nullptr;
    std::vector<PlatformSetting> settings;
    std::vector<PlatformTime> times;
};

}  // namespace dsl::frontend

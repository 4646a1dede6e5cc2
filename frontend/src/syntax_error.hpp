// Where and how the parsers report a syntax error: shared so that errors in every language read alike.
#pragma once

#include <dsl/base/source.hpp>

#include <tao/pegtl.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsl::frontend {

// Line and column of a byte offset.
Location location_at(const SourceFile& file, std::size_t offset, unsigned length = 1);

// The offset just past the token before `pos`, skipping blanks and comments backwards, so that a missing
// ')' or '=' is reported where it belongs, as clang does, rather than at the start of the next line.
std::size_t end_of_previous_token(std::string_view text, std::size_t pos);

// Where a grammar error at `offset` with `message` is shown: a missing piece of punctuation ("expected
// '='"), or anything missing at the end of the file, just after the token it should follow.
std::size_t error_offset(std::string_view text, std::size_t offset, std::string_view message);

// A size as a location's column or length, at most the largest unsigned.
unsigned clamp_unsigned(std::size_t n);

// The integer an integer literal of digits spells; false when it does not fit in 64 bits.
bool parse_integer(std::string_view digits, std::int64_t& value);

// "unexpected character '$'"; a byte that does not print is shown as '\xC3'.
std::string unexpected_character(std::string_view text, std::size_t offset);

// What the `.sched` and `.platform` parsers' actions share: the file, the location of what a rule matched,
// and errors that an action raises over what it matched (a literal out of range).
struct ActionState {
    const SourceFile* file = nullptr;
    // The span of an error raised by an action, which a position alone lacks.
    unsigned error_length = 1;

    template <typename ActionInput>
    Location loc(const ActionInput& in) const {
        const auto p = in.position();
        return Location{file, clamp_unsigned(p.line), clamp_unsigned(p.column), clamp_unsigned(in.size())};
    }

    template <typename ActionInput>
    [[noreturn]] void fail(const ActionInput& in, const char* message) {
        error_length = clamp_unsigned(in.size());
        throw tao::pegtl::parse_error(message, in);
    }

    // The integer literal `in` spells.
    template <typename ActionInput>
    std::int64_t integer(const ActionInput& in) {
        std::int64_t v = 0;
        if (!parse_integer(in.string_view(), v)) fail(in, "integer literal is too large");
        return v;
    }
};

}  // namespace dsl::frontend

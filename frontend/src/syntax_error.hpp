// Where and how the parsers report a syntax error: shared so that errors in every language read alike.
#pragma once

#include <dsl/frontend/source.hpp>

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

}  // namespace dsl::frontend

// Placing and wording syntax errors, for every parser.
#include "syntax_error.hpp"

#include <cctype>
#include <charconv>
#include <limits>

namespace dsl::frontend {

unsigned clamp_unsigned(std::size_t n) {
    return n > std::numeric_limits<unsigned>::max() ? std::numeric_limits<unsigned>::max() : static_cast<unsigned>(n);
}

bool parse_integer(std::string_view digits, std::int64_t& value) {
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return ec == std::errc{} && end == digits.data() + digits.size();
}

Location location_at(const SourceFile& file, std::size_t offset, unsigned length) {
    unsigned line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < offset && i < file.text.size(); ++i) {
        if (file.text[i] == '\n') {
            ++line;
            line_start = i + 1;
        }
    }
    const std::size_t col = offset - line_start + 1;
    return Location{&file, line,
                    static_cast<unsigned>(std::min<std::size_t>(col, std::numeric_limits<unsigned>::max())), length};
}

std::size_t end_of_previous_token(std::string_view text, std::size_t pos) {
    while (true) {
        while (pos > 0 && std::isspace(static_cast<unsigned char>(text[pos - 1]))) --pos;
        if (pos == 0) return 0;
        // If this line has a comment, the token is before it: look for a '#' outside a string.
        const auto line_start = text.rfind('\n', pos - 1);
        const std::size_t from = line_start == std::string_view::npos ? 0 : line_start + 1;
        bool in_string = false;
        std::size_t hash = std::string_view::npos;
        for (auto i = from; i < pos; ++i) {
            if (text[i] == '"') in_string = !in_string;
            if (text[i] == '#' && !in_string) {
                hash = i;
                break;
            }
        }
        if (hash == std::string_view::npos) return pos;
        pos = hash;
    }
}

std::size_t error_offset(std::string_view text, std::size_t offset, std::string_view message) {
    const bool punctuation = message.substr(0, 10) == "expected '";
    return punctuation || offset >= text.size() ? end_of_previous_token(text, std::min(offset, text.size())) : offset;
}

std::string unexpected_character(std::string_view text, std::size_t offset) {
    if (offset >= text.size()) return "unexpected end of file";
    const auto u = static_cast<unsigned char>(text[offset]);
    if (u >= 0x21 && u < 0x7f) return std::string("unexpected character '") + static_cast<char>(u) + "'";
    static const char* hex = "0123456789ABCDEF";
    return std::string("unexpected character '\\x") + hex[u >> 4] + hex[u & 15] + "'";
}

}  // namespace dsl::frontend

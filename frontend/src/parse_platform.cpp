// The `.platform` parser: runs the PEGTL grammar with actions that build the owned PlatformFile as they match.
#include <dsl/frontend/parse.hpp>
#include <dsl/grammar/platform.hpp>

#include "syntax_error.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <optional>
#include <string>
#include <utility>

namespace dsl::frontend {
namespace {

namespace pegtl = tao::pegtl;
namespace g = dsl::grammar::platform;

struct State : ActionState {
    PlatformFile out;
    PlatformSetting setting;  // the setting being parsed: key first, then its value
    PlatformTime time;        // the measurement being parsed
    PlatformField field;      // the field being parsed
    PlatformValue value;      // the value being parsed, of a setting or a measurement
    // The last unit read and the offset just past it: `a = 1 b = 2` reads `b` as the unit of 1, and the
    // error at the second '=' says so.
    std::string last_unit;
    Location last_unit_loc;
    std::size_t last_unit_end = 0;
};

template <typename Rule>
struct action : pegtl::nothing<Rule> {};

template <>
struct action<g::key> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.setting = PlatformSetting{};
        s.setting.key = in.string();
        s.setting.loc = s.loc(in);
    }
};

template <>
struct action<g::number> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        const auto text = in.string_view();
        double v = 0.0;
        // from_chars never consults the locale: "0.5" is a half wherever dsl runs.
        const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc{} || ptr != text.data() + text.size()) s.fail(in, "number literal is out of range");
        s.value = PlatformValue{};
        s.value.number = v;
        s.value.number_text = std::string(text);
    }
};

template <>
struct action<g::unit> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.value.unit = in.string();
        s.value.unit_loc = s.loc(in);
        s.last_unit = s.value.unit;
        s.last_unit_loc = s.value.unit_loc;
        s.last_unit_end = in.position().byte + in.size();
    }
};

// The whole value's span, number and unit: the last action of a quantity.
struct set_value_loc {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.value.loc = s.loc(in);
    }
};

template <>
struct action<g::quantity> : set_value_loc {};
template <>
struct action<g::measured_time> : set_value_loc {};

template <>
struct action<g::word> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        // NaN and infinity are words to the grammar, but a number is what was meant: said as such, before
        // a unit after them reads as the start of the next setting.
        std::string lower = in.string();
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (lower == "nan" || lower == "inf" || lower == "infinity") {
            const std::string message = fmt::format("'{}' is not a finite number", in.string());
            s.fail(in, message.c_str());
        }
        s.value = PlatformValue{};
        s.value.kind = PlatformValue::Kind::word;
        s.value.word = in.string();
        s.value.loc = s.loc(in);
    }
};

template <>
struct action<g::setting> {
    static void apply0(State& s) {
        s.setting.value = std::move(s.value);
        s.out.settings.push_back(std::move(s.setting));
    }
};

template <>
struct action<g::kw_time> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.time = PlatformTime{};
        s.time.loc = s.loc(in);
    }
};

template <>
struct action<g::kernel> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.time.kernel = in.string();
        s.time.kernel_loc = s.loc(in);
    }
};

template <>
struct action<g::field_name> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.field = PlatformField{};
        s.field.key = in.string();
        s.field.loc = s.loc(in);
    }
};

template <>
struct action<g::dim> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.field.dims.push_back(s.integer(in));
    }
};

template <>
struct action<g::field> {
    static void apply0(State& s) { s.time.fields.push_back(std::move(s.field)); }
};

template <>
struct action<g::measurement> {
    static void apply0(State& s) {
        s.time.value = std::move(s.value);
        s.out.times.push_back(std::move(s.time));
    }
};

}  // namespace

std::optional<PlatformFile> parse_platform(const SourceFile& file, Diagnostics& diags) {
    State state;
    state.file = &file;
    state.out.source = &file;
    pegtl::memory_input<> in(file.text.data(), file.text.size(), file.path);
    try {
        pegtl::parse<g::grammar, action, g::control>(in, state);
    } catch (const pegtl::parse_error& e) {
        const std::size_t at = e.positions().empty() ? 0 : e.positions().front().byte;
        std::string message(e.message());
        Location loc = location_at(file, error_offset(file.text, at, message), state.error_length);
        const bool after_unit = message == g::error_message<g::end_of_file> && at < file.text.size() &&
                                file.text[at] == '=' && !state.last_unit.empty() &&
                                file.text.find_first_not_of(" \t", state.last_unit_end) == at;
        if (message == g::error_message<g::end_of_file>) {
            message = unexpected_character(file.text, at);
            loc = location_at(file, at);
        }
        auto& d = diags.error(loc, std::move(message));
        if (after_unit)
            Diagnostics::note(d, state.last_unit_loc,
                              fmt::format("'{}' was read as the unit of the number before it: a name after a number "
                                          "on its line is its unit, so start the next setting on a new line",
                                          state.last_unit));
        return std::nullopt;
    }
    return std::move(state.out);
}

}  // namespace dsl::frontend

// The `.sched` parser: runs the PEGTL grammar with actions that build the owned SchedFile as they match.
#include <dsl/frontend/parse.hpp>

#include <dsl/base/error.hpp>
#include <dsl/grammar/sched.hpp>

#include "syntax_error.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace dsl::frontend {
namespace {

namespace pegtl = tao::pegtl;
namespace g = dsl::grammar::sched;

struct State : ActionState {
    SchedFile out;
    Setting setting;  // the setting being parsed: key first, then its value
    // Where the string being read began: an unterminated string is reported there, not at the line's end.
    std::optional<Location> open_string;

    SchedEntry& entry() {
        DSL_INTERNAL_CHECK(!out.entries.empty(), "an entry setting without an entry");
        return out.entries.back();
    }
};

template <typename Rule>
struct action : pegtl::nothing<Rule> {};

template <>
struct action<g::key> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.setting = Setting{};
        s.setting.key = in.string();
        s.setting.loc = s.loc(in);
    }
};

template <>
struct action<g::integer_value> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.setting.value = SchedValue{SchedValue::Kind::integer, s.integer(in), {}, s.loc(in)};
    }
};

template <>
struct action<g::word_value> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.setting.value = SchedValue{SchedValue::Kind::word, 0, in.string(), s.loc(in)};
    }
};

template <>
struct action<g::open_value> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.setting.value = SchedValue{SchedValue::Kind::open, 0, {}, s.loc(in)};
    }
};

template <>
struct action<g::string_open> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.open_string = s.loc(in);
    }
};

template <>
struct action<g::string_value> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.open_string.reset();
        const auto text = in.string_view();  // with its quotes
        s.setting.value =
            SchedValue{SchedValue::Kind::string, 0, std::string(text.substr(1, text.size() - 2)), s.loc(in)};
    }
};

template <>
struct action<g::global_setting> {
    static void apply0(State& s) { s.out.globals.push_back(std::move(s.setting)); }
};

template <>
struct action<g::entry_setting> {
    static void apply0(State& s) { s.entry().settings.push_back(std::move(s.setting)); }
};

template <SchedEntry::Selector Selector>
struct start_entry {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        SchedEntry e;
        e.selector = Selector;
        e.loc = s.loc(in);
        s.out.entries.push_back(std::move(e));
    }
};

template <>
struct action<g::kw_default> : start_entry<SchedEntry::Selector::all> {};
template <>
struct action<g::kw_layer> : start_entry<SchedEntry::Selector::layer> {};
template <>
struct action<g::kw_block> : start_entry<SchedEntry::Selector::block> {};

struct set_pattern {
    template <typename ActionInput>
    static void apply(const ActionInput& in, State& s) {
        s.entry().pattern = in.string();
        s.entry().pattern_loc = s.loc(in);
    }
};

template <>
struct action<g::pattern> : set_pattern {};
template <>
struct action<g::block_name> : set_pattern {};

// The length of the rest of line `line_text` from 1-based column `col`, at least 1.
unsigned rest_of_line(std::string_view line_text, unsigned col) {
    if (col == 0 || col > line_text.size()) return 1;
    return std::max(1u, clamp_unsigned(line_text.size() - (col - 1)));
}

}  // namespace

std::optional<SchedFile> parse_sched(const SourceFile& file, Diagnostics& diags) {
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
        if (message == g::error_message<dsl::grammar::string_close> && state.open_string) {
            loc = *state.open_string;
            loc.length = rest_of_line(file.line_text(loc.line), loc.col);
        } else if (message == g::error_message<g::end_of_file>) {
            message = unexpected_character(file.text, at);
            loc = location_at(file, at);
        }
        diags.error(loc, std::move(message));
        return std::nullopt;
    }
    return std::move(state.out);
}

}  // namespace dsl::frontend

// The PEGTL grammar of `.sched` files (rules and error texts only; frontend/src/parse_sched.cpp builds the tree).
#pragma once

#include <dsl/grammar/common.hpp>

namespace dsl::grammar::sched {

// The grammar is free-form: every token may be followed by blanks, newlines and comments (`sep`).
//
// Settings attach to the entry before them: an entry runs until the next keyword, so a `name = value`
// after an entry is one of its settings. Top-level settings (procs, platform, batch) must therefore come
// before the first entry; this is what `file ::= {global_setting} {entry}` says. The grammar accepts any
// setting name and any value: which keys and values mean something is checked after parsing.

// kw_default ::= 'default'      kw_layer ::= 'layer'      kw_block ::= 'block'
struct kw_default : keyword<'d', 'e', 'f', 'a', 'u', 'l', 't'> {};
struct kw_layer : keyword<'l', 'a', 'y', 'e', 'r'> {};
struct kw_block : keyword<'b', 'l', 'o', 'c', 'k'> {};
struct any_keyword : pegtl::sor<kw_default, kw_layer, kw_block> {};

// key ::= name - keyword        a keyword starts an entry, so it cannot name a setting
struct key : pegtl::seq<pegtl::not_at<any_keyword>, name> {};

// integer_value ::= integer      not followed by a name character or '.': `2x` and `2.5` are errors
struct integer_end : pegtl::not_at<pegtl::sor<pegtl::identifier_other, pegtl::one<'.'>>> {};
struct integer_value : pegtl::seq<integer, pegtl::must<integer_end>> {};

// word_value ::= name - keyword      `on`, `off`, `spatial`, `local`, a platform name
struct word_value : pegtl::seq<pegtl::not_at<any_keyword>, name> {};

// string_value ::= '"' {any but '"', '\', newline} '"'       no escapes, so the text prints back as is
struct string_open : pegtl::one<'"'> {};
struct string_value : pegtl::seq<string_open, string_body, pegtl::must<string_close>> {};

// open_value ::= '?'       left open for the auto-scheduler
struct open_value : pegtl::one<'?'> {};

// value ::= integer_value | open_value | string_value | word_value
struct value : pegtl::sor<integer_value, open_value, string_value, word_value> {};

// equals ::= '='
struct equals : pegtl::one<'='> {};

// setting ::= key '=' value       committed after the key: a non-keyword name here can only start a setting
struct setting : pegtl::if_must<tok<key>, tok<equals>, tok<value>> {};

// Two names for one rule, so that the parser knows where the setting goes.
struct global_setting : setting {};
struct entry_setting : setting {};

// pattern ::= (letter | digit | '_' | '.' | '*') {letter | digit | '_' | '.' | '*'}    `*` matches any run
struct pattern : pegtl::plus<pegtl::sor<pegtl::identifier_other, pegtl::one<'.', '*'>>> {};

// block_name ::= name
struct block_name : name {};

// default_entry ::= 'default' {setting}
// layer_entry   ::= 'layer' pattern {setting}
// block_entry   ::= 'block' block_name {setting}
// `default` needs no commit: nothing after it can fail.
struct default_entry : pegtl::seq<tok<kw_default>, pegtl::star<entry_setting>> {};
struct layer_entry : pegtl::seq<pegtl::if_must<tok<kw_layer>, tok<pattern>>, pegtl::star<entry_setting>> {};
struct block_entry : pegtl::seq<pegtl::if_must<tok<kw_block>, tok<block_name>>, pegtl::star<entry_setting>> {};

// entry ::= default_entry | layer_entry | block_entry
struct entry : pegtl::sor<default_entry, layer_entry, block_entry> {};

// end_of_file ::= end of input      anything else left here is a character no rule can start with
struct end_of_file : pegtl::eof {};

// file ::= sep {global_setting} {entry} end_of_file
struct grammar : pegtl::seq<sep, pegtl::star<global_setting>, pegtl::star<entry>, pegtl::must<end_of_file>> {};

// Error texts, raised by `control` wherever the rule fails. Only rules whose failure is always an error
// (those under must<> or if_must<>) have one.
template <typename Rule>
inline constexpr const char* error_message = nullptr;

template <>
inline constexpr const char* error_message<tok<equals>> = "expected '=' after the setting name";
template <>
inline constexpr const char* error_message<tok<value>> = "expected a value after '='";
template <>
inline constexpr const char* error_message<tok<pattern>> = "expected a layer name or pattern after 'layer'";
template <>
inline constexpr const char* error_message<tok<block_name>> = "expected a block name after 'block'";
template <>
inline constexpr const char* error_message<integer_end> = "invalid integer literal";
template <>
inline constexpr const char* error_message<string_close> = "unterminated string";
// The parser adds the character found, which a static text cannot name.
template <>
inline constexpr const char* error_message<end_of_file> = "unexpected character";

struct error {
    template <typename Rule>
    static constexpr auto message = error_message<Rule>;
};

template <typename Rule>
using control = pegtl::must_if<error>::control<Rule>;

}  // namespace dsl::grammar::sched

// The PEGTL grammar of `.platform` files (rules and error texts only; frontend/src/parse_platform.cpp builds
// the tree).
#pragma once

#include <dsl/grammar/common.hpp>

namespace dsl::grammar::platform {

// The grammar is free-form: every token may be followed by blanks, newlines and comments (`sep`), with one
// exception: a number's unit must be on the number's line, so that a number at the end of a line never
// takes the next line's key for its unit. The grammar accepts any setting name, any unit and any kernel or
// field name: which keys, units and values mean something is checked after parsing
// (scheduler/src/platform.cpp).

// kw_time ::= 'time'
struct kw_time : keyword<'t', 'i', 'm', 'e'> {};

// key ::= name - 'time'        `time` starts a measurement, so it cannot name a setting
struct key : pegtl::seq<pegtl::not_at<kw_time>, name> {};

// number ::= real | integer        no sign: no quantity of a platform is negative
// A number is not followed by '_' or '.' (`4_` and `1.5.3` are errors); a letter starts its unit.
struct number : pegtl::sor<real, integer> {};
struct number_end : pegtl::not_at<pegtl::one<'_', '.'>> {};

// unit_word ::= letter {letter}        not followed by a digit or '_': `GiB2` is an error
struct unit_word_end : pegtl::not_at<pegtl::identifier_other> {};
struct unit_word : pegtl::seq<pegtl::plus<pegtl::alpha>, pegtl::must<unit_word_end>> {};

// unit ::= unit_word ['/' unit_word]        `GB/s`, `TFLOP/s`; committed after '/'
struct slash : pegtl::one<'/'> {};
struct unit_denominator : unit_word {};
struct unit : pegtl::seq<unit_word, pegtl::opt<pegtl::if_must<slash, unit_denominator>>> {};

// quantity ::= number [unit]        only blanks (spaces, tabs) between the number and its unit
struct quantity : pegtl::seq<number, pegtl::must<number_end>, pegtl::opt<pegtl::star<pegtl::blank>, unit>> {};

// word ::= name - 'time'        `cpu`, `gpu`
struct word : pegtl::seq<pegtl::not_at<kw_time>, name> {};

// value ::= quantity | word
struct value : pegtl::sor<quantity, word> {};

// equals ::= '='
struct equals : pegtl::one<'='> {};

// setting ::= key '=' value        committed after the key: a name here can only start a setting
struct setting : pegtl::if_must<tok<key>, tok<equals>, tok<value>> {};

// kernel ::= name {'.' name}        `conv.forward`; committed after each '.'
struct dot : pegtl::one<'.'> {};
struct kernel_part : name {};
struct kernel : pegtl::seq<name, pegtl::star<pegtl::if_must<dot, kernel_part>>> {};

// dims ::= integer {'x' integer}        `1x18x65x65`; not followed by a name character or '.'
struct dims_end : pegtl::not_at<pegtl::sor<pegtl::identifier_other, pegtl::one<'.'>>> {};
struct dim : integer {};
struct dims : pegtl::seq<dim, pegtl::star<pegtl::one<'x'>, dim>, pegtl::must<dims_end>> {};

// field ::= name '=' dims        committed after the name: before the measured time only fields have names
struct field_name : name {};
struct field_equals : pegtl::one<'='> {};
struct field : pegtl::if_must<tok<field_name>, tok<field_equals>, tok<dims>> {};

// measured_time ::= quantity        the value of a measurement, which must be a number
struct measured_time : quantity {};
struct time_equals : pegtl::one<'='> {};

// measurement ::= 'time' kernel {field} '=' measured_time        committed after 'time'
// The fields end at the '=' before the time: every field is `name=dims`, and the time has no name.
struct measurement : pegtl::seq<pegtl::if_must<tok<kw_time>, tok<kernel>>, pegtl::star<field>,
                                pegtl::must<tok<time_equals>, tok<measured_time>>> {};

// statement ::= measurement | setting
struct statement : pegtl::sor<measurement, setting> {};

// end_of_file ::= end of input      anything else left here is a character no rule can start with
struct end_of_file : pegtl::eof {};

// file ::= sep {statement} end_of_file
struct grammar : pegtl::seq<sep, pegtl::star<statement>, pegtl::must<end_of_file>> {};

// Error texts, raised by `control` wherever the rule fails. Only rules whose failure is always an error
// (those under must<> or if_must<>) have one.
template <typename Rule>
inline constexpr const char* error_message = nullptr;

template <>
inline constexpr const char* error_message<tok<equals>> = "expected '=' after the setting name";
template <>
inline constexpr const char* error_message<tok<value>> = "expected a value after '='";
template <>
inline constexpr const char* error_message<number_end> = "invalid number";
template <>
inline constexpr const char* error_message<unit_word_end> = "invalid unit";
template <>
inline constexpr const char* error_message<unit_denominator> = "expected a unit after '/'";
template <>
inline constexpr const char* error_message<tok<kernel>> = "expected a kernel name after 'time'";
template <>
inline constexpr const char* error_message<kernel_part> = "expected a name after '.' in the kernel name";
template <>
inline constexpr const char* error_message<tok<field_equals>> = "expected '=' after the field name";
template <>
inline constexpr const char* error_message<tok<dims>> = "expected dimensions such as 1x16x32x32 after '='";
template <>
inline constexpr const char* error_message<dims_end> = "invalid dimensions";
template <>
inline constexpr const char* error_message<tok<time_equals>> = "expected '=' before the measured time";
template <>
inline constexpr const char* error_message<tok<measured_time>> = "expected the measured time after '='";
// The parser adds the character found, which a static text cannot name.
template <>
inline constexpr const char* error_message<end_of_file> = "unexpected character";

struct error {
    template <typename Rule>
    static constexpr auto message = error_message<Rule>;
};

template <typename Rule>
using control = pegtl::must_if<error>::control<Rule>;

}  // namespace dsl::grammar::platform

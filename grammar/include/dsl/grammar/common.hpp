// Lexical rules shared by the `.net`, `.sched` and `.platform` grammars: blanks, comments, names, numbers,
// strings.
#pragma once

#include <tao/pegtl.hpp>

namespace dsl::grammar {

namespace pegtl = tao::pegtl;

// comment ::= '#' {any but newline}
struct comment : pegtl::seq<pegtl::one<'#'>, pegtl::until<pegtl::eolf>> {};

// sep ::= {blank | newline | comment}
struct sep : pegtl::star<pegtl::sor<pegtl::space, comment>> {};

// name ::= (letter | '_') {letter | digit | '_'}
struct name : pegtl::identifier {};

// integer ::= digit {digit}
struct integer : pegtl::plus<pegtl::digit> {};

// real ::= digit {digit} ('.' {digit} [exponent] | exponent)     exponent ::= ('e'|'E') ['+'|'-'] digit {digit}
struct exponent : pegtl::seq<pegtl::one<'e', 'E'>, pegtl::opt<pegtl::one<'+', '-'>>, pegtl::plus<pegtl::digit>> {};
struct real
    : pegtl::seq<pegtl::plus<pegtl::digit>,
                 pegtl::sor<pegtl::seq<pegtl::one<'.'>, pegtl::star<pegtl::digit>, pegtl::opt<exponent>>, exponent>> {};

// string_literal ::= '"' {any printable but '"' and '\'} '"'
struct string_body : pegtl::star<pegtl::not_one<'"', '\\', '\n', '\r'>> {};
struct string_close : pegtl::one<'"'> {};
struct string_literal : pegtl::seq<pegtl::one<'"'>, string_body, string_close> {};

// A keyword: the word not followed by a name character.
template <char... Cs>
struct keyword : pegtl::seq<pegtl::string<Cs...>, pegtl::not_at<pegtl::identifier_other>> {};

// `p` followed by the separator that may follow any token.
template <typename P>
struct tok : pegtl::seq<P, sep> {};

}  // namespace dsl::grammar

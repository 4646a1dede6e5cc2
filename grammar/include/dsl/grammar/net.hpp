// The `.net` grammar: PEGTL rules for network files, and the message of each rule that must match.
#pragma once

#include <dsl/grammar/common.hpp>

namespace dsl::grammar::net {

using pegtl::eof;
using pegtl::if_must;
using pegtl::must;
using pegtl::not_at;
using pegtl::one;
using pegtl::opt;
using pegtl::seq;
using pegtl::sor;
using pegtl::star;

// ---------------------------------------------------------------------------------------------------------
// Words and punctuation

struct kw_import : keyword<'i', 'm', 'p', 'o', 'r', 't'> {};
struct kw_input : keyword<'i', 'n', 'p', 'u', 't'> {};
struct kw_label : keyword<'l', 'a', 'b', 'e', 'l'> {};
struct kw_block : keyword<'b', 'l', 'o', 'c', 'k'> {};
struct kw_repeat : keyword<'r', 'e', 'p', 'e', 'a', 't'> {};
struct kw_from : keyword<'f', 'r', 'o', 'm'> {};
struct kw_train : keyword<'t', 'r', 'a', 'i', 'n'> {};
struct kw_true : keyword<'t', 'r', 'u', 'e'> {};
struct kw_false : keyword<'f', 'a', 'l', 's', 'e'> {};

// reserved ::= 'import' | 'input' | 'label' | 'block' | 'repeat' | 'from' | 'train' | 'true' | 'false'
struct reserved : sor<kw_import, kw_input, kw_label, kw_block, kw_repeat, kw_from, kw_train, kw_true, kw_false> {};

// ident ::= name that is not a reserved word      (`in` and `N` are ordinary names here)
struct ident : seq<not_at<reserved>, name> {};

struct comma : one<','> {};
struct equals : one<'='> {};

// string ::= '"' {character but '"', '\' and newline} '"'      (common's string_literal, but committed)
struct string_lit : seq<one<'"'>, string_body, must<string_close>> {};

// ---------------------------------------------------------------------------------------------------------
// Expressions, lowest precedence last; binary operators associate to the left.

struct expr_value;  // an expression where one is required

struct real_lit : real {};
struct int_lit : integer {};
struct true_lit : kw_true {};
struct false_lit : kw_false {};
struct name_ref : ident {};

// list ::= '[' expr {',' expr} ']'
struct list_open : one<'['> {};
struct list_close : one<']'> {};
struct list_body : seq<if_must<tok<list_open>, expr_value>, star<if_must<tok<comma>, expr_value>>, must<list_close>> {};
struct list : seq<list_body, sep> {};

// paren ::= '(' expr ')'
struct paren_open : one<'('> {};
struct paren_close : tok<one<')'>> {};
struct paren : if_must<tok<paren_open>, expr_value, paren_close> {};

// call_value ::= name '(' [value_arg {',' value_arg}] ')'    value_arg ::= [name '='] expr
// A value that is a call with arguments: the train line's `schedule = cosine(steps = 1000)`.
struct call_value_head : seq<ident, sep, one<'('>> {};
struct value_arg_label : seq<ident, sep, one<'='>, sep> {};
struct value_named_arg : seq<value_arg_label, must<expr_value>> {};
struct value_arg;  // after expr
struct value_arg_next;
struct call_value_close : tok<one<')'>> {};
struct call_value
    : seq<tok<call_value_head>, opt<value_arg, star<if_must<tok<comma>, value_arg_next>>>, must<call_value_close>> {};

// primary ::= real | integer | 'true' | 'false' | call_value | name | list | paren
struct primary
    : sor<tok<real_lit>, tok<int_lit>, tok<true_lit>, tok<false_lit>, call_value, tok<name_ref>, list, paren> {};

// unary ::= '-' unary | primary
struct neg_operand;
struct neg_sign : one<'-'> {};
struct neg : if_must<tok<neg_sign>, neg_operand> {};
struct unary : sor<neg, primary> {};
struct neg_operand : unary {};

// product ::= unary {('*' | '/') unary}
struct mul_operand : unary {};
struct product_tail : if_must<tok<one<'*', '/'>>, mul_operand> {};
struct product : seq<unary, star<product_tail>> {};

// expr ::= product {('+' | '-') product}
struct add_operand : product {};
struct sum_tail : if_must<tok<one<'+', '-'>>, add_operand> {};
struct expr : seq<product, star<sum_tail>> {};

struct expr_value : expr {};

struct value_positional_arg : expr {};
struct value_arg : sor<value_named_arg, value_positional_arg> {};
struct value_arg_next : value_arg {};

// ---------------------------------------------------------------------------------------------------------
// Calls and inputs

// arg ::= [name '='] expr
struct arg_label : seq<ident, sep, equals, sep> {};
struct named_arg : seq<arg_label, must<expr_value>> {};
struct positional_arg : expr {};
struct arg : sor<named_arg, positional_arg> {};
struct arg_next : arg {};

// call ::= name ['(' [arg {',' arg}] ')']
struct callee : ident {};
struct args_close : tok<one<')'>> {};
struct args : seq<tok<one<'('>>, opt<arg, star<if_must<tok<comma>, arg_next>>>, must<args_close>> {};
struct call : seq<tok<callee>, opt<args>> {};

// ref ::= (name | integer) {'.' (name | integer)}        written without blanks: `layer1.0.conv1`
struct ref_segment : sor<ident, integer> {};
struct ref_next : ref_segment {};
struct ref_path : seq<ref_segment, star<if_must<one<'.'>, ref_next>>> {};
struct from_ref : tok<ref_path> {};

// from ::= 'from' ref {',' ref}
struct from_clause : seq<if_must<tok<kw_from>, from_ref>, star<if_must<tok<comma>, from_ref>>> {};

// ---------------------------------------------------------------------------------------------------------
// Statements

// repeat ::= 'repeat' '(' expr [',' 'start' '=' expr] ')' call
struct repeat_kw : kw_repeat {};
struct repeat_open : tok<one<'('>> {};
struct repeat_count : expr {};
struct start_word : tok<keyword<'s', 't', 'a', 'r', 't'>> {};
struct start_equals : tok<equals> {};
struct repeat_start : expr {};
struct repeat_close : tok<one<')'>> {};
struct repeat_call : call {};
struct repeat_clause
    : seq<if_must<tok<repeat_kw>, repeat_open, repeat_count>,
          opt<if_must<tok<comma>, start_word, start_equals, repeat_start>>, must<repeat_close, repeat_call>> {};

// named_stmt ::= (name | integer) '=' (repeat | call) [from]
struct stmt_name : sor<ident, integer> {};
struct stmt_equals : tok<equals> {};
struct stmt_rhs : sor<repeat_clause, call> {};
struct named_stmt : seq<tok<stmt_name>, must<stmt_equals, stmt_rhs>, opt<from_clause>> {};

// anon_repeat ::= repeat [from]        (in a block body: instances named by their index)
struct anon_repeat : seq<repeat_clause, opt<from_clause>> {};

// stmt ::= anon_repeat | named_stmt
struct stmt : sor<anon_repeat, named_stmt> {};

// ---------------------------------------------------------------------------------------------------------
// Declarations

// import ::= 'import' string
struct import_path : tok<string_lit> {};
struct import_decl : if_must<tok<kw_import>, import_path> {};

// shape ::= '[' dim {',' dim} ']'        dim ::= 'N' | integer
struct batch_dim : keyword<'N'> {};
struct dim_size : integer {};
struct dim : sor<tok<batch_dim>, tok<dim_size>> {};
struct shape_close : tok<one<']'>> {};
struct shape : seq<tok<one<'['>>, must<dim>, star<if_must<tok<comma>, dim>>, must<shape_close>> {};

// element ::= 'float' | 'int'        a label's element type (int when not written); not a statement's name
struct float_type : keyword<'f', 'l', 'o', 'a', 't'> {};
struct int_type : keyword<'i', 'n', 't'> {};
struct label_type : seq<sor<float_type, int_type>, not_at<sep, equals>> {};

// tensor ::= 'input' name shape | 'label' name shape [element]
struct input_name : ident {};
struct label_name : ident {};
struct input_decl : if_must<tok<kw_input>, tok<input_name>, shape> {};
struct label_decl : seq<if_must<tok<kw_label>, tok<label_name>, shape>, opt<tok<label_type>>> {};

// train ::= 'train' call
struct train_kw : kw_train {};
struct train_call : call {};
struct train_decl : if_must<tok<train_kw>, train_call> {};

// block ::= 'block' name '(' [param {',' param}] ')' '{' {stmt} '}'       param ::= name ['=' expr]
struct block_name : ident {};
struct params_open : tok<one<'('>> {};
struct param_name : ident {};
struct param_default : if_must<tok<equals>, expr_value> {};
struct param : seq<tok<param_name>, opt<param_default>> {};
struct param_next : param {};
struct params_close : tok<one<')'>> {};
struct body_brace : one<'{'> {};
struct body_open : tok<body_brace> {};
struct body_close : tok<one<'}'>> {};
struct block_def
    : seq<if_must<tok<kw_block>, tok<block_name>, params_open>, opt<param, star<if_must<tok<comma>, param_next>>>,
          must<params_close, body_open>, star<stmt>, must<body_close>> {};

// file ::= {import | tensor | train | block | stmt} end-of-file
struct item : sor<import_decl, input_decl, label_decl, train_decl, block_def, stmt> {};
struct file_end : eof {};
struct grammar : seq<sep, star<item>, must<file_end>> {};

// ---------------------------------------------------------------------------------------------------------
// Error messages of the rules that must match (PEGTL's must_if<> table). `{name}` is replaced by the name
// that the parser saw last (a layer, callee or tensor name) and `{block}` by the enclosing block's name.

template <typename>
inline constexpr const char* error_message = nullptr;

// clang-format off
template <> inline constexpr const char* error_message<string_close> = "unterminated string";
template <> inline constexpr const char* error_message<expr_value> = "expected an expression";
template <> inline constexpr const char* error_message<list_close> = "expected ']' to close the list";
template <> inline constexpr const char* error_message<paren_close> = "expected ')' to close the parenthesis";
template <> inline constexpr const char* error_message<neg_operand> = "expected an expression after '-'";
template <> inline constexpr const char* error_message<mul_operand> = "expected an expression after the operator";
template <> inline constexpr const char* error_message<add_operand> = "expected an expression after the operator";
template <> inline constexpr const char* error_message<value_arg_next> = "expected an argument after ','";
template <> inline constexpr const char* error_message<call_value_close> = "expected ')' to close the arguments";
template <> inline constexpr const char* error_message<arg_next> = "expected an argument after ','";
template <> inline constexpr const char* error_message<args_close> = "expected ')' to close the arguments of '{name}'";
template <> inline constexpr const char* error_message<ref_next> = "expected a name after '.'";
template <> inline constexpr const char* error_message<from_ref> = "expected a layer name";
template <> inline constexpr const char* error_message<repeat_open> = "expected '(' after 'repeat'";
template <> inline constexpr const char* error_message<repeat_count> = "expected the number of repetitions";
template <> inline constexpr const char* error_message<start_word> = "expected 'start' after ','";
template <> inline constexpr const char* error_message<start_equals> = "expected '=' after 'start'";
template <> inline constexpr const char* error_message<repeat_start> = "expected the index of the first repetition";
template <> inline constexpr const char* error_message<repeat_close> = "expected ')' to close 'repeat('";
template <> inline constexpr const char* error_message<repeat_call> = "expected a block after 'repeat(...)'";
template <> inline constexpr const char* error_message<stmt_equals> = "expected '=' after the layer name '{name}'";
template <> inline constexpr const char* error_message<stmt_rhs> = "expected a layer kind or a block after '='";
template <> inline constexpr const char* error_message<import_path> = "expected a file name in double quotes after 'import'";
template <> inline constexpr const char* error_message<dim> = "expected a dimension: 'N' or an integer";
template <> inline constexpr const char* error_message<shape_close> = "expected ']' to close the shape";
template <> inline constexpr const char* error_message<shape> = "expected '[' and the shape of '{name}'";
template <> inline constexpr const char* error_message<tok<input_name>> = "expected a name after 'input'";
template <> inline constexpr const char* error_message<tok<label_name>> = "expected a name after 'label'";
template <> inline constexpr const char* error_message<train_call> = "expected an optimizer after 'train'";
template <> inline constexpr const char* error_message<tok<block_name>> = "expected a name after 'block'";
template <> inline constexpr const char* error_message<params_open> = "expected '(' and the parameters of block '{block}'";
template <> inline constexpr const char* error_message<param_next> = "expected a parameter name after ','";
template <> inline constexpr const char* error_message<params_close> = "expected ')' to close the parameters of '{block}'";
template <> inline constexpr const char* error_message<body_open> = "expected '{' to start the body of block '{block}'";
template <> inline constexpr const char* error_message<body_close> = "expected '}' to close the block '{block}'";
template <> inline constexpr const char* error_message<file_end> = "expected a statement";
// clang-format on

struct error {
    // Only must<> raises: a rule with a message may still fail quietly where it is optional.
    template <typename Rule>
    static constexpr bool raise_on_failure = false;

    template <typename Rule>
    static constexpr const char* message = error_message<Rule>;
};

template <typename Rule>
using control = pegtl::must_if<error>::control<Rule>;

}  // namespace dsl::grammar::net

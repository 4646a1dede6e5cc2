// The owned syntax tree of a `.net` file, as written (blocks not yet expanded); every node has its location.
#pragma once

#include <dsl/base/source.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsl::frontend {

// expr ::= integer | real | 'true' | 'false' | name | '[' expr {',' expr} ']' | '-' expr | expr op expr
//        | name '(' [[name '='] expr {',' [name '='] expr}] ')'      (a call: the train line's schedule)
struct Expr {
    enum class Kind { integer, real, boolean, name, list, neg, add, sub, mul, div, call };
    Kind kind = Kind::integer;
    Location loc;
    std::int64_t integer = 0;
    double real = 0.0;
    bool boolean = false;
    std::string name;                    // Kind::name: a block parameter; Kind::call: the callee
    std::vector<Expr> operands;          // list elements; one for neg; two for the binary kinds; a call's arguments
    std::vector<std::string> arg_names;  // Kind::call: each argument's name, empty when positional
};

// arg ::= [name '='] expr
struct Arg {
    std::string name;  // empty for a positional argument
    Location loc;      // of the name, or of the value when positional
    Expr value;
};

// ref ::= name {'.' (name | integer)}   a layer, instance, input or label; `in` is a block's input
struct Ref {
    std::vector<std::string> path;
    Location loc;
    std::string text() const;  // the path joined by '.'
};

// call ::= name ['(' [arg {',' arg}] ')']
struct Call {
    std::string callee;  // a built-in layer kind (conv, relu, …) or a block
    Location loc;        // of the callee name
    std::vector<Arg> args;
};

// stmt   ::= lname '=' call ['from' ref {',' ref}]
//          | [lname '='] 'repeat' '(' expr [',' 'start' '=' expr] ')' call ['from' ref {',' ref}]
// lname  ::= name | integer
struct Stmt {
    std::string name;  // empty only for an anonymous repeat
    Location loc;      // of the name, or of `repeat` when anonymous
    Call call;
    bool is_repeat = false;
    std::optional<Expr> count;  // repeat: number of instances
    std::optional<Expr> start;  // repeat: index of the first instance (default 0)
    std::vector<Ref> from;      // explicit inputs; empty means "the previous statement"
};

// dim ::= 'N' | integer
struct Dim {
    bool batch = false;  // the symbolic mini-batch size N
    std::int64_t size = 0;
    Location loc;
};

// tensor ::= 'input' name '[' dim {',' dim} ']' | 'label' name '[' dim {',' dim} ']' ['float' | 'int']
struct TensorDecl {
    enum class Kind { input, label };
    Kind kind = Kind::input;
    std::string name;
    Location loc;  // of the name
    std::vector<Dim> shape;
    bool is_float = false;  // a label of real targets (`float`), for the regression losses; else class indices
};

// param ::= name ['=' expr]
struct Param {
    std::string name;
    Location loc;
    std::optional<Expr> default_value;
};

// block ::= 'block' name '(' [param {',' param}] ')' '{' {stmt} '}'
struct BlockDef {
    std::string name;
    Location loc;  // of the name
    std::vector<Param> params;
    std::vector<Stmt> body;
};

// import ::= 'import' string
struct Import {
    std::string path;
    Location loc;  // of the string
};

// train ::= 'train' call          e.g. train sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.0001)
struct TrainDecl {
    Call call;
    Location loc;
};

// file ::= {import | tensor | train | block | stmt}
// Top-level items keep their order within each kind; the order across kinds carries no meaning.
struct NetFile {
    const SourceFile* source = nullptr;
    std::vector<Import> imports;
    std::vector<TensorDecl> tensors;
    std::optional<TrainDecl> train;
    std::vector<BlockDef> blocks;
    std::vector<Stmt> body;
};

}  // namespace dsl::frontend

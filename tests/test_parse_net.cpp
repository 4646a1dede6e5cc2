// Tests of the `.net` grammar, parser and printer: trees, round trips and syntax errors at exact places.
#include "support.hpp"

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/print.hpp>
#include <dsl/grammar/net.hpp>

#include <tao/pegtl/contrib/analyze.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <tuple>

using namespace dsl;
using namespace dsl::frontend;

namespace {

std::unique_ptr<test::Parsed<NetFile>> parse(const std::string& text) { return test::parse<NetFile>(text, "test.net"); }

void check_round_trip(const std::string& text) { test::check_round_trip<NetFile>(text, "test.net"); }

// The first argument's value of the only top-level statement of `a = f(<expr>)`.
Expr parse_expr(const std::string& expr) {
    auto p = parse("a = f(" + expr + ")");
    REQUIRE(p->file);
    REQUIRE(p->file->body.size() == 1);
    REQUIRE(p->file->body[0].call.args.size() == 1);
    return p->file->body[0].call.args[0].value;
}

std::string print_expr(const std::string& expr) {
    auto p = parse("a = f(" + expr + ")");
    REQUIRE(p->file);
    return print_net(*p->file);
}

const char* const full_example = R"(import "blocks.net"

input x [N, 18, 64, 64]
label y [N, 64, 64]

train sgd(lr = 0.01, momentum = 0.9)

block cbr(filters, stride = 1) {
  conv = conv(filters, kernel = 3, stride = stride, pad = 1, bias = false)
  bn = batchnorm
  relu = relu
}

stem = cbr(16)
body = repeat(2) cbr(32)
pred = conv(2, kernel = 1)
loss = pixel_cross_entropy from pred, y
)";

}  // namespace

TEST_CASE("net grammar has no infinite loops", "[net][grammar]") {
    CHECK(tao::pegtl::analyze<dsl::grammar::net::grammar>() == 0);
}

TEST_CASE("net parser builds the tree of every construct", "[net][parse]") {
    auto p = parse(full_example);
    REQUIRE(p->file);
    const NetFile& f = *p->file;
    CHECK_FALSE(p->diags.has_errors());

    REQUIRE(f.imports.size() == 1);
    CHECK(f.imports[0].path == "blocks.net");
    CHECK(f.imports[0].loc.line == 1);
    CHECK(f.imports[0].loc.col == 8);

    REQUIRE(f.tensors.size() == 2);
    CHECK(f.tensors[0].kind == TensorDecl::Kind::input);
    CHECK(f.tensors[0].name == "x");
    REQUIRE(f.tensors[0].shape.size() == 4);
    CHECK(f.tensors[0].shape[0].batch);
    CHECK(f.tensors[0].shape[1].size == 18);
    CHECK(f.tensors[1].kind == TensorDecl::Kind::label);
    CHECK(f.tensors[1].shape.size() == 3);
    CHECK(f.tensors[1].loc.line == 4);
    CHECK(f.tensors[1].loc.col == 7);

    REQUIRE(f.train);
    CHECK(f.train->call.callee == "sgd");
    REQUIRE(f.train->call.args.size() == 2);
    CHECK(f.train->call.args[0].name == "lr");
    CHECK(f.train->call.args[0].value.kind == Expr::Kind::real);
    CHECK(f.train->call.args[0].value.real == 0.01);

    REQUIRE(f.blocks.size() == 1);
    const BlockDef& b = f.blocks[0];
    CHECK(b.name == "cbr");
    REQUIRE(b.params.size() == 2);
    CHECK(b.params[0].name == "filters");
    CHECK_FALSE(b.params[0].default_value);
    REQUIRE(b.params[1].default_value);
    CHECK(b.params[1].default_value->integer == 1);
    REQUIRE(b.body.size() == 3);
    CHECK(b.body[0].name == "conv");
    CHECK(b.body[0].loc.line == 9);
    CHECK(b.body[0].loc.col == 3);
    REQUIRE(b.body[0].call.args.size() == 5);
    CHECK(b.body[0].call.args[0].name.empty());
    CHECK(b.body[0].call.args[0].value.kind == Expr::Kind::name);
    CHECK(b.body[0].call.args[0].value.name == "filters");
    CHECK(b.body[0].call.args[4].name == "bias");
    CHECK(b.body[0].call.args[4].value.kind == Expr::Kind::boolean);
    CHECK_FALSE(b.body[0].call.args[4].value.boolean);
    CHECK(b.body[1].call.callee == "batchnorm");
    CHECK(b.body[1].call.args.empty());

    REQUIRE(f.body.size() == 4);
    CHECK(f.body[1].name == "body");
    CHECK(f.body[1].is_repeat);
    REQUIRE(f.body[1].count);
    CHECK(f.body[1].count->integer == 2);
    CHECK_FALSE(f.body[1].start);
    CHECK(f.body[1].call.callee == "cbr");
    CHECK(f.body[3].call.callee == "pixel_cross_entropy");
    REQUIRE(f.body[3].from.size() == 2);
    CHECK(f.body[3].from[0].text() == "pred");
    CHECK(f.body[3].from[1].loc.col == 39);
}

TEST_CASE("net parser: names, references and anonymous repeats", "[net][parse]") {
    auto p = parse(R"(block layer(w) {
  0 = bottleneck_down(64, 256, 1)
  repeat(2, start = 1) bottleneck(64, 256) from in
  N = relu
  out = add from 0, in
}
head = fc(10) from layer1.0.conv1
)");
    REQUIRE(p->file);
    const auto& body = p->file->blocks.at(0).body;
    REQUIRE(body.size() == 4);
    CHECK(body[0].name == "0");
    CHECK(body[1].name.empty());
    CHECK(body[1].is_repeat);
    CHECK(body[1].loc.line == 3);
    CHECK(body[1].loc.col == 3);
    REQUIRE(body[1].start);
    CHECK(body[1].start->integer == 1);
    CHECK(body[1].from.at(0).text() == "in");
    CHECK(body[2].name == "N");
    CHECK(body[3].from.at(0).text() == "0");
    const auto& ref = p->file->body.at(0).from.at(0);
    CHECK(ref.path == std::vector<std::string>{"layer1", "0", "conv1"});
    CHECK(ref.loc.col == 20);
    CHECK(ref.loc.length == 14);
}

TEST_CASE("net parser: expressions follow precedence and associativity", "[net][parse]") {
    const Expr e = parse_expr("1 - 2 - 3 * -x");
    REQUIRE(e.kind == Expr::Kind::sub);
    CHECK(e.operands[0].kind == Expr::Kind::sub);  // (1 - 2) - ...
    CHECK(e.operands[1].kind == Expr::Kind::mul);
    CHECK(e.operands[1].operands[1].kind == Expr::Kind::neg);
    CHECK(e.operands[1].operands[1].operands[0].name == "x");

    const Expr l = parse_expr("[3, 5 / 2]");
    REQUIRE(l.kind == Expr::Kind::list);
    REQUIRE(l.operands.size() == 2);
    CHECK(l.operands[1].kind == Expr::Kind::div);

    CHECK(parse_expr("1e-5").real == 1e-5);
    CHECK(parse_expr("2.").kind == Expr::Kind::real);
    CHECK(parse_expr("9223372036854775807").integer == INT64_MAX);
    CHECK(parse_expr("true").boolean);
    CHECK(parse_expr("in").kind == Expr::Kind::name);
}

TEST_CASE("net printer: canonical form", "[net][print]") {
    auto p = parse(full_example);
    REQUIRE(p->file);
    CHECK(print_net(*p->file) == full_example);

    CHECK(print_expr("a - (b - c)") == "a = f(a - (b - c))\n");
    CHECK(print_expr("(a - b) - c") == "a = f(a - b - c)\n");
    CHECK(print_expr("(a * b) + (c / (d * e))") == "a = f(a * b + c / (d * e))\n");
    CHECK(print_expr("-(a + 1) * 2") == "a = f(-(a + 1) * 2)\n");
    CHECK(print_expr("1.0") == "a = f(1.0)\n");
    CHECK(print_expr("0.1") == "a = f(0.1)\n");
    CHECK(print_expr("1e-5") == "a = f(1e-05)\n");
    CHECK(print_expr("[ 3,5 ]") == "a = f([3, 5])\n");
    auto empty_args = parse("a = x()");
    REQUIRE(empty_args->file);
    CHECK(print_net(*empty_args->file) == "a = x\n");

    auto anon = parse("block b() {\n  repeat(2, start = 1) bottleneck(64, 256)\n}\n");
    REQUIRE(anon->file);
    CHECK(print_net(*anon->file) == "block b() {\n  repeat(2, start = 1) bottleneck(64, 256)\n}\n");
    CHECK(print_net(NetFile{}).empty());
}

TEST_CASE("net printer: round trips", "[net][print]") {
    check_round_trip(full_example);
    check_round_trip(R"(
# every construct, written loosely
import "a.net" import "dir/b.net"
input   x[N,3,32,32]  label t [ N ]
train sgd ( lr=0.1 , momentum = 0.9, weight_decay = 5e-4 )
block b ( f , s = 1 , k = [3, 5] , e = -(2 + 3) * 4 , g = 1 - (2 - 3) , r = 1.0 , t = true , u = false ) {
  0 = conv ( f * 2 / s , kernel = k , stride = s , bias = u )
  repeat ( 2 , start = 1 ) bottleneck ( 64 , 256 ) from in
  1=relu   # a comment
  sum = add from 0, in
}
stem = b(16)
body = repeat(f + 1) b(32, s = 2)
x2 = conv(8, kernel = 1) from body.1.sum, stem
loss = softmax_cross_entropy from x2, t
e = f ( )
)");
    check_round_trip("x = f(1.5e300, 0.30000000000000004, 123456789.0, 1e+20, 7.)\n");
    check_round_trip("x = f(- - 1, -(-1), --(2 * 3), 1 / (2 / 3), (1 / 2) / 3, 1 - -1)\n");
    check_round_trip("");
    check_round_trip("# only a comment");
}

TEST_CASE("net parser: a label's element type, float or int", "[net][parse]") {
    auto p = parse("label t [N, 2, 8, 8] float\nlabel y [N, 8, 8] int\nlabel z [N]\nfloat = relu\n");
    REQUIRE(p->file);
    REQUIRE(p->file->tensors.size() == 3);
    CHECK(p->file->tensors[0].is_float);
    CHECK_FALSE(p->file->tensors[1].is_float);  // int is the default, written or not
    CHECK_FALSE(p->file->tensors[2].is_float);
    // `float` followed by '=' is a statement's name, not the type of the label before it.
    REQUIRE(p->file->body.size() == 1);
    CHECK(p->file->body[0].name == "float");
    // Printed as `float` after the shape; `int` is left out.
    CHECK(print_net(*p->file) == "label t [N, 2, 8, 8] float\nlabel y [N, 8, 8]\nlabel z [N]\n\nfloat = relu\n");
    check_round_trip("label t [N, 2, 8, 8] float\nlabel v [N, 3] float\na = mse(weight = 0.5) from p, t\n");
}

TEST_CASE("net parser: syntax errors at exact places", "[net][errors]") {
    using Row = std::tuple<std::string, unsigned, unsigned, std::string>;
    auto [text, line, col, message] = GENERATE(table<std::string, unsigned, unsigned, std::string>({
        Row{"input x [N, 3, 32, 32]\nconv1 conv(8, kernel = 3)\n", 2, 6, "expected '=' after the layer name 'conv1'"},
        Row{"input x [N, 3, 32, 32\nconv1 = conv(8)\n", 1, 22, "expected ']' to close the shape"},
        Row{"block cbr(f) {\n  relu = relu\n\na = cbr(8)\n", 4, 11, "expected '}' to close the block 'cbr'"},
        Row{"conv1 = conv(8, kernel = 3) $\n", 1, 29, "unexpected character '$'"},
        Row{"import \"blocks.net\ninput x [N]\n", 1, 8, "unterminated string"},
        Row{"input x [N]\nfrom = conv(8)\n", 2, 1, "'from' is a keyword and cannot be used as a name"},
        Row{"a = relu\nfrom = conv(8)\n", 2, 1, "'from' is a keyword and cannot be used as a name"},
        Row{"block = relu\n", 1, 7, "expected a name after 'block'"},
        Row{"a = conv(true = 1, label = 2)\n", 1, 14, "expected ')' to close the arguments of 'conv'"},
        Row{"a = conv(8, repeat = 2)\n", 1, 13, "'repeat' is a keyword and cannot be used as a name"},
        Row{"a = conv(99999999999999999999)\n", 1, 10, "integer literal is too large"},
        Row{"input x [N, 99999999999999999999]\n", 1, 13, "integer literal is too large"},
        Row{"a = conv(8, kernel = )\n", 1, 22, "expected an expression"},
        Row{"a = conv(8,\n", 1, 12, "expected an argument after ','"},
        Row{"a = \n", 1, 4, "expected a layer kind or a block after '='"},
        Row{"a = repeat 2 b\n", 1, 11, "expected '(' after 'repeat'"},
        Row{"a = conv from b.\n", 1, 17, "expected a name after '.'"},
        Row{"input x N\n", 1, 8, "expected '[' and the shape of 'x'"},
        Row{"input x [N, a]\n", 1, 13, "expected a dimension: 'N' or an integer"},
        Row{"a = f(1 # comment\n  b = 2\n", 1, 8, "expected ')' to close the arguments of 'f'"},
        Row{") = 3\n", 1, 1, "expected a statement"},
    }));
    test::check_syntax_error<NetFile>(text, "test.net", line, col, 0, message);
}

TEST_CASE("net parser: an unclosed block notes where it opened", "[net][errors]") {
    auto p = parse("block cbr(f) {\n  relu = relu\n");
    REQUIRE_FALSE(p->file);
    REQUIRE(p->diags.all().size() == 1);
    const auto& notes = p->diags.all()[0].notes;
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].loc.line == 1);
    CHECK(notes[0].loc.col == 14);
}

TEST_CASE("net parser: deep nesting is an error, not a crash", "[net][errors]") {
    for (const auto& [open, close] : {std::pair{"(", ")"}, std::pair{"[", "]"}, std::pair{"-", ""}}) {
        std::string text = "a = f(";
        for (int i = 0; i < 100000; ++i) text += open;
        text += "1";
        for (int i = 0; i < 100000; ++i) text += close;
        text += ")\n";
        auto p = parse(text);
        CHECK_FALSE(p->file);
        REQUIRE(p->diags.all().size() == 1);
        CHECK(p->diags.all()[0].message == "expression is nested too deeply");
        CHECK(p->diags.all()[0].loc.col == 6 + 65);
    }

    std::string chain = "a = f(1";
    for (int i = 0; i < 100000; ++i) chain += " + 1";
    auto p = parse(chain + ")\n");
    CHECK_FALSE(p->file);
    REQUIRE(p->diags.all().size() == 1);
    CHECK(p->diags.all()[0].message == "expression is nested too deeply");

    // Within the limits, it parses.
    auto ok = parse("a = f(" + std::string(60, '(') + "1" + std::string(60, ')') + ")\n");
    CHECK(ok->file);
}

TEST_CASE("net parser: arbitrary bytes give one error and no crash", "[net][errors]") {
    const std::string texts[] = {std::string("a = f(\0)", 8),
                                 "\xff\xfe",
                                 "a = f(1",
                                 "block b(",
                                 "\"",
                                 "[[[[",
                                 "a.b = c",
                                 "a = f(1.)",
                                 "0 = 1",
                                 "repeat(",
                                 "x = repeat(1, start = ) y"};
    for (const auto& t : texts) {
        INFO(t);
        auto p = parse(t);
        if (!p->file) CHECK(p->diags.error_count() == 1);
    }
}

TEST_CASE("a value may be a call with arguments: the train line's schedule", "[parse][net][optimizer]") {
    auto p = parse("train adam(lr = 0.1, schedule = cosine(steps = 2 * 50, 7, f(x = [1, 2])))\n");
    REQUIRE(p->file);
    REQUIRE(p->file->train);
    const auto& args = p->file->train->call.args;
    REQUIRE(args.size() == 2);
    const Expr& e = args[1].value;
    CHECK(args[1].name == "schedule");
    REQUIRE(e.kind == Expr::Kind::call);
    CHECK(e.name == "cosine");
    CHECK(e.loc.line == 1);
    CHECK(e.loc.col == 33);
    REQUIRE(e.operands.size() == 3);
    CHECK(e.arg_names == std::vector<std::string>{"steps", "", ""});
    CHECK(e.operands[0].kind == Expr::Kind::mul);
    CHECK(e.operands[1].integer == 7);
    REQUIRE(e.operands[2].kind == Expr::Kind::call);
    CHECK(e.operands[2].arg_names == std::vector<std::string>{"x"});
    CHECK(e.operands[2].operands[0].kind == Expr::Kind::list);
    CHECK(print_net(*p->file) == "train adam(lr = 0.1, schedule = cosine(steps = 2 * 50, 7, f(x = [1, 2])))\n");
    check_round_trip("train sgd(schedule = step(every = 3, gamma = 0.5), warmup = 2)\na = relu\n");
    // A name alone stays a name.
    CHECK(parse_expr("nearest").kind == Expr::Kind::name);
}

TEST_CASE("syntax errors in a call value point at the place", "[parse][net][optimizer]") {
    test::check_syntax_error<NetFile>("train sgd(schedule = cosine(steps = 3)\n", "test.net", 1, 39, 0,
                                      "expected ')' to close the arguments of 'sgd'");
    test::check_syntax_error<NetFile>("train sgd(schedule = cosine(steps = 3,))\n", "test.net", 1, 39, 0,
                                      "expected an argument after ','");
    test::check_syntax_error<NetFile>("train sgd(schedule = cosine(steps = ))\n", "test.net", 1, 37, 0,
                                      "expected an expression");
    test::check_syntax_error<NetFile>("train sgd(schedule = cosine(steps = 3 a))\n", "test.net", 1, 38, 0,
                                      "expected ')' to close the arguments");
}

// The `.net` parser: runs the PEGTL grammar with actions that build the owned NetFile as the rules match.
#include <dsl/frontend/parse.hpp>

#include <dsl/base/error.hpp>
#include <dsl/grammar/net.hpp>

#include "syntax_error.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <string_view>
#include <utility>

namespace dsl::frontend {

std::string Ref::text() const {
    std::string s;
    for (const auto& p : path) {
        if (!s.empty()) s += '.';
        s += p;
    }
    return s;
}

namespace {

namespace pegtl = tao::pegtl;
namespace g = dsl::grammar::net;

// Parentheses, lists and unary minus recurse in the parser; beyond this depth we stop rather than risk the
// stack. Binary chains do not recurse while parsing but build deep trees, which later passes walk
// recursively, so the tree's depth has its own limit.
constexpr int max_nesting = 64;
constexpr int max_tree_depth = 256;

// What the actions have seen so far. Statements, calls and blocks do not nest, so one of each is enough;
// expressions do, and live on a stack.
struct Builder {
    const SourceFile* file = nullptr;
    NetFile out;

    struct Item {
        Expr expr;
        int depth = 1;
        const char* begin = nullptr;  // where the expression's text starts, to span operators' operands
    };
    std::vector<Item> exprs;
    std::vector<std::size_t> list_marks;
    // Call values (`cosine(steps = 10)`) nest: each open one's callee, where its arguments start on the
    // expression stack, and their names; the labels of named arguments whose values are being parsed.
    struct CallFrame {
        std::string callee;
        Location loc;
        std::size_t mark = 0;
        std::vector<std::string> names;
    };
    std::vector<CallFrame> call_frames;
    std::vector<std::string> value_labels;
    int nesting = 0;

    std::string last_name;  // for "{name}" in messages

    std::string string_value;
    Location string_loc;

    TensorDecl tensor;
    Location train_loc;

    Call call;
    std::string arg_name;
    Location arg_loc;

    std::string stmt_name;
    Location stmt_loc;
    bool is_repeat = false;
    Location repeat_loc;
    std::optional<Expr> count, start;
    std::vector<Ref> from;

    bool in_block = false;
    BlockDef block;
    Location block_open;
    Param param;

    template <typename ActionInput>
    Location loc(const ActionInput& in) const {
        const auto pos = in.position();
        // A caret spans one line only.
        std::string_view text(in.begin(), in.size());
        const auto eol = text.find_first_of("\r\n");
        if (eol != std::string_view::npos) text = text.substr(0, eol);
        return Location{file, static_cast<unsigned>(pos.line), static_cast<unsigned>(pos.column),
                        static_cast<unsigned>(std::max<std::size_t>(1, text.size()))};
    }

    template <typename ActionInput>
    void push(const ActionInput& in, Expr e, int depth = 1) {
        push(in.begin(), std::move(e), depth);
    }
    void push(const char* begin, Expr e, int depth) {
        if (depth > max_tree_depth) throw UserError("expression is nested too deeply", e.loc);
        exprs.push_back(Item{std::move(e), depth, begin});
    }
    // The location of `start`, spanning the text from `begin` to `end` without the blanks and comments that
    // follow the last token, on the first line only.
    static Location span(Location start, const char* begin, const char* end) {
        std::string_view text(begin, static_cast<std::size_t>(end - begin));
        text = text.substr(0, end_of_previous_token(text, text.size()));
        const auto eol = text.find_first_of("\r\n");
        if (eol != std::string_view::npos) text = text.substr(0, eol);
        start.length = static_cast<unsigned>(std::max<std::size_t>(1, text.size()));
        return start;
    }
    Item pop() {
        Item it = std::move(exprs.back());
        exprs.pop_back();
        return it;
    }
    template <typename ActionInput>
    void enter(const ActionInput& in) {
        if (++nesting > max_nesting) throw UserError("expression is nested too deeply", loc(in));
    }

    void finish_stmt(std::string name, Location at) {
        Stmt s;
        s.name = std::move(name);
        s.loc = at;
        s.call = std::move(call);
        s.is_repeat = is_repeat;
        s.count = std::move(count);
        s.start = std::move(start);
        s.from = std::move(from);
        call = Call{};
        is_repeat = false;
        count.reset();
        start.reset();
        from.clear();
        (in_block ? block.body : out.body).push_back(std::move(s));
    }
};

template <typename ActionInput>
std::int64_t parse_int(const ActionInput& in, const Builder& b) {
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(in.begin(), in.end(), v);
    if (ec != std::errc() || p != in.end()) throw UserError("integer literal is too large", b.loc(in));
    return v;
}

Expr leaf(Expr::Kind kind, Location loc) {
    Expr e;
    e.kind = kind;
    e.loc = loc;
    return e;
}

template <typename Rule>
struct action : pegtl::nothing<Rule> {};

// --- expressions

template <>
struct action<g::int_lit> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        Expr e = leaf(Expr::Kind::integer, b.loc(in));
        e.integer = parse_int(in, b);
        b.push(in, std::move(e));
    }
};

template <>
struct action<g::real_lit> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        Expr e = leaf(Expr::Kind::real, b.loc(in));
        const auto [p, ec] = std::from_chars(in.begin(), in.end(), e.real);
        if (ec != std::errc() || p != in.end()) throw UserError("real literal is out of range", e.loc);
        b.push(in, std::move(e));
    }
};

template <bool Value>
struct bool_action {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        Expr e = leaf(Expr::Kind::boolean, b.loc(in));
        e.boolean = Value;
        b.push(in, std::move(e));
    }
};
template <>
struct action<g::true_lit> : bool_action<true> {};
template <>
struct action<g::false_lit> : bool_action<false> {};

template <>
struct action<g::name_ref> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        Expr e = leaf(Expr::Kind::name, b.loc(in));
        e.name = in.string();
        b.push(in, std::move(e));
    }
};

template <>
struct action<g::list_open> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.enter(in);
        b.list_marks.push_back(b.exprs.size());
    }
};

template <>
struct action<g::list_body> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        Expr e = leaf(Expr::Kind::list, b.loc(in));
        int depth = 0;
        const auto first = b.list_marks.back();
        b.list_marks.pop_back();
        for (auto i = first; i < b.exprs.size(); ++i) {
            depth = std::max(depth, b.exprs[i].depth);
            e.operands.push_back(std::move(b.exprs[i].expr));
        }
        b.exprs.resize(first);
        --b.nesting;
        b.push(in, std::move(e), depth + 1);
    }
};

// The leading name of `text` (the callee or label before blanks, '(' or '=').
std::string leading_name(std::string_view text) {
    std::size_t n = 0;
    while (n < text.size() && (std::isalnum(static_cast<unsigned char>(text[n])) || text[n] == '_')) ++n;
    return std::string(text.substr(0, n));
}

template <>
struct action<g::call_value_head> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.enter(in);
        Location at = b.loc(in);
        std::string callee = leading_name(std::string_view(in.begin(), in.size()));
        at.length = static_cast<unsigned>(callee.size());
        b.call_frames.push_back(Builder::CallFrame{std::move(callee), at, b.exprs.size(), {}});
    }
};

template <>
struct action<g::value_arg_label> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.value_labels.push_back(leading_name(std::string_view(in.begin(), in.size())));
    }
};

template <>
struct action<g::value_named_arg> {
    static void apply0(Builder& b) {
        b.call_frames.back().names.push_back(std::move(b.value_labels.back()));
        b.value_labels.pop_back();
    }
};

template <>
struct action<g::value_positional_arg> {
    static void apply0(Builder& b) { b.call_frames.back().names.emplace_back(); }
};

template <>
struct action<g::call_value> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        Builder::CallFrame f = std::move(b.call_frames.back());
        b.call_frames.pop_back();
        Expr e = leaf(Expr::Kind::call, Builder::span(f.loc, in.begin(), in.end()));
        e.name = std::move(f.callee);
        e.arg_names = std::move(f.names);
        int depth = 0;
        for (auto i = f.mark; i < b.exprs.size(); ++i) {
            depth = std::max(depth, b.exprs[i].depth);
            e.operands.push_back(std::move(b.exprs[i].expr));
        }
        b.exprs.resize(f.mark);
        --b.nesting;
        b.push(in, std::move(e), depth + 1);
    }
};

template <>
struct action<g::paren_open> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.enter(in);
    }
};

// Parentheses make no node, but the expression's span takes them in.
template <>
struct action<g::paren> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        --b.nesting;
        auto& top = b.exprs.back();
        top.begin = in.begin();
        top.expr.loc = Builder::span(b.loc(in), in.begin(), in.end());
    }
};

template <>
struct action<g::neg_sign> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.enter(in);
    }
};

template <>
struct action<g::neg> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        --b.nesting;
        auto operand = b.pop();
        Expr e = leaf(Expr::Kind::neg, Builder::span(b.loc(in), in.begin(), in.end()));
        e.operands.push_back(std::move(operand.expr));
        b.push(in, std::move(e), operand.depth + 1);
    }
};

// A binary tail (`+ b`, `* b`) combines the two topmost expressions; its first character is the operator.
struct binary_action {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        auto rhs = b.pop();
        auto lhs = b.pop();
        Expr::Kind kind = Expr::Kind::add;
        switch (*in.begin()) {
            case '+': kind = Expr::Kind::add; break;
            case '-': kind = Expr::Kind::sub; break;
            case '*': kind = Expr::Kind::mul; break;
            default: kind = Expr::Kind::div; break;
        }
        // The whole `lhs op rhs`, from where the left operand starts to the end of this tail.
        Expr e = leaf(kind, Builder::span(lhs.expr.loc, lhs.begin, in.end()));
        e.operands.push_back(std::move(lhs.expr));
        e.operands.push_back(std::move(rhs.expr));
        b.push(lhs.begin, std::move(e), std::max(lhs.depth, rhs.depth) + 1);
    }
};
template <>
struct action<g::sum_tail> : binary_action {};
template <>
struct action<g::product_tail> : binary_action {};

// --- calls and references

template <>
struct action<g::callee> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.call = Call{};
        b.call.callee = in.string();
        b.call.loc = b.loc(in);
        b.last_name = b.call.callee;
    }
};

template <>
struct action<g::arg_label> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        const std::string_view text(in.begin(), in.size());
        std::size_t n = 0;
        while (n < text.size() && (std::isalnum(static_cast<unsigned char>(text[n])) || text[n] == '_')) ++n;
        b.arg_name = std::string(text.substr(0, n));
        b.arg_loc = b.loc(in);
        b.arg_loc.length = static_cast<unsigned>(n);
    }
};

template <>
struct action<g::named_arg> {
    static void apply0(Builder& b) { b.call.args.push_back(Arg{std::move(b.arg_name), b.arg_loc, b.pop().expr}); }
};

template <>
struct action<g::positional_arg> {
    static void apply0(Builder& b) {
        Expr value = b.pop().expr;
        const Location at = value.loc;
        b.call.args.push_back(Arg{"", at, std::move(value)});
    }
};

template <>
struct action<g::ref_path> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        Ref r;
        r.loc = b.loc(in);
        const std::string text = in.string();
        std::size_t begin = 0;
        while (true) {
            const auto dot = text.find('.', begin);
            r.path.push_back(text.substr(begin, dot - begin));
            if (dot == std::string::npos) break;
            begin = dot + 1;
        }
        b.from.push_back(std::move(r));
    }
};

// --- statements

template <>
struct action<g::repeat_kw> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.is_repeat = true;
        b.repeat_loc = b.loc(in);
    }
};

template <>
struct action<g::repeat_count> {
    static void apply0(Builder& b) { b.count = b.pop().expr; }
};

template <>
struct action<g::repeat_start> {
    static void apply0(Builder& b) { b.start = b.pop().expr; }
};

template <>
struct action<g::stmt_name> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.stmt_name = in.string();
        b.stmt_loc = b.loc(in);
        b.last_name = b.stmt_name;
    }
};

template <>
struct action<g::named_stmt> {
    static void apply0(Builder& b) { b.finish_stmt(std::move(b.stmt_name), b.stmt_loc); }
};

template <>
struct action<g::anon_repeat> {
    static void apply0(Builder& b) { b.finish_stmt("", b.repeat_loc); }
};

// --- declarations

template <>
struct action<g::string_lit> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.string_loc = b.loc(in);
        b.string_value = std::string(in.begin() + 1, in.size() - 2);
    }
};

template <>
struct action<g::import_decl> {
    static void apply0(Builder& b) { b.out.imports.push_back(Import{std::move(b.string_value), b.string_loc}); }
};

template <TensorDecl::Kind Kind>
struct tensor_name_action {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.tensor = TensorDecl{};
        b.tensor.kind = Kind;
        b.tensor.name = in.string();
        b.tensor.loc = b.loc(in);
        b.last_name = b.tensor.name;
    }
};
template <>
struct action<g::input_name> : tensor_name_action<TensorDecl::Kind::input> {};
template <>
struct action<g::label_name> : tensor_name_action<TensorDecl::Kind::label> {};

template <>
struct action<g::batch_dim> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.tensor.shape.push_back(Dim{true, 0, b.loc(in)});
    }
};

template <>
struct action<g::dim_size> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.tensor.shape.push_back(Dim{false, parse_int(in, b), b.loc(in)});
    }
};

// On the whole type, which matches only where no '=' follows (`float = relu` names a statement).
template <>
struct action<g::label_type> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.tensor.is_float = in.string() == "float";
    }
};

struct tensor_decl_action {
    static void apply0(Builder& b) { b.out.tensors.push_back(std::move(b.tensor)); }
};
template <>
struct action<g::input_decl> : tensor_decl_action {};
template <>
struct action<g::label_decl> : tensor_decl_action {};

template <>
struct action<g::train_kw> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.train_loc = b.loc(in);
    }
};

template <>
struct action<g::train_decl> {
    static void apply0(Builder& b) {
        b.out.train = TrainDecl{std::move(b.call), b.train_loc};
        b.call = Call{};
    }
};

template <>
struct action<g::block_name> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.block = BlockDef{};
        b.block.name = in.string();
        b.block.loc = b.loc(in);
        b.in_block = true;
    }
};

template <>
struct action<g::param_name> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.param = Param{in.string(), b.loc(in), std::nullopt};
    }
};

template <>
struct action<g::param_default> {
    static void apply0(Builder& b) { b.param.default_value = b.pop().expr; }
};

struct param_action {
    static void apply0(Builder& b) { b.block.params.push_back(std::move(b.param)); }
};
template <>
struct action<g::param> : param_action {};
template <>
struct action<g::param_next> : param_action {};

template <>
struct action<g::body_brace> {
    template <typename ActionInput>
    static void apply(const ActionInput& in, Builder& b) {
        b.block_open = b.loc(in);
    }
};

template <>
struct action<g::block_def> {
    static void apply0(Builder& b) {
        b.out.blocks.push_back(std::move(b.block));
        b.block = BlockDef{};
        b.in_block = false;
    }
};

// --- turning a grammar error into a diagnostic

// Characters the language uses somewhere outside strings and comments.
bool is_language_char(char c) {
    const auto u = static_cast<unsigned char>(c);
    return std::isalnum(u) || std::isspace(u) || (c != '\0' && std::strchr("_=()[]{},.+-*/\"#", c) != nullptr);
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    for (auto p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

void report(const pegtl::parse_error& e, const SourceFile& file, const Builder& b, Diagnostics& diags) {
    const std::string_view text = file.text;
    std::size_t at = e.positions().empty() ? 0 : std::min(e.positions().front().byte, text.size());
    std::string message(e.message());
    const char c = at < text.size() ? text[at] : '\n';

    if (message == g::error_message<grammar::string_close>) {
        // Point at the opening quote: the string body cannot contain one, so it is the last before here.
        const auto quote = text.rfind('"', at == 0 ? 0 : at - 1);
        const std::size_t open = quote == std::string_view::npos ? at : quote;
        diags.error(location_at(file, open, static_cast<unsigned>(std::max<std::size_t>(1, at - open))),
                    "unterminated string");
        return;
    }
    if (!is_language_char(c)) {
        diags.error(location_at(file, at), unexpected_character(text, at));
        return;
    }
    if (starts_with(message, "expected a")) {
        // A reserved word where a name was expected: say so rather than "expected a name".
        std::size_t n = 0;
        while (at + n < text.size() && (std::isalnum(static_cast<unsigned char>(text[at + n])) || text[at + n] == '_'))
            ++n;
        const std::string word(text.substr(at, n));
        pegtl::memory_input<> in(word, "");
        if (n > 0 && pegtl::parse<pegtl::seq<g::reserved, pegtl::eof>>(in)) {
            diags.error(location_at(file, at, static_cast<unsigned>(n)),
                        "'" + word + "' is a keyword and cannot be used as a name");
            return;
        }
    }
    if (message == g::error_message<g::from_ref> && c == '=') {
        // `from = ...` on the line after a statement reads as that statement's `from` clause.
        const auto end = end_of_previous_token(text, at);
        if (end >= 4 && text.substr(end - 4, 4) == "from") {
            diags.error(location_at(file, end - 4, 4), "'from' is a keyword and cannot be used as a name");
            return;
        }
    }
    // A missing piece of punctuation, or anything missing at the end of the file, is reported just after the
    // token it should follow.
    at = error_offset(text, at, message);
    replace_all(message, "{name}", b.last_name);
    replace_all(message, "{block}", b.block.name);
    auto& d = diags.error(location_at(file, at), message);
    if (message.find("to close the block") != std::string::npos && b.block_open.known())
        Diagnostics::note(d, b.block_open, "to match this '{'");
}

}  // namespace

std::optional<NetFile> parse_net(const SourceFile& file, Diagnostics& diags) {
    Builder b;
    b.file = &file;
    b.out.source = &file;
    pegtl::memory_input<> in(file.text, file.path);
    try {
        pegtl::parse<g::grammar, action, g::control>(in, b);
    } catch (const pegtl::parse_error& e) {
        report(e, file, b, diags);
        return std::nullopt;
    } catch (const UserError& e) {  // found by an action (a literal out of range, nesting too deep), with its span
        diags.error(e.location(), e.what());
        return std::nullopt;
    }
    return std::move(b.out);
}

}  // namespace dsl::frontend

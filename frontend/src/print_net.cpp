// Canonical `.net` text and JSON for a NetFile; the text parses back to the same tree.
#include <dsl/frontend/print.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <string>

namespace dsl::frontend {
namespace {

// Binding strength, loosest first; a subexpression is parenthesized when it binds more loosely than its
// place requires.
enum Prec { sum = 1, product = 2, unary = 3, atom = 4 };

Prec precedence(const Expr& e) {
    switch (e.kind) {
        case Expr::Kind::add:
        case Expr::Kind::sub: return sum;
        case Expr::Kind::mul:
        case Expr::Kind::div: return product;
        case Expr::Kind::neg: return unary;
        default: return atom;
    }
}

// Shortest text that reads back as the same double, and always as a real (with '.' or an exponent).
std::string real_text(double v) {
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 'n': inf and nan stay as they are
    return s;
}

std::string expr_text(const Expr& e);

std::string operand_text(const Expr& e, int min_prec) {
    std::string s = expr_text(e);
    return precedence(e) < min_prec ? "(" + s + ")" : s;
}

std::string expr_text(const Expr& e) {
    switch (e.kind) {
        case Expr::Kind::integer: return std::to_string(e.integer);
        case Expr::Kind::real: return real_text(e.real);
        case Expr::Kind::boolean: return e.boolean ? "true" : "false";
        case Expr::Kind::name: return e.name;
        case Expr::Kind::list: {
            std::string s = "[";
            for (std::size_t i = 0; i < e.operands.size(); ++i) s += (i ? ", " : "") + expr_text(e.operands[i]);
            return s + "]";
        }
        case Expr::Kind::neg: return "-" + operand_text(e.operands.at(0), unary);
        case Expr::Kind::call: {
            std::string s = e.name + "(";
            for (std::size_t i = 0; i < e.operands.size(); ++i) {
                if (i) s += ", ";
                if (i < e.arg_names.size() && !e.arg_names[i].empty()) s += e.arg_names[i] + " = ";
                s += expr_text(e.operands[i]);
            }
            return s + ")";
        }
        default: break;
    }
    // Binary operators associate to the left: the right operand needs parentheses at equal precedence.
    const Prec p = precedence(e);
    const char* op = e.kind == Expr::Kind::add   ? " + "
                     : e.kind == Expr::Kind::sub ? " - "
                     : e.kind == Expr::Kind::mul ? " * "
                                                 : " / ";
    return operand_text(e.operands.at(0), p) + op + operand_text(e.operands.at(1), p + 1);
}

std::string call_text(const Call& c) {
    std::string s = c.callee;
    if (c.args.empty()) return s;
    s += "(";
    for (std::size_t i = 0; i < c.args.size(); ++i) {
        if (i) s += ", ";
        if (!c.args[i].name.empty()) s += c.args[i].name + " = ";
        s += expr_text(c.args[i].value);
    }
    return s + ")";
}

std::string stmt_text(const Stmt& st) {
    std::string s;
    if (!st.name.empty()) s += st.name + " = ";
    if (st.is_repeat) {
        s += "repeat(" + (st.count ? expr_text(*st.count) : std::string("1"));
        if (st.start) s += ", start = " + expr_text(*st.start);
        s += ") ";
    }
    s += call_text(st.call);
    for (std::size_t i = 0; i < st.from.size(); ++i) s += (i ? ", " : " from ") + st.from[i].text();
    return s;
}

// --- JSON

void add_location(nlohmann::json& j, const Location& loc, bool with_locations) {
    if (!with_locations || !loc.known()) return;
    j["line"] = loc.line;
    j["col"] = loc.col;
}

nlohmann::json expr_json(const Expr& e, bool wl) {
    nlohmann::json j;
    switch (e.kind) {
        case Expr::Kind::integer: j["int"] = e.integer; break;
        case Expr::Kind::real: j["real"] = e.real; break;
        case Expr::Kind::boolean: j["bool"] = e.boolean; break;
        case Expr::Kind::name: j["name"] = e.name; break;
        case Expr::Kind::list: {
            auto& items = j["list"] = nlohmann::json::array();
            for (const auto& o : e.operands) items.push_back(expr_json(o, wl));
            break;
        }
        case Expr::Kind::neg:
            j["op"] = "neg";
            j["arg"] = expr_json(e.operands.at(0), wl);
            break;
        case Expr::Kind::call: {
            j["call"] = e.name;
            auto& args = j["args"] = nlohmann::json::array();
            for (std::size_t i = 0; i < e.operands.size(); ++i) {
                nlohmann::json a{{"value", expr_json(e.operands[i], wl)}};
                if (i < e.arg_names.size() && !e.arg_names[i].empty()) a["name"] = e.arg_names[i];
                args.push_back(std::move(a));
            }
            break;
        }
        default:
            j["op"] = e.kind == Expr::Kind::add   ? "+"
                      : e.kind == Expr::Kind::sub ? "-"
                      : e.kind == Expr::Kind::mul ? "*"
                                                  : "/";
            j["lhs"] = expr_json(e.operands.at(0), wl);
            j["rhs"] = expr_json(e.operands.at(1), wl);
            break;
    }
    add_location(j, e.loc, wl);
    return j;
}

nlohmann::json args_json(const std::vector<Arg>& args, bool wl) {
    auto a = nlohmann::json::array();
    for (const auto& arg : args) {
        nlohmann::json j;
        if (!arg.name.empty()) j["name"] = arg.name;
        j["value"] = expr_json(arg.value, wl);
        add_location(j, arg.loc, wl);
        a.push_back(std::move(j));
    }
    return a;
}

nlohmann::json stmt_json(const Stmt& st, bool wl) {
    nlohmann::json j;
    j["name"] = st.name;
    j["callee"] = st.call.callee;
    j["args"] = args_json(st.call.args, wl);
    auto& from = j["from"] = nlohmann::json::array();
    for (const auto& r : st.from) from.push_back(r.text());
    if (st.is_repeat) {
        auto& r = j["repeat"] = nlohmann::json::object();
        if (st.count) r["count"] = expr_json(*st.count, wl);
        if (st.start) r["start"] = expr_json(*st.start, wl);
    }
    add_location(j, st.loc, wl);
    return j;
}

}  // namespace

std::string print_net(const NetFile& file) {
    std::vector<std::string> sections;

    std::string s;
    for (const auto& imp : file.imports) s += "import \"" + imp.path + "\"\n";
    if (!s.empty()) sections.push_back(std::move(s));

    s.clear();
    for (const auto& t : file.tensors) {
        s += t.kind == TensorDecl::Kind::input ? "input " : "label ";
        s += t.name + " [";
        for (std::size_t i = 0; i < t.shape.size(); ++i)
            s += (i ? ", " : "") + (t.shape[i].batch ? std::string("N") : std::to_string(t.shape[i].size));
        s += t.is_float ? "] float\n" : "]\n";
    }
    if (!s.empty()) sections.push_back(std::move(s));

    if (file.train) sections.push_back("train " + call_text(file.train->call) + "\n");

    for (const auto& b : file.blocks) {
        s = "block " + b.name + "(";
        for (std::size_t i = 0; i < b.params.size(); ++i) {
            if (i) s += ", ";
            s += b.params[i].name;
            if (b.params[i].default_value) s += " = " + expr_text(*b.params[i].default_value);
        }
        s += ") {\n";
        for (const auto& st : b.body) s += "  " + stmt_text(st) + "\n";
        s += "}\n";
        sections.push_back(std::move(s));
    }

    s.clear();
    for (const auto& st : file.body) s += stmt_text(st) + "\n";
    if (!s.empty()) sections.push_back(std::move(s));

    std::string out;
    for (std::size_t i = 0; i < sections.size(); ++i) out += (i ? "\n" : "") + sections[i];
    return out;
}

nlohmann::json net_to_json(const NetFile& file, bool with_locations) {
    const bool wl = with_locations;
    nlohmann::json j;

    auto& imports = j["imports"] = nlohmann::json::array();
    for (const auto& imp : file.imports) {
        nlohmann::json i = {{"path", imp.path}};
        add_location(i, imp.loc, wl);
        imports.push_back(std::move(i));
    }

    auto& tensors = j["tensors"] = nlohmann::json::array();
    for (const auto& t : file.tensors) {
        auto shape = nlohmann::json::array();
        for (const auto& d : t.shape) shape.push_back(d.batch ? nlohmann::json("N") : nlohmann::json(d.size));
        nlohmann::json tj = {{"kind", t.kind == TensorDecl::Kind::input ? "input" : "label"},
                             {"name", t.name},
                             {"shape", std::move(shape)}};
        if (t.is_float) tj["element"] = "float";
        add_location(tj, t.loc, wl);
        tensors.push_back(std::move(tj));
    }

    if (file.train) {
        nlohmann::json tj = {{"callee", file.train->call.callee}, {"args", args_json(file.train->call.args, wl)}};
        add_location(tj, file.train->loc, wl);
        j["train"] = std::move(tj);
    } else {
        j["train"] = nullptr;
    }

    auto& blocks = j["blocks"] = nlohmann::json::array();
    for (const auto& b : file.blocks) {
        auto params = nlohmann::json::array();
        for (const auto& p : b.params) {
            nlohmann::json pj = {{"name", p.name}};
            if (p.default_value) pj["default"] = expr_json(*p.default_value, wl);
            add_location(pj, p.loc, wl);
            params.push_back(std::move(pj));
        }
        auto body = nlohmann::json::array();
        for (const auto& st : b.body) body.push_back(stmt_json(st, wl));
        nlohmann::json bj = {{"name", b.name}, {"params", std::move(params)}, {"body", std::move(body)}};
        add_location(bj, b.loc, wl);
        blocks.push_back(std::move(bj));
    }

    auto& body = j["body"] = nlohmann::json::array();
    for (const auto& st : file.body) body.push_back(stmt_json(st, wl));
    return j;
}

}  // namespace dsl::frontend

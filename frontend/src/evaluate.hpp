// The values of the expressions of a `.net` file: layer and block arguments, parameter defaults, repeat
// counts. Integers stay integers (checked for overflow), reals are doubles; names are a block's parameters.
#pragma once

#include <dsl/base/diagnostics.hpp>
#include <dsl/frontend/net_ast.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dsl::frontend {

// The value of an argument or block parameter.
struct Value {
    enum class Kind { integer, real, boolean, list } kind = Kind::integer;
    std::int64_t integer = 0;
    double real = 0.0;
    bool boolean = false;
    std::vector<Value> items;
    Location loc;

    bool is_number() const { return kind == Kind::integer || kind == Kind::real; }
    double number() const { return kind == Kind::integer ? static_cast<double>(integer) : real; }
};

using Env = std::map<std::string, Value>;

class Evaluator {
public:
    // How an error is reported: at `loc`, inside the elaborator's scope `scope` (which adds the notes of
    // the instances around it), with a "did you mean" when `suggestion` is not empty.
    using Report = std::function<void(Location loc, std::string message, int scope, const std::string& suggestion)>;

    Evaluator(const Diagnostics& diags, Report report) : diags_(diags), report_(std::move(report)) {}

    // The value of `e` with the names of `env`; nullopt when it has none (reported).
    std::optional<Value> eval(const Expr& e, const Env& env, int scope, int depth = 0);

private:
    static constexpr int max_expr_depth = 200;  // keeps absurd nesting from exhausting the stack

    const Diagnostics& diags_;
    Report report_;

    std::optional<Value> arithmetic(const Expr& e, const Env& env, int scope, int depth);
    void report(Location loc, std::string message, int scope, const std::string& suggestion = "") {
        report_(loc, std::move(message), scope, suggestion);
    }
};

}  // namespace dsl::frontend

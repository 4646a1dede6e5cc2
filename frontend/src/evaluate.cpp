// The evaluator of `.net` expressions (evaluate.hpp).
#include "evaluate.hpp"

#include <limits>

namespace dsl::frontend {

std::optional<Value> Evaluator::eval(const Expr& e, const Env& env, int scope, int depth) {
    if (depth > max_expr_depth) {
        report(e.loc, "expression nested too deeply", scope);
        return std::nullopt;
    }
    Value v;
    v.loc = e.loc;
    switch (e.kind) {
        case Expr::Kind::integer: v.integer = e.integer; return v;
        case Expr::Kind::real:
            v.kind = Value::Kind::real;
            v.real = e.real;
            return v;
        case Expr::Kind::boolean:
            v.kind = Value::Kind::boolean;
            v.boolean = e.boolean;
            return v;
        case Expr::Kind::name: {
            if (auto it = env.find(e.name); it != env.end()) {
                Value found = it->second;
                found.loc = e.loc;
                return found;
            }
            std::vector<std::string> names;
            if (!diags_.full())  // past the error limit a suggestion is never shown: spare its cost
                for (const auto& [n, _] : env) names.push_back(n);
            report(e.loc, "unknown name '" + e.name + "'", scope, dsl::closest_match(e.name, names));
            return std::nullopt;
        }
        case Expr::Kind::list: {
            v.kind = Value::Kind::list;
            for (const Expr& op : e.operands) {
                auto item = eval(op, env, scope, depth + 1);
                if (!item) return std::nullopt;
                v.items.push_back(std::move(*item));
            }
            return v;
        }
        case Expr::Kind::neg: {
            if (e.operands.size() != 1) return std::nullopt;
            auto a = eval(e.operands[0], env, scope, depth + 1);
            if (!a) return std::nullopt;
            if (a->kind == Value::Kind::integer && a->integer != std::numeric_limits<std::int64_t>::min()) {
                v.integer = -a->integer;
                return v;
            }
            if (a->kind == Value::Kind::real) {
                v.kind = Value::Kind::real;
                v.real = -a->real;
                return v;
            }
            report(e.loc, a->kind == Value::Kind::integer ? "integer overflow" : "'-' needs a number", scope);
            return std::nullopt;
        }
        case Expr::Kind::call:
            report(e.loc, "'" + e.name + "(...)' is a learning-rate schedule, which only the train line takes", scope);
            return std::nullopt;
        default: return arithmetic(e, env, scope, depth);
    }
}

std::optional<Value> Evaluator::arithmetic(const Expr& e, const Env& env, int scope, int depth) {
    if (e.operands.size() != 2) return std::nullopt;
    auto a = eval(e.operands[0], env, scope, depth + 1);
    auto b = eval(e.operands[1], env, scope, depth + 1);
    if (!a || !b) return std::nullopt;
    if (!a->is_number() || !b->is_number()) {
        report(e.loc, "arithmetic needs numbers", scope);
        return std::nullopt;
    }
    Value v;
    v.loc = e.loc;
    const bool div = e.kind == Expr::Kind::div;
    if (div && b->number() == 0) {
        report(e.loc, "division by zero", scope);
        return std::nullopt;
    }
    if (a->kind == Value::Kind::integer && b->kind == Value::Kind::integer) {
        const std::int64_t x = a->integer, y = b->integer;
        bool overflow = false;
        switch (e.kind) {
            case Expr::Kind::add: overflow = __builtin_add_overflow(x, y, &v.integer); break;
            case Expr::Kind::sub: overflow = __builtin_sub_overflow(x, y, &v.integer); break;
            case Expr::Kind::mul: overflow = __builtin_mul_overflow(x, y, &v.integer); break;
            default:
                overflow = x == std::numeric_limits<std::int64_t>::min() && y == -1;
                if (!overflow) v.integer = x / y;  // truncates toward zero, as C does
        }
        if (overflow) {
            report(e.loc, "integer overflow", scope);
            return std::nullopt;
        }
        return v;
    }
    v.kind = Value::Kind::real;
    const double x = a->number(), y = b->number();
    v.real = e.kind == Expr::Kind::add   ? x + y
             : e.kind == Expr::Kind::sub ? x - y
             : e.kind == Expr::Kind::mul ? x * y
                                         : x / y;
    return v;
}

}  // namespace dsl::frontend

// A layer's arguments: each checked against its kind's parameters in the table (layer_kinds.cpp), by name
// or position and by type, and the parameters not given set to the table's defaults.
#include "layer_args.hpp"

#include <algorithm>
#include <set>
#include <variant>

namespace dsl::frontend {

namespace {

std::string choices_text(const ParamSpec& p) {
    std::string out;
    for (std::size_t i = 0; i < p.choices.size(); ++i)
        out += std::string(i == 0 ? "" : i + 1 == p.choices.size() ? " or " : ", ") + p.choices[i];
    return out;
}

std::string type_text(const ParamSpec& p) {
    switch (p.type) {
        case ParamType::positive_int: return "a positive integer";
        case ParamType::positive_spatial:
            return "a positive integer, or a list of one per spatial dimension ([height, width] or [depth, height, "
                   "width])";
        case ParamType::nonneg_spatial:
            return "a non-negative integer, or a list of one per spatial dimension ([height, width] or [depth, "
                   "height, width])";
        case ParamType::boolean: return "true or false";
        case ParamType::positive_real: return "a positive number";
        case ParamType::any_real: return "a number";
        case ParamType::unit_real: return "a number between 0 and 1";
        case ParamType::probability: return "a number at least 0 and less than 1";
        case ParamType::choice: return "one of " + choices_text(p);
    }
    return "?";
}

// Sets a parameter the statement did not give to the table's default.
void set_default(Layer& layer, const ParamSpec& p) {
    const auto whole = static_cast<std::int64_t>(p.default_value);
    const FieldRef member = field_member(layer, p.field);
    switch (p.type) {
        case ParamType::positive_int:
        case ParamType::choice: *std::get<std::int64_t*>(member) = whole; break;
        case ParamType::positive_spatial:
        case ParamType::nonneg_spatial:
            *std::get<Spatial*>(member) = std::string(p.default_of) == "kernel" ? layer.kernel : Spatial{whole};
            break;
        case ParamType::boolean: *std::get<bool*>(member) = p.default_value != 0.0; break;
        case ParamType::positive_real:
        case ParamType::any_real:
        case ParamType::unit_real:
        case ParamType::probability: *std::get<double*>(member) = p.default_value; break;
    }
}

// Sets the member of `layer` that `p` names to `v`; false when `v` is not of `p`'s type.
bool assign(Layer& layer, const ParamSpec& p, const Value& v) {
    const FieldRef member = field_member(layer, p.field);
    switch (p.type) {
        case ParamType::positive_int:
            if (v.kind != Value::Kind::integer || v.integer < 1) return false;
            *std::get<std::int64_t*>(member) = v.integer;
            return true;
        case ParamType::positive_spatial:
        case ParamType::nonneg_spatial: {
            // One number (kept as a list of one: shape inference applies it to every spatial dimension), or a
            // list of one per dimension (two or three; shape inference checks it against the input).
            const std::int64_t lo = p.type == ParamType::positive_spatial ? 1 : 0;
            Spatial values;
            if (v.kind == Value::Kind::integer) {
                values = {v.integer};
            } else if (v.kind == Value::Kind::list && v.items.size() >= 2 && v.items.size() <= max_space) {
                values = Spatial::filled(static_cast<int>(v.items.size()), 0);
                for (std::size_t i = 0; i < v.items.size(); ++i) {
                    if (v.items[i].kind != Value::Kind::integer) return false;
                    values[static_cast<int>(i)] = v.items[i].integer;
                }
            } else {
                return false;
            }
            if (std::any_of(values.begin(), values.end(), [&](std::int64_t x) { return x < lo; })) return false;
            *std::get<Spatial*>(member) = values;
            return true;
        }
        case ParamType::boolean:
            if (v.kind != Value::Kind::boolean) return false;
            *std::get<bool*>(member) = v.boolean;
            return true;
        case ParamType::positive_real:
        case ParamType::any_real:
        case ParamType::unit_real:
        case ParamType::probability: {
            if (!v.is_number()) return false;
            const double x = v.number();
            if (p.type == ParamType::positive_real && !(x > 0)) return false;
            if (p.type == ParamType::unit_real && !(x >= 0 && x <= 1)) return false;
            if (p.type == ParamType::probability && !(x >= 0 && x < 1)) return false;
            *std::get<double*>(member) = x;
            return true;
        }
        case ParamType::choice: break;  // a bare name, never evaluated: bind_choice
    }
    return false;
}

// Sets a choice parameter from its argument, a bare name among the choices; false when it is not one.
bool bind_choice(Layer& layer, const ParamSpec& p, const Expr& e) {
    if (e.kind != Expr::Kind::name) return false;
    for (std::size_t i = 0; i < p.choices.size(); ++i)
        if (e.name == p.choices[i]) {
            *std::get<std::int64_t*>(field_member(layer, p.field)) = static_cast<std::int64_t>(i);
            return true;
        }
    return false;
}

}  // namespace

void bind_layer_args(const Call& c, Layer& layer, int scope, const Env& env, Evaluator& evaluator,
                     const Evaluator::Report& report) {
    const std::vector<ParamSpec>& params = kind_of(layer.op).params;
    const std::string kind = "'" + c.callee + "'";
    std::vector<std::string> names;
    for (const ParamSpec& p : params) names.emplace_back(p.name);
    std::set<std::string> seen;
    std::size_t positional = 0;
    for (const Arg& a : c.args) {
        std::string name = a.name;
        if (name.empty()) {
            if (positional >= params.size()) {
                report(a.loc,
                       params.empty() ? kind + " takes no arguments"
                                      : "too many positional arguments: " + kind + " takes " +
                                            std::to_string(params.size()) + ", got " + std::to_string(positional + 1),
                       scope, "");
                continue;
            }
            name = names[positional++];
        } else if (std::find(names.begin(), names.end(), name) == names.end()) {
            report(a.loc, kind + " has no parameter '" + name + "'", scope, dsl::closest_match(name, names));
            continue;
        }
        if (!seen.insert(name).second) {
            report(a.loc, "duplicate argument '" + name + "'", scope, "");
            continue;
        }
        const ParamSpec& p = *kind_of(layer.op).param(name);
        if (p.type == ParamType::choice) {
            if (!bind_choice(layer, p, a.value)) {
                std::vector<std::string> choices(p.choices.begin(), p.choices.end());
                report(a.value.loc, "'" + name + "' must be " + type_text(p), scope,
                       a.value.kind == Expr::Kind::name ? dsl::closest_match(a.value.name, choices) : "");
            }
            continue;
        }
        auto v = evaluator.eval(a.value, env, scope);
        if (!v) continue;
        if (!assign(layer, p, *v)) report(a.value.loc, "'" + name + "' must be " + type_text(p), scope, "");
    }
    // Defaults after every argument: a default may be another parameter's value (pooling's stride).
    for (const ParamSpec& p : params) {
        if (seen.count(p.name)) continue;
        if (p.required)
            report(c.loc, "missing argument '" + std::string(p.name) + "' of " + kind, scope, "");
        else
            set_default(layer, p);
    }
}

}  // namespace dsl::frontend

// The front end's pipeline for a `.net` file: read, parse, resolve imports, elaborate, infer shapes.
#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>
#include <dsl/frontend/print.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <iostream>
#include <type_traits>
#include <variant>

namespace dsl::frontend {

namespace {

// One number when every dimension's is the same, else the list.
std::string spatial_text(const Spatial& s) {
    if (std::all_of(s.begin(), s.end(), [&](std::int64_t v) { return v == s[0]; })) return std::to_string(s[0]);
    return fmt::format("[{}]", fmt::join(s.begin(), s.end(), ", "));
}

// A parameter's value as the dump shows it: a choice by its name.
std::string param_text(const Layer& l, const ParamSpec& p) {
    const Field field = p.field;
    if (p.type == ParamType::choice)
        return p.choices.at(static_cast<std::size_t>(*std::get<const std::int64_t*>(field_member(l, field))));
    return std::visit(
        [](const auto* member) -> std::string {
            if constexpr (std::is_same_v<decltype(member), const Spatial*>)
                return spatial_text(*member);
            else
                return fmt::format("{}", *member);
        },
        field_member(l, field));
}

// One line per layer: its name, kind, inputs and attributes, and once shapes are known, the figures.
std::string dump_network(const Network& net, bool shapes) {
    std::string out;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        out += fmt::format("{:4} {} = {}", i, l.name, op_name(l.op));
        const std::vector<ParamSpec>& params = l.kind().params;
        for (std::size_t k = 0; k < params.size(); ++k)
            out += fmt::format("{}{}={}{}", k ? ", " : "(", params[k].name, param_text(l, params[k]),
                               k + 1 == params.size() ? ")" : "");
        if (!l.inputs.empty()) {
            out += " from ";
            for (std::size_t k = 0; k < l.inputs.size(); ++k) {
                const int in = l.inputs[k];
                out += (k ? ", " : "") + (in >= 0 ? net.layers[static_cast<std::size_t>(in)].name : std::string("?"));
            }
        }
        if (shapes || l.is_data()) out += "  " + l.shape.str() + (l.float_label ? " float" : "");
        if (shapes) out += fmt::format("  params={} macs={} flops={}", l.params, l.macs, l.flops);
        if (!l.blocks.empty()) {
            out += "  in";
            for (std::size_t k = 0; k < l.blocks.size(); ++k) out += fmt::format(" {}:{}", l.instances[k], l.blocks[k]);
        }
        out += "\n";
    }
    if (shapes)
        out += fmt::format("total: params={} macs={} flops={} activation_bytes={}\n", net.total_params(),
                           net.total_macs(), net.total_flops(), net.total_activation_bytes());
    return out;
}

void dump(const std::string& pass, const std::string& text) { std::cerr << "// after " << pass << "\n" << text; }

}  // namespace

std::optional<LoadedNetwork> load_network(const std::string& path, SourceManager& sources, Diagnostics& diags,
                                          const std::string& dump_after) {
    const SourceFile* src = sources.load(path);
    if (!src) {
        diags.error(Location{}, "cannot read '" + path + "': " + sources.last_error());
        return std::nullopt;
    }
    LoadedNetwork loaded;
    auto file = parse_net(*src, diags);
    if (!file) return std::nullopt;
    loaded.file = std::move(*file);
    if (dump_after == "parse") dump("parse", print_net(loaded.file));

    loaded.imports = resolve_imports(loaded.file, sources, diags);
    if (diags.has_errors()) return std::nullopt;
    if (dump_after == "imports") {
        std::string text;
        for (const NetFile& f : loaded.imports) {
            text += (f.source ? f.source->path : std::string("?")) + ":";
            for (const BlockDef& b : f.blocks) text += " " + b.name;
            text += "\n";
        }
        dump("imports", text);
    }

    auto net = elaborate(loaded.file, loaded.imports, diags);
    if (!net) return std::nullopt;
    loaded.net = std::move(*net);
    if (dump_after == "elaborate") dump("elaborate", dump_network(loaded.net, false));

    if (!infer_shapes(loaded.net, diags)) return std::nullopt;
    if (dump_after == "shapes") dump("shapes", dump_network(loaded.net, true));
    return loaded;
}

}  // namespace dsl::frontend

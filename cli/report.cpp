// The `check` report: per-layer shapes, parameters, FLOPs and memory, and with a schedule each layer's
// distribution and tile.
#include "report.hpp"

#include <dsl/scheduler/autoschedule.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>

namespace dsl::cli {

using frontend::Layer;
using frontend::OpKind;

void add_dump_after(CLI::App& sub, std::string& after, scheduler::Stage last) {
    const auto& all = scheduler::stage_names();
    const std::vector<std::string> names(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(last) + 1);
    sub.add_option("--dump-after", after,
                   last == scheduler::Stage::shapes
                       ? "Print the state after a stage to stderr: parse, imports, elaborate, shapes"
                       : "Print the state after a stage to stderr: parse, imports, elaborate, shapes (the network), "
                         "schedule (bound to it), filled (its open fields filled by the auto-scheduler, or as it "
                         "is), plan (one process's execution plan)")
        ->check(CLI::IsMember(names));
}

scheduler::StageDump stage_dump(const std::string& after, int rank) {
    return {after.empty() ? std::nullopt : scheduler::stage_named(after), rank};
}

std::int64_t report_batch(const std::optional<scheduler::Schedule>& s, std::optional<std::int64_t> batch) {
    if (batch) return *batch;
    if (s && s->batch) return *s->batch;
    std::int64_t n = 1;
    if (s)
        for (const auto& d : s->layers)
            if (d.split) n = std::max(n, d.split->n);
    return n;
}

std::int64_t report_batch(const Checked& c, std::optional<std::int64_t> batch) {
    return report_batch(c.schedule, batch);
}

namespace {

// 1234567 -> "1,234,567"
std::string grouped(std::int64_t v) {
    std::string digits = std::to_string(v < 0 ? -v : v), out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return v < 0 ? "-" + out : out;
}

// 4089184256 -> "4.09G"
std::string si(double v) {
    const char* suffix[] = {"", "K", "M", "G", "T", "P"};
    int i = 0;
    while (v >= 1000.0 && i < 5) {
        v /= 1000.0;
        ++i;
    }
    return i == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.2f}{}", v, suffix[i]);
}

std::string tile_text(const Layer& l, const scheduler::Distribution& d, std::int64_t batch) {
    if (!d.split) return "?";
    std::int64_t n = 0;
    const frontend::Shape tile = scheduler::tile_shape(l, *d.split, batch, &n);
    std::string out = fmt::format("[{}", n);
    for (auto v : tile.dims) out += fmt::format(", {}", v);
    return out + "]";
}

std::string split_text(const scheduler::Distribution& d) { return d.split ? d.split->str() : "?"; }
std::string overlap_text(const scheduler::Distribution& d) { return d.overlap ? (*d.overlap ? "on" : "off") : "?"; }
std::string bn_text(const scheduler::Distribution& d) { return d.bn ? scheduler::bn_name(*d.bn) : "?"; }

}  // namespace

std::string duration_text(double seconds) {
    seconds = std::max(0.0, seconds);
    if (seconds < 10) return fmt::format("{:.1f} s", seconds);
    if (seconds < 60) return fmt::format("{:.0f} s", seconds);
    const auto whole = static_cast<std::int64_t>(std::llround(seconds));
    if (whole < 3600) return fmt::format("{} min {:02} s", whole / 60, whole % 60);
    return fmt::format("{} h {:02} min", whole / 3600, whole % 3600 / 60);
}

std::string json_text(const nlohmann::json& j) {
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string check_table(const Checked& c, std::int64_t batch) {
    const auto& net = c.net.net;
    const bool sched = c.schedule.has_value();
    std::size_t name_w = 5, kind_w = 4, shape_w = 6, split_w = 5, tile_w = 4;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        name_w = std::max(name_w, l.name.size());
        kind_w = std::max(kind_w, std::string(frontend::op_name(l.op)).size());
        shape_w = std::max(shape_w, l.shape.str().size());
        if (sched) {
            split_w = std::max(split_w, split_text(c.schedule->layers[i]).size());
            tile_w = std::max(tile_w, tile_text(l, c.schedule->layers[i], batch).size());
        }
    }
    std::string out;
    auto row = [&](const std::string& name, const std::string& kind, const std::string& shape,
                   const std::string& params, const std::string& flops, const std::string& mem,
                   const std::string& rest) {
        std::string line = fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>12}  {:>9}  {:>10}{}", name, name_w, kind, kind_w,
                                       shape, shape_w, params, flops, mem, rest);
        line.erase(line.find_last_not_of(' ') + 1);
        out += line + "\n";
    };
    auto sched_cols = [&](const std::string& split, const std::string& overlap, const std::string& bn,
                          const std::string& tile) {
        return fmt::format("  {:<{}}  {:<7}  {:<7}  {:<{}}", split, split_w, overlap, bn, tile, tile_w);
    };
    row("layer", "kind", "output", "params", "FLOPs", "activation",
        sched ? sched_cols("split", "overlap", "bn", fmt::format("tile (batch {})", batch)) : "");
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        std::string rest;
        if (sched) {
            const auto& d = c.schedule->layers[i];
            // Overlap matters only where there is a halo, and the statistics mode only for batch norm.
            const bool halo = l.has_halo();
            rest = sched_cols(split_text(d), halo ? overlap_text(d) : "-", l.op == OpKind::batchnorm ? bn_text(d) : "-",
                              tile_text(l, d, batch));
        }
        row(l.name, frontend::op_name(l.op), l.shape.str(), l.params ? grouped(l.params) : "-",
            l.flops ? si(static_cast<double>(l.flops)) : "-", human_bytes(static_cast<double>(l.activation_bytes)),
            rest);
    }
    out += "(FLOPs and activation memory are per sample, forward)\n\n";
    out += fmt::format("parameters        {} ({})\n", grouped(net.total_params()),
                       human_bytes(4.0 * static_cast<double>(net.total_params())));
    out += fmt::format("MACs per sample   {} ({})\n", grouped(net.total_macs()),
                       si(static_cast<double>(net.total_macs())));
    out += fmt::format("FLOPs per sample  {} (forward)\n", si(static_cast<double>(net.total_flops())));
    out += fmt::format("activations       {} per sample\n",
                       human_bytes(static_cast<double>(net.total_activation_bytes())));
    if (sched) {
        const auto& s = *c.schedule;
        out += fmt::format("processes         {}\n", s.procs ? std::to_string(*s.procs) : "? (open)");
        if (s.platform) out += fmt::format("platform          {}\n", *s.platform);
        const auto open = std::count_if(s.layers.begin(), s.layers.end(), [](const auto& d) { return !d.complete(); });
        if (open > 0 || !s.procs)
            out += fmt::format("open              {} layers have fields left for the auto-scheduler ('?')\n", open);
    }
    return out;
}

nlohmann::json split_json(const scheduler::Split& split, int rank) {
    nlohmann::json j{{"N", split.n}};
    if (split.c != 1) j["C"] = split.c;  // channel and filter parts where there are any
    if (split.f != 1) j["F"] = split.f;
    for (int a = max_space - rank; a < max_space; ++a) j[axis_letters[a]] = split.space[static_cast<std::size_t>(a)];
    return j;
}

nlohmann::json halo_json(const frontend::Layer& layer, int rank) {
    const frontend::Spatial halo = layer.halo();
    nlohmann::json j = nlohmann::json::array();
    for (int d = 0; d < rank; ++d) j.push_back(d < halo.rank() ? halo[d] : 0);
    return j;
}

nlohmann::json check_json(const Checked& c, std::int64_t batch) {
    const auto& net = c.net.net;
    nlohmann::json layers = nlohmann::json::array();
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        nlohmann::json inputs = nlohmann::json::array();
        for (int in : l.inputs) inputs.push_back(net.layers[static_cast<std::size_t>(in)].name);
        nlohmann::json shape = nlohmann::json::array({"N"});
        for (auto v : l.shape.dims) shape.push_back(v);
        nlohmann::json j{{"name", l.name},
                         {"kind", frontend::op_name(l.op)},
                         {"inputs", inputs},
                         {"shape", shape},
                         {"params", l.params},
                         {"macs", l.macs},
                         {"flops", l.flops},
                         {"activation_bytes", l.activation_bytes},
                         {"halo", halo_json(l, net.spatial_rank())},
                         {"blocks", l.blocks}};
        if (c.schedule) {
            const auto& d = c.schedule->layers[i];
            nlohmann::json dist;
            if (d.split) {
                dist["split"] = split_json(*d.split, net.spatial_rank());
                std::int64_t n = 0;
                const frontend::Shape tile = scheduler::tile_shape(l, *d.split, batch, &n);
                nlohmann::json t = nlohmann::json::array({n});
                for (auto v : tile.dims) t.push_back(v);
                dist["tile"] = t;
            } else {
                dist["split"] = nullptr;
                dist["tile"] = nullptr;
            }
            dist["overlap"] = d.overlap ? nlohmann::json(*d.overlap) : nlohmann::json(nullptr);
            dist["bn"] = d.bn ? nlohmann::json(scheduler::bn_name(*d.bn)) : nlohmann::json(nullptr);
            j["distribution"] = dist;
        }
        layers.push_back(j);
    }
    nlohmann::json out{{"network", c.net.file.source ? c.net.file.source->path : ""},
                       {"layers", layers},
                       {"totals",
                        {{"params", net.total_params()},
                         {"macs", net.total_macs()},
                         {"flops", net.total_flops()},
                         {"activation_bytes", net.total_activation_bytes()}}}};
    if (c.schedule) {
        const auto& s = *c.schedule;
        out["schedule"] = {{"file", c.sched_file->source ? c.sched_file->source->path : ""},
                           {"procs", s.procs ? nlohmann::json(*s.procs) : nlohmann::json(nullptr)},
                           {"platform", s.platform ? nlohmann::json(*s.platform) : nlohmann::json(nullptr)},
                           {"batch", batch},
                           {"complete", s.complete()}};
    }
    return out;
}

}  // namespace dsl::cli

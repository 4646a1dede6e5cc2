// The platform a model-based verb uses, filling open schedules, and the explain report.
#include "planning.hpp"

#include "commands.hpp"
#include "machine.hpp"
#include "paths_report.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/backend/kinds.hpp>
#include <dsl/base/whole_file.hpp>

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace dsl::cli {

using frontend::Layer;
using frontend::OpKind;

std::string milliseconds(double seconds) { return fmt::format("{:.3f}", seconds * 1e3); }

std::optional<PlatformChoice> resolve_platform(const std::string& flag, const std::optional<scheduler::Schedule>& s,
                                               SourceManager& sources, Diagnostics& diags) {
    PlatformChoice out;
    std::string path;
    if (!flag.empty()) {
        path = scheduler::platform_path(flag);
        if (path.empty()) {
            const auto known = scheduler::stdlib_platforms();
            std::string list;
            for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
            diags.error({}, fmt::format("unknown platform '{}': name a platform file, or one of the stdlib's ({})",
                                        flag, list.empty() ? "none installed" : list));
            return std::nullopt;
        }
        const bool named = scheduler::platform_path(std::filesystem::path(flag).stem().string()) == path &&
                           flag.find('/') == std::string::npos && flag.find(".platform") == std::string::npos;
        out.text = named ? flag : fmt::format("\"{}\"", std::filesystem::absolute(path).string());
    } else if (s && s->platform && !s->platform->empty()) {
        path = *s->platform;
        out.text = fmt::format("\"{}\"", std::filesystem::absolute(path).string());
        const std::string stem = std::filesystem::path(path).stem().string();
        if (scheduler::platform_path(stem) == path) out.text = stem;
    } else {
        path = scheduler::platform_path("local");
        out.text = "local";
        if (path.empty()) {
            diags.error({}, "no platform: name one with --platform (this installation has no stdlib 'local' platform)");
            return std::nullopt;
        }
    }
    if (path == scheduler::platform_path("local")) {
        const char* file = std::getenv("DSL_LOCAL_PLATFORM");
        if (!file || !*file) return machine_platform(sources, diags);
        path = file;
    }
    auto p = scheduler::load_platform(path, sources, diags);
    if (!p) return std::nullopt;
    out.platform = std::move(*p);
    if (out.text == "local") out.platform.planar_why = this_cpu_planar_why();
    return out;
}

std::string this_cpu_planar_why() {
    const backend::Kernels k = backend::cpu_kernels();
    return k.blocked ? "" : k.planar_why;
}

std::optional<PlatformChoice> machine_platform(SourceManager& sources, Diagnostics& diags) {
    const Machine m = current_machine();
    PlatformChoice out;
    out.text = "local";
    out.cache = cache_file(m).string();
    std::optional<scheduler::Platform> p;
    std::error_code ec;
    if (std::filesystem::exists(out.cache, ec)) {
        Diagnostics damaged;  // a cache file is dsl's own: one that does not load is measured again
        p = scheduler::load_platform(out.cache, sources, damaged);
        if (!p) std::cerr << fmt::format("warning: ignoring the damaged cache file '{}'\n", out.cache);
    }
    if (!p) {
        p = scheduler::load_platform(scheduler::platform_path("local"), sources, diags);
        if (!p) return std::nullopt;
        p->times.clear();
    }
    p->device = scheduler::Device::cpu;
    p->procs_per_node = m.cores;
    p->nodes = 1;
    if (m.memory > 0) p->memory = m.memory / m.cores;
    p->planar_why = this_cpu_planar_why();
    out.platform = std::move(*p);
    return out;
}

std::string platform_source(const PlatformChoice& p) {
    const std::string& path = p.platform.path;
    if (!p.cache.empty() && path == p.cache)
        return fmt::format("measured on this machine ({}), last on {}; kept in {}", machine_text(current_machine()),
                           written_at(path), path);
    if (!p.cache.empty()) return fmt::format("nothing measured on this machine yet: the analytic figures of {}", path);
    const std::string stem = std::filesystem::path(path).stem().string();
    if (scheduler::platform_path(stem) == path)
        return fmt::format("the published figures of the stdlib platform '{}' ({})", stem, path);
    return fmt::format("the file {}{}", path, p.text == "local" ? " ($DSL_LOCAL_PLATFORM)" : "");
}

std::optional<ModelInputs> load_model_inputs(const scheduler::Pipeline& pipeline, const std::string& net_path,
                                             const std::string& sched_path, const std::string& platform_flag,
                                             SourceManager& sources, Diagnostics& diags, const BatchChoice& batch) {
    auto checked = pipeline.check(net_path, sched_path, sources, diags, batch);
    std::optional<PlatformChoice> platform;
    if (checked) platform = resolve_platform(platform_flag, checked->schedule, sources, diags);
    diags.render(std::cerr, stderr_color());
    if (!checked || !platform) return std::nullopt;
    return ModelInputs{std::move(*checked), std::move(*platform)};
}

std::optional<std::int64_t> run_procs(const std::optional<std::int64_t>& flag,
                                      const std::optional<scheduler::Schedule>& s, std::string& why) {
    why.clear();
    const std::optional<std::int64_t> fixed = s ? s->procs : std::nullopt;
    if (flag && fixed && *flag != *fixed) {
        why = fmt::format("--procs {} differs from the schedule's procs = {}", *flag, *fixed);
        return std::nullopt;
    }
    return flag ? flag : fixed;
}

std::string batch_problem(const frontend::Network& net, const scheduler::Schedule& s, std::int64_t batch) {
    if (std::string why = scheduler::batch_size_problem(net, batch); !why.empty()) return why;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        if (net.layers[i].is_data() || !s.layers[i].split) continue;
        if (s.layers[i].split->n > batch)
            return fmt::format(
                "layer '{}' splits the samples {} ways, but the mini-batch has {} (--batch, or 'batch' in the "
                "schedule)",
                net.layers[i].name, s.layers[i].split->n, batch);
    }
    return {};
}

bool write_file(const std::string& path, const std::string& bytes, bool replace, std::string& why) {
    return write_whole(path, bytes, replace, why);
}

bool replace_file(const std::string& path, const std::string& text, std::string& why) {
    return write_file(path, text, true, why);
}

std::string unwritable(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) return fmt::format("'{}' is a folder", path);
    if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))  // a FIFO would be waited on, a device written
        return fmt::format("cannot write '{}': it is not a regular file", path);
    const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
    if (!fs::is_directory(parent, ec))
        return fmt::format("cannot write '{}': '{}' is not a folder", path, parent.string());
    if (::access(parent.c_str(), W_OK | X_OK) != 0)
        return fmt::format("cannot write '{}': {}", path, std::strerror(errno));
    return {};
}

bool has_open_fields(const frontend::Network& net, const std::optional<scheduler::Schedule>& s) {
    if (!s || !s->procs) return true;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        if (net.layers[i].is_data()) continue;
        if (!s->layers[i].complete()) return true;
    }
    return false;
}

std::optional<scheduler::AutoResult> fill_schedule(const frontend::Network& net,
                                                   const std::optional<scheduler::Schedule>& partial,
                                                   const scheduler::Model& model, std::int64_t procs,
                                                   std::int64_t batch, std::string& why,
                                                   scheduler::SearchMethod method) {
    scheduler::Schedule s;
    if (partial) s = *partial;
    s.procs = procs;
    s.layers.resize(net.layers.size());
    for (auto& d : s.layers)
        if (!d.bn) d.bn = scheduler::BatchNormStats::batch;
    scheduler::AutoOptions options;
    options.batch = batch;
    options.memory_limit = model.memory_limit();
    options.method = method;
    options.channel_parts = scheduler::channel_parts_on(model.platform());
    return scheduler::autoschedule(net, s, model, options, why);
}

std::optional<Planned> plan(const frontend::Network& net, const scheduler::Platform& platform, scheduler::Schedule s,
                            std::int64_t batch, std::string& why) {
    const scheduler::Model model(net, platform, *s.procs, batch, backend::kind_costs());
    Planned out;
    out.filled = has_open_fields(net, s);
    if (out.filled) {
        const auto filled = fill_schedule(net, s, model, *s.procs, batch, why);
        if (!filled) return std::nullopt;
        s = filled->schedule;
    }
    why = batch_problem(net, s, batch);
    if (!why.empty()) return std::nullopt;
    out.prediction = model.predict(s);
    out.schedule = std::move(s);
    return out;
}

std::optional<Planned> measure_and_plan(PlatformChoice& p, const std::string& net_path, const frontend::Network& net,
                                        const scheduler::Schedule& s, std::int64_t batch, std::string& why) {
    if (!measure_local(p, net_path, net, {*s.procs}, batch, why, multiplies_in_bfloat16(net, s))) return std::nullopt;
    return plan(net, p.platform, s, batch, why);
}

namespace {

std::string tile_text(const std::vector<std::int64_t>& t) {
    std::string out = "[";
    for (std::size_t i = 0; i < t.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", t[i]);
    return out + "]";
}

}  // namespace

std::string does_not_fit(const scheduler::Prediction& p) {
    if (p.memory_limit <= 0 || p.memory <= p.memory_limit) return "";
    return fmt::format(
        "this schedule does not fit: it needs {} per process, {} more than the {} a process has; recomputing "
        "layers in backward (recompute=on, or recompute=? for the auto-scheduler to choose), keeping outputs in "
        "16 bits (precision=bfloat16, or precision=?), more processes or a smaller mini-batch would make it fit",
        human_bytes(p.memory), human_bytes(p.memory - p.memory_limit), human_bytes(p.memory_limit));
}

namespace {

// Where a layer's values change type in a training step: its output rounded to 16 bits after forward and
// widened again before backward (precision=bfloat16 or float16), and a convolution's float32 input, output
// gradient and weights rounded to 16 bits on each pass (where the kernels multiply in them, the 16-bit products
// path; elsewhere multiplied in float32, the same values).
nlohmann::json conversions_json(const scheduler::Prediction& p, std::size_t i, frontend::OpKind op) {
    nlohmann::json out = nlohmann::json::array();
    const scheduler::LayerPrediction& lp = p.layers[i];
    if (lp.dist.narrowed()) {
        const std::string type = scheduler::precision_name(*lp.dist.precision);
        out.push_back("output rounded to " + type + " after forward, widened before backward");
    }
    if (const auto q = lp.dist.products16(op))
        out.push_back("input, output gradient and weights rounded to " + std::string(scheduler::precision_name(*q)) +
                      " on each pass");
    return out;
}

// The conversions of the step's layers, as `dsl explain` says them (a line each kind, none where there is none).
std::string conversions_text(const frontend::Network& net, const scheduler::Prediction& p) {
    std::vector<std::string> rounded, multiplied;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        if (p.layers[i].dist.narrowed()) rounded.push_back(net.layers[i].name);
        if (p.layers[i].dist.products16(net.layers[i].op)) multiplied.push_back(net.layers[i].name);
    }
    std::string out;
    const auto plural = [](std::size_t n, const char* one, const char* many) {
        return fmt::format("{} {}", n, n == 1 ? one : many);
    };
    if (!rounded.empty())
        out += fmt::format("conversions       {} to 16 bits after forward and widened before backward: {}\n",
                           plural(rounded.size(), "output rounded", "outputs rounded"), some_names(rounded));
    if (!multiplied.empty())
        out += fmt::format("{}{} input, output gradient and weights to 16 bits on each pass: {}\n",
                           rounded.empty() ? "conversions       " : "                  ",
                           plural(multiplied.size(), "convolution rounds its", "convolutions round their"),
                           some_names(multiplied));
    return out;
}

// Recomputation's segments, as a phrase after the recomputation's time: how many, and each one's layers (at most
// `shown` of them, the first and the last of each).
std::string segments_text(const frontend::Network& net, const scheduler::Prediction& p, std::size_t shown = 6) {
    if (p.segments.empty()) return "";
    std::string out = fmt::format(", in {} segment{}", p.segments.size(), p.segments.size() == 1 ? "" : "s");
    for (std::size_t k = 0; k < p.segments.size() && k < shown; ++k) {
        const auto& [before, layers] = p.segments[k];
        const std::string& first = net.layers[static_cast<std::size_t>(layers.front())].name;
        const std::string& last = net.layers[static_cast<std::size_t>(layers.back())].name;
        out += fmt::format("\n                  {}{} before {}'s backward", first, layers.size() > 1 ? ".." + last : "",
                           net.layers[static_cast<std::size_t>(before)].name);
    }
    if (p.segments.size() > shown) out += fmt::format("\n                  and {} more", p.segments.size() - shown);
    return out;
}

}  // namespace

std::string explain_table(const frontend::Network& net, const scheduler::Prediction& p, std::int64_t batch) {
    std::size_t name_w = 5, split_w = 5, tile_w = 4;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        if (net.layers[i].op == OpKind::label) continue;
        name_w = std::max(name_w, net.layers[i].name.size());
        split_w = std::max(split_w, p.layers[i].dist.split->str().size());
        tile_w = std::max(tile_w, tile_text(p.layers[i].tile).size());
    }
    std::string out;
    // The recomputation column only where some layer is recomputed.
    const bool recomputes =
        std::any_of(p.layers.begin(), p.layers.end(), [](const auto& lp) { return lp.dist.recompute.value_or(false); });
    // And the precision column only where some layer keeps its output in 16 bits.
    const bool narrows =
        std::any_of(p.layers.begin(), p.layers.end(), [](const auto& lp) { return lp.dist.narrowed(); });
    auto row = [&](auto&&... cols) {
        std::string line = fmt::format(
            "{:<{}}  {:<19}  {:<{}}  {:<3}  {:<{}}  {:>10}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}  "
            "{:>8}  {:>8}  {:>8}  {:>10}{}{}",
            cols...);
        line.erase(line.find_last_not_of(' ') + 1);
        out += line + "\n";
    };
    auto recompute_col = [&](const std::string& text) { return recomputes ? fmt::format("  {:>8}", text) : ""; };
    auto precision_col = [&](const std::string& text) { return narrows ? fmt::format("  {:>8}", text) : ""; };
    row("layer", name_w, "kind", "split", split_w, "ovl", "tile", tile_w, "halo", "fwd", "f-halo", "bwd-data",
        "bwd-wts", "b-halo", "sums", "shuffle", "allred", "memory", recompute_col("recomp"), precision_col("kept in"));
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        if (l.op == OpKind::label) continue;
        const scheduler::LayerPrediction& lp = p.layers[i];
        const scheduler::LayerCost& c = lp.cost;
        const bool halo = l.has_halo();
        auto ms = [](double s) { return s > 0 ? milliseconds(s) : std::string("-"); };
        row(l.name, name_w, frontend::op_name(l.op), lp.dist.split->str(), split_w,
            halo ? (lp.dist.overlap.value_or(false) ? "on" : "off") : "-", tile_text(lp.tile), tile_w,
            lp.bytes_moved() ? human_bytes(static_cast<double>(lp.bytes_moved())) : "-", ms(c.forward),
            ms(c.forward_halo), ms(c.backward_data), ms(c.backward_weights), ms(c.backward_halo),
            ms(c.forward_sync + c.backward_sync), ms(lp.shuffle.seconds), ms(c.allreduce), human_bytes(lp.memory()),
            recompute_col(lp.segment_start                    ? "kept"
                          : lp.dist.recompute.value_or(false) ? (c.recompute > 0 ? milliseconds(c.recompute) : "on")
                                                              : "-"),
            precision_col(lp.dist.narrowed() ? scheduler::precision_name(*lp.dist.precision) : "-"));
    }
    out += fmt::format(
        "(ms per step on the busiest process; halo: bytes it sends in halo exchanges and shuffles, both ways; "
        "sums: blocking allreduces of\n statistics; allred: the weight gradient's allreduce, overlapped with "
        "backward; memory: tiles with margins, copies and halo buffers{}{})\n\n",
        recomputes
            ? ";\n recomp: the layer's forward run again in backward (recompute=on; 'on' where no backward reads it "
              "again), its memory\n shared with other recomputed layers' while it is alive; 'kept': asked, but kept "
              "as the start of a segment\n that backward makes again from it (less memory than dropping it too)"
            : "",
        narrows ? ";\n kept in: the 16 bits that hold the layer's output between forward and backward (precision=...), "
                  "its float32 values\n shared with others' while forward or backward reads them"
                : "");
    out += fmt::format("batch             {}\n", batch);
    out += fmt::format("forward           {} ms\n", milliseconds(p.forward));
    out += fmt::format("backward          {} ms\n", milliseconds(p.backward));
    out += fmt::format("allreduce         {} ms in all, {} ms not hidden behind backward\n", milliseconds(p.allreduce),
                       milliseconds(p.allreduce_exposed));
    out += fmt::format("  algorithm       {}\n", p.allreduce_algorithm);
    out += fmt::format("halos over        {}\n", p.halo_link);
    out += fmt::format("shuffles over     {}\n", p.shuffle_link);
    out += fmt::format("update            {} ms\n", milliseconds(p.update));
    // The data read from files (synthetic data is made where it is used, and reads nothing).
    out += fmt::format(
        "read              {} ms: {} of input and label tiles per step from files at {:.3g} GB/s (io_bandwidth); {}\n",
        milliseconds(p.read), human_bytes(p.read_bytes), p.io_bandwidth / 1e9,
        p.read_exposed > 0
            ? fmt::format("{} ms of it not hidden behind the step's compute by reading ahead (--prefetch)",
                          milliseconds(p.read_exposed))
            : std::string("hidden behind the step's compute by reading ahead (--prefetch; 0 adds it)"));
    if (recomputes || narrows)
        out += fmt::format("recomputation     {} ms of {} again, in backward{}\n", milliseconds(p.recompute),
                           recomputes && narrows ? "forward (and of widening from 16 bits)"
                           : recomputes          ? "forward"
                                                 : "widening from 16 bits",
                           segments_text(net, p));
    out += fmt::format("step              {} ms predicted ({:.1f} samples/s)\n", milliseconds(p.step),
                       p.step > 0 ? static_cast<double>(batch) / p.step : 0.0);
    out += fmt::format("halo traffic      {} per step from the busiest process\n",
                       human_bytes(static_cast<double>(p.halo_bytes)));
    out += fmt::format(
        "memory            {} per process of {} (activations {}, gradients {}, parameters and optimizer {}, "
        "halo buffers {}, {}workspace {})\n",
        human_bytes(p.memory), human_bytes(p.memory_limit), human_bytes(p.activations), human_bytes(p.gradients),
        human_bytes(p.parameters), human_bytes(p.buffers),
        p.scratch > 0 ? fmt::format("scratch {}, ", human_bytes(p.scratch)) : "", human_bytes(p.workspace));
    if (recomputes || narrows)
        out += fmt::format("                  {} per process without recomputation{} (activations {})\n",
                           human_bytes(p.memory - p.activations + p.kept), narrows ? " or 16 bits" : "",
                           human_bytes(p.kept));
    // Convolutions of precision=bfloat16 (float16) also multiply in it, where the kernels can.
    std::int64_t bfloat16_convs = 0, float16_convs = 0;
    for (std::size_t i = 0; i < net.layers.size(); ++i)
        if (const auto q = p.layers[i].dist.products16(net.layers[i].op))
            ++(*q == scheduler::Precision::bfloat16 ? bfloat16_convs : float16_convs);
    if (bfloat16_convs > 0)
        out += fmt::format(
            "products          bfloat16 in {} convolution{} (precision=bfloat16), summed in float32, where the "
            "kernels have them:\n                  oneDNN's on CPUs with AVX-512 BF16 (this one: {}), cuDNN's "
            "on GPUs; float32 elsewhere (the model:\n                  bfloat16's times where the platform has "
            "them measured, else float32's)\n",
            bfloat16_convs, bfloat16_convs == 1 ? "" : "s", backend::cpu_kernels().conv_bfloat16 ? "yes" : "no");
    if (float16_convs > 0)
        out += fmt::format(
            "products          float16 in {} convolution{} (precision=float16), summed in float32, on GPUs "
            "(cuDNN's); float32\n                  on CPUs (the model: float16's times where the platform has "
            "them measured, else float32's)\n",
            float16_convs, float16_convs == 1 ? "" : "s");
    out += conversions_text(net, p);
    if (!p.paths.empty()) {
        out += fmt::format("paths             {} (layers that take each, of those it concerns)\n",
                           paths_count_text(p.paths));
        out += paths_off_text(net, p.paths, "                  ");
    }
    if (const std::string why = does_not_fit(p); !why.empty()) out += "note: " + why + "\n";
    return out;
}

nlohmann::json explain_json(const frontend::Network& net, const scheduler::Prediction& p, std::int64_t batch) {
    nlohmann::json layers = nlohmann::json::array();
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        if (l.op == OpKind::label) continue;
        const scheduler::LayerPrediction& lp = p.layers[i];
        const scheduler::LayerCost& c = lp.cost;
        const auto& s = *lp.dist.split;
        layers.push_back(
            {{"name", l.name},
             {"kind", frontend::op_name(l.op)},
             {"split", split_json(s, net.spatial_rank())},
             {"overlap", lp.dist.overlap.value_or(false)},
             {"recompute", lp.dist.recompute.value_or(false)},
             {"recomputed", lp.recomputed},
             {"segment_start", lp.segment_start},
             {"path", i < p.paths.size() ? paths_json(p.paths[i]) : nlohmann::json::array()},
             {"precision", scheduler::precision_name(lp.dist.precision.value_or(scheduler::Precision::float32))},
             {"conversions", conversions_json(p, i, l.op)},
             {"tile", lp.tile},
             {"halo_bytes", lp.bytes_moved()},
             {"seconds",
              {{"forward", c.forward},
               {"forward_halo", c.forward_halo},
               {"forward_sync", c.forward_sync},
               {"backward_data", c.backward_data},
               {"backward_weights", c.backward_weights},
               {"backward_halo", c.backward_halo},
               {"backward_sync", c.backward_sync},
               {"shuffle", lp.shuffle.seconds},
               {"allreduce", c.allreduce},
               {"recompute", c.recompute},
               {"total", lp.seconds()},
               {"backward_end", lp.backward_end},
               {"allreduce_end", lp.allreduce_end}}},
             {"memory_bytes", lp.memory()}});
    }
    // What the communication figures assume: the allreduce's algorithm, the links of halos and shuffles.
    const nlohmann::json communication{
        {"allreduce", p.allreduce_algorithm}, {"halo", p.halo_link}, {"shuffle", p.shuffle_link}};
    nlohmann::json segments = nlohmann::json::array();
    for (const auto& [before, made] : p.segments) {
        nlohmann::json names = nlohmann::json::array();
        for (int q : made) names.push_back(net.layers[static_cast<std::size_t>(q)].name);
        segments.push_back({{"before", net.layers[static_cast<std::size_t>(before)].name}, {"layers", names}});
    }
    return {{"layers", layers},
            {"segments", segments},
            {"batch", batch},
            {"seconds",
             {{"forward", p.forward},
              {"backward", p.backward},
              {"allreduce", p.allreduce},
              {"allreduce_exposed", p.allreduce_exposed},
              {"update", p.update},
              {"recompute", p.recompute},
              {"read", p.read},
              {"read_exposed", p.read_exposed},
              {"step", p.step}}},
            {"read_bytes", p.read_bytes},
            {"io_bandwidth", p.io_bandwidth},
            {"halo_bytes", p.halo_bytes},
            {"communication", communication},
            {"memory_bytes",
             {{"total", p.memory},
              {"limit", p.memory_limit},
              {"activations", p.activations},
              {"gradients", p.gradients},
              {"parameters", p.parameters},
              {"buffers", p.buffers},
              {"scratch", p.scratch},
              {"workspace", p.workspace},
              {"activations_without_recomputation", p.kept}}},
            {"fits", does_not_fit(p).empty()}};
}

}  // namespace dsl::cli

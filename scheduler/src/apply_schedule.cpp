// Binding a `.sched` file to a network: each layer's distribution by the precedence rule, then the checks.
#include <dsl/scheduler/schedule.hpp>

#include <dsl/base/error.hpp>
#include <dsl/frontend/passes.hpp>
#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/platform.hpp>
#include <dsl/scheduler/recompute.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

namespace dsl::scheduler {

using frontend::Layer;
using frontend::Network;
using frontend::OpKind;
using frontend::SchedEntry;
using frontend::SchedFile;
using frontend::SchedValue;
using frontend::Setting;

bool Schedule::complete() const {
    return procs && std::all_of(layers.begin(), layers.end(), [](const Distribution& d) { return d.complete(); });
}

namespace {

// Inputs and labels take the distribution of the layers that read them; entries never name them.
bool schedulable(const Layer& layer) { return !layer.is_data(); }

bool glob_match(std::string_view pattern, std::string_view name) {
    // Iterative matching with one backtrack point: linear in practice, never exponential.
    std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
    while (n < name.size()) {
        if (p < pattern.size() && pattern[p] != '*' && pattern[p] == name[n]) {
            ++p;
            ++n;
        } else if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            mark = n;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            n = ++mark;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

bool is_glob(const std::string& pattern) { return pattern.find('*') != std::string::npos; }

// How specifically an entry selects a layer: higher wins; nullopt when it does not select it.
struct Rank {
    int kind;         // 4 exact name, 3 pattern, 2 block, 1 default
    std::size_t how;  // pattern: literal characters; block: nesting depth of the instance
    std::size_t entry;
    bool operator<(const Rank& o) const { return std::tie(kind, how, entry) < std::tie(o.kind, o.how, o.entry); }
};

std::optional<Rank> rank(const SchedEntry& e, std::size_t index, const Layer& layer) {
    switch (e.selector) {
        case SchedEntry::Selector::all: return Rank{1, 0, index};
        case SchedEntry::Selector::layer:
            if (!is_glob(e.pattern)) {
                if (e.pattern == layer.name) return Rank{4, 0, index};
                return std::nullopt;
            }
            if (glob_match(e.pattern, layer.name))
                return Rank{3,
                            static_cast<std::size_t>(
                                std::count_if(e.pattern.begin(), e.pattern.end(), [](char c) { return c != '*'; })),
                            index};
            return std::nullopt;
        case SchedEntry::Selector::block:
            for (std::size_t depth = layer.blocks.size(); depth-- > 0;)
                if (layer.blocks[depth] == e.pattern) return Rank{2, depth + 1, index};
            return std::nullopt;
    }
    return std::nullopt;
}

constexpr const char* split_keys[] = {"N", "C", "F", "D", "H", "W"};

bool is_split_key(const std::string& key) {
    return std::find(std::begin(split_keys), std::end(split_keys), key) != std::end(split_keys);
}

// An entry's settings, checked: a split (any dimension open makes the whole split open), overlap, bn,
// recompute.
struct EntryFields {
    bool sets_split = false;
    std::optional<Split> split;  // nullopt with sets_split: left open
    bool sets_overlap = false;
    std::optional<bool> overlap;
    bool sets_bn = false;
    std::optional<BatchNormStats> bn;
    bool sets_recompute = false;
    std::optional<bool> recompute;
    bool sets_precision = false;
    std::optional<Precision> precision;
};

std::string value_text(const SchedValue& v) {
    switch (v.kind) {
        case SchedValue::Kind::integer: return std::to_string(v.integer);
        case SchedValue::Kind::word: return v.text;
        case SchedValue::Kind::string: return fmt::format("\"{}\"", v.text);
        case SchedValue::Kind::open: return "?";
    }
    return "";
}

EntryFields check_entry(const SchedEntry& e, Diagnostics& diags) {
    EntryFields f;
    Split split;
    bool open = false;
    std::map<std::string, const Setting*> seen;
    for (const Setting& s : e.settings) {
        if (auto [it, fresh] = seen.emplace(s.key, &s); !fresh) {
            auto& d = diags.error(s.loc, fmt::format("'{}' is set twice in this entry", s.key));
            Diagnostics::note(d, it->second->loc, "first set here");
            continue;
        }
        const SchedValue& v = s.value;
        if (is_split_key(s.key)) {
            f.sets_split = true;
            if (v.kind == SchedValue::Kind::open) {
                open = true;
                continue;
            }
            if (v.kind != SchedValue::Kind::integer || v.integer < 1) {
                diags.error(v.loc,
                            fmt::format("'{}' must be a positive integer or '?', not '{}'", s.key, value_text(v)));
                open = true;
                continue;
            }
            const std::int64_t n = v.integer;
            if (s.key == "N") split.n = n;
            if (s.key == "C") split.c = n;
            if (s.key == "F") split.f = n;
            for (int a = 0; a < max_space; ++a)
                if (s.key == axis_letters[a]) split.space[static_cast<std::size_t>(a)] = n;
        } else if (s.key == "overlap") {
            f.sets_overlap = true;
            if (v.kind == SchedValue::Kind::word && (v.text == "on" || v.text == "off"))
                f.overlap = v.text == "on";
            else if (v.kind != SchedValue::Kind::open)
                diags.error(v.loc, fmt::format("'overlap' must be 'on', 'off' or '?', not '{}'", value_text(v)));
        } else if (s.key == "recompute") {
            f.sets_recompute = true;
            if (v.kind == SchedValue::Kind::word && (v.text == "on" || v.text == "off"))
                f.recompute = v.text == "on";
            else if (v.kind != SchedValue::Kind::open)
                diags.error(v.loc, fmt::format("'recompute' must be 'on', 'off' or '?', not '{}'", value_text(v)));
        } else if (s.key == "precision") {
            f.sets_precision = true;
            if (v.kind == SchedValue::Kind::word &&
                (v.text == "float32" || v.text == "bfloat16" || v.text == "float16"))
                f.precision = v.text == "float32"    ? Precision::float32
                              : v.text == "bfloat16" ? Precision::bfloat16
                                                     : Precision::float16;
            else if (v.kind != SchedValue::Kind::open)
                diags.error(v.loc, fmt::format("'precision' must be 'float32', 'bfloat16', 'float16' or '?', not '{}'",
                                               value_text(v)));
        } else if (s.key == "bn") {
            f.sets_bn = true;
            if (v.kind == SchedValue::Kind::word && (v.text == "batch" || v.text == "spatial" || v.text == "local"))
                f.bn = v.text == "batch"     ? BatchNormStats::batch
                       : v.text == "spatial" ? BatchNormStats::spatial
                                             : BatchNormStats::local;
            else if (v.kind != SchedValue::Kind::open)
                diags.error(v.loc,
                            fmt::format("'bn' must be 'batch', 'spatial', 'local' or '?', not '{}'", value_text(v)));
        } else if (s.key == "procs" || s.key == "platform" || s.key == "batch") {
            auto& d =
                diags.error(s.loc, fmt::format("'{}' is a top-level setting, but here it follows an entry", s.key));
            Diagnostics::note(d, e.loc,
                              "top-level settings go before the first entry; this entry takes every setting "
                              "up to the next 'default', 'layer' or 'block'");
        } else {
            auto& d = diags.error(s.loc, fmt::format("unknown setting '{}' in a schedule entry", s.key));
            std::vector<std::string> known(std::begin(split_keys), std::end(split_keys));
            known.insert(known.end(), {"overlap", "bn", "recompute", "precision"});
            if (auto m = diags.dropped(d) ? "" : closest_match(s.key, known); !m.empty())
                Diagnostics::note(d, s.loc, fmt::format("did you mean '{}'?", m));
        }
    }
    if (f.sets_split && !open) {
        // Checked here, so that no later product of the split (its process count) can wrap around.
        std::int64_t product = 1;
        bool too_many = false;
        for (const std::int64_t parts : {split.n, split.c, split.f, split.space[0], split.space[1], split.space[2]})
            too_many = too_many || __builtin_mul_overflow(product, parts, &product) || product > max_procs;
        if (too_many)
            diags.error(e.loc, fmt::format("split {} uses more than {} processes, the most MPI can start", split.str(),
                                           max_procs));
        else
            f.split = split;
    }
    return f;
}

std::string quoted_list(const std::vector<std::string>& names, std::size_t limit) {
    std::string out;
    for (std::size_t i = 0; i < names.size() && i < limit; ++i) out += fmt::format("{}'{}'", i ? ", " : "", names[i]);
    if (names.size() > limit) out += fmt::format(" and {} more", names.size() - limit);
    return out;
}

// The first 4 KiB of a regular file; false with the reason (a folder, a FIFO, a device, unreadable).
bool read_start(const std::string& path, std::string& text, std::string& why) {
    const int fd = open_regular_file(path, why);
    if (fd < 0) return false;
    text.resize(4096);
    const ssize_t n = ::read(fd, text.data(), text.size());
    ::close(fd);
    text.resize(static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    return true;
}

// A platform by stdlib name (a word) or by path (a quoted string), relative to the schedule's folder.
std::string find_platform(const SchedValue& v, const std::string& sched_path) {
    if (v.kind == SchedValue::Kind::word) return platform_path(v.text);
    const std::filesystem::path p = std::filesystem::path(sched_path).parent_path() / v.text;
    // With "./" a bare file name is a path to platform_path, never a stdlib name.
    const std::filesystem::path as_path = p.has_parent_path() ? p : std::filesystem::path(".") / p;
    return platform_path(as_path.string()).empty() ? std::string() : p.string();
}

void check_globals(const SchedFile& file, Schedule& out, Diagnostics& diags) {
    std::map<std::string, const Setting*> seen;
    for (const Setting& s : file.globals) {
        if (auto [it, fresh] = seen.emplace(s.key, &s); !fresh) {
            auto& d = diags.error(s.loc, fmt::format("'{}' is set twice", s.key));
            Diagnostics::note(d, it->second->loc, "first set here");
            continue;
        }
        const SchedValue& v = s.value;
        if (s.key == "procs" || s.key == "batch") {
            if (v.kind == SchedValue::Kind::open) continue;
            if (v.kind != SchedValue::Kind::integer || v.integer < 1) {
                diags.error(v.loc, fmt::format("'{}' must be a positive integer{}, not '{}'", s.key,
                                               s.key == "procs" ? " or '?'" : "", value_text(v)));
                continue;
            }
            if (s.key == "procs" && v.integer > max_procs) {
                diags.error(v.loc, fmt::format("'procs' must be at most {}, the most MPI can start, not '{}'",
                                               max_procs, v.integer));
                continue;
            }
            (s.key == "procs" ? out.procs : out.batch) = v.integer;
        } else if (s.key == "platform") {
            if (v.kind != SchedValue::Kind::word && v.kind != SchedValue::Kind::string) {
                diags.error(v.loc, "'platform' must be a platform name or a quoted file path");
                continue;
            }
            out.platform = find_platform(v, file.source ? file.source->path : "");
            out.platform_loc = v.loc;
            if (!out.platform->empty()) {
                // Something that is no platform file at all is said here, at the line that names it, by every
                // command that reads the schedule; its settings are checked where the platform is read.
                std::string why, text;
                if (!read_start(*out.platform, text, why))
                    diags.error(v.loc, fmt::format("platform '{}': {}", v.text, why));
                else if (text.find('\0') != std::string::npos)
                    diags.error(v.loc,
                                fmt::format("platform '{}' is not a platform file: it is binary, not text", v.text));
            } else {
                auto& d = diags.error(v.loc, v.kind == SchedValue::Kind::word
                                                 ? fmt::format("unknown platform '{}'", v.text)
                                                 : fmt::format("cannot find the platform file '{}'", v.text));
                if (v.kind == SchedValue::Kind::word) {
                    const auto known = stdlib_platforms();
                    Diagnostics::note(d, v.loc,
                                      known.empty() ? std::string("no platforms are installed")
                                                    : fmt::format("known platforms: {}", quoted_list(known, 20)));
                }
            }
        } else {
            auto& d = diags.error(s.loc, fmt::format("unknown setting '{}'", s.key));
            if (is_split_key(s.key) || s.key == "overlap" || s.key == "bn" || s.key == "recompute" ||
                s.key == "precision")
                Diagnostics::note(
                    d, s.loc,
                    fmt::format("'{}' belongs to an entry: write 'default {}={}'", s.key, s.key, value_text(v)));
            else if (auto m = diags.dropped(d) ? "" : closest_match(s.key, {"procs", "platform", "batch"}); !m.empty())
                Diagnostics::note(d, s.loc, fmt::format("did you mean '{}'?", m));
        }
    }
}

// Each entry must select something; a name that selects nothing is almost always a typo.
void check_selectors(const Network& net, const SchedFile& file, Diagnostics& diags) {
    std::vector<std::string> names, blocks;
    for (const Layer& l : net.layers) {
        if (!schedulable(l)) continue;
        names.push_back(l.name);
        for (const std::string& b : l.blocks)
            if (std::find(blocks.begin(), blocks.end(), b) == blocks.end()) blocks.push_back(b);
    }
    for (const SchedEntry& e : file.entries) {
        if (e.selector == SchedEntry::Selector::all) continue;
        if (e.selector == SchedEntry::Selector::block) {
            if (std::find(blocks.begin(), blocks.end(), e.pattern) != blocks.end()) continue;
            auto& d =
                diags.error(e.pattern_loc, fmt::format("the network has no instance of a block named '{}'", e.pattern));
            if (auto m = diags.dropped(d) ? "" : closest_match(e.pattern, blocks); !m.empty())
                Diagnostics::note(d, e.pattern_loc, fmt::format("did you mean '{}'?", m));
            continue;
        }
        const bool any = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
            return is_glob(e.pattern) ? glob_match(e.pattern, n) : n == e.pattern;
        });
        if (any) continue;
        if (is_glob(e.pattern)) {
            diags.error(e.pattern_loc, fmt::format("no layer of the network matches '{}'", e.pattern));
            continue;
        }
        auto& d = diags.error(e.pattern_loc, fmt::format("the network has no layer named '{}'", e.pattern));
        if (auto m = diags.dropped(d) ? "" : closest_match(e.pattern, names); !m.empty())
            Diagnostics::note(d, e.pattern_loc, fmt::format("did you mean '{}'?", m));
    }
}

// A split may cut only the spatial axes the network's tensors have: D= only volumes.
void check_axes(const Network& net, const SchedFile& file, std::vector<EntryFields>& fields, Diagnostics& diags) {
    const int rank = net.spatial_rank();
    for (std::size_t i = 0; i < fields.size(); ++i) {
        if (!fields[i].split) continue;
        for (int a = 0; a < max_space - rank; ++a) {
            if (fields[i].split->space[static_cast<std::size_t>(a)] == 1) continue;
            const SchedEntry& e = file.entries[i];
            Location at = e.loc;
            for (const Setting& s : e.settings)
                if (s.key == axis_letters[a]) at = s.loc;
            auto& d = diags.error(at, fmt::format("{}={} splits the {}, but the network's tensors are images [N, C, H, "
                                                  "W]: they have none",
                                                  axis_letters[a], fields[i].split->space[static_cast<std::size_t>(a)],
                                                  a == 0 ? "depth" : "axis"));
            for (const Layer& l : net.layers)
                if (l.op == OpKind::input) {
                    Diagnostics::note(d, l.loc, fmt::format("input '{}' declared here", l.name));
                    break;
                }
            fields[i].split.reset();  // no second error about its product
            break;
        }
    }
}

// The product of each fixed split must be the processor count (or, with procs open, one common count).
void check_products(const SchedFile& file, const std::vector<EntryFields>& fields, const Schedule& out,
                    Diagnostics& diags) {
    const Setting* procs_setting = nullptr;
    for (const Setting& s : file.globals)
        if (s.key == "procs") procs_setting = &s;
    std::optional<std::size_t> first;
    for (std::size_t i = 0; i < fields.size(); ++i) {
        if (!fields[i].split) continue;
        const Split& split = *fields[i].split;
        const SchedEntry& e = file.entries[i];
        if (out.procs) {
            if (split.procs() == *out.procs) continue;
            auto& d = diags.error(e.loc, fmt::format("split {} uses {} processes, but the schedule has procs = {}",
                                                     split.str(), split.procs(), *out.procs));
            if (procs_setting) Diagnostics::note(d, procs_setting->loc, "processor count set here");
        } else if (!first) {
            first = i;
        } else if (split.procs() != fields[*first].split->procs()) {
            auto& d = diags.error(e.loc, fmt::format("split {} uses {} processes, but another entry's split uses {}",
                                                     split.str(), split.procs(), fields[*first].split->procs()));
            Diagnostics::note(d, file.entries[*first].loc, "that split is here");
        }
    }
}

// Why a split's F and C parts cannot cut `layer`'s channels (its input `in`'s, for a layer with filters), or
// empty: every process needs a block of at least one channel, and group norm's groups may not straddle two.
std::string channel_problem(const Layer& layer, const Layer* in, const Split& split) {
    if (!splits_channels(layer, split)) return {};
    const std::int64_t channels = extent_of(layer, 1).c;
    const auto count = [](std::int64_t n, const char* what) {
        return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
    };
    if (own_channels(layer) == Channels::filters) {
        if (split.f > channels) return "it has only " + count(channels, "filter");
        const std::int64_t inputs = in ? extent_of(*in, 1).c : 1;
        if (split.c > inputs) return "its input has only " + count(inputs, "channel");
        return {};
    }
    if (split.f > channels || min_block(channels, split.f) < split.c)
        return fmt::format("{} cannot be cut into {} x {} blocks", count(channels, "channel"), split.f, split.c);
    if (layer.op == frontend::OpKind::groupnorm) {
        const std::int64_t per_group = channels / layer.groups;
        for (std::int64_t f = 0; f < split.f; ++f)
            for (std::int64_t c = 0; c < split.c; ++c) {
                Coords k;
                k.f = f, k.c = c;
                const Range r = channel_block(channels, split, k, Channels::nested);
                if (r.lo % per_group != 0 || r.hi % per_group != 0)
                    return fmt::format(
                        "a process's block of channels [{}, {}) would straddle its groups of {} (group "
                        "norm sums each group on the processes that hold it)",
                        r.lo, r.hi, per_group);
            }
    }
    return {};
}

// Why the tiles of a transposed convolution's input along spatial dimension d (of `extent`, split `parts` ways)
// cannot hold its halo, or empty: each tile's halo (deconv_halos) comes from the tiles beside it, which must be
// as long.
std::string deconv_halo_problem(const Layer& layer, int d, std::int64_t parts, std::int64_t extent, int axis) {
    const std::vector<Reach> halos = deconv_halos(layer, d, parts);
    for (std::int64_t b = 0; b < parts; ++b) {
        const Reach& h = halos[static_cast<std::size_t>(b)];
        for (const auto& [need, beside] : {std::pair{h.before, b - 1}, std::pair{h.after, b + 1}}) {
            if (need == 0) continue;
            DSL_INTERNAL_CHECK(beside >= 0 && beside < parts, "a halo beyond the tensor of " + layer.name);
            if (const std::int64_t tile = block_size(extent, parts, beside); tile < need)
                return "tiles of " + count_along(tile, axis) + " are smaller than its halo of " +
                       count_along(need, axis);
        }
    }
    return {};
}

}  // namespace

std::string split_problem(const Network& net, const Layer& layer, const Split& split,
                          std::optional<std::int64_t> batch) {
    if (batch && split.n > *batch) return fmt::format("the mini-batch has only {} samples", *batch);
    const Layer* in = layer.inputs.empty() ? nullptr : &net.layers[static_cast<std::size_t>(layer.inputs[0])];
    if (std::string why = channel_problem(layer, in, split); !why.empty()) return why;
    if (!split.spatial()) return {};
    const frontend::Spatial halo = layer.halo();
    // A layer whose tensors have no spatial dimensions (a fully connected head, a loss over classes) is
    // computed whole by every process of a sample group: any spatial split fits it.
    const bool spatial_in = in && in->spatial(), spatial_out = layer.spatial();
    const Dims in_extent = spatial_in ? extent_of(*in, 1) : Dims{}, out_extent = extent_of(layer, 1);
    const int rank = spatial_in ? in_extent.rank() : spatial_out ? out_extent.rank() : 0;
    for (int d = 0; d < rank; ++d) {
        const int axis = axis_of(d, rank);
        const std::int64_t parts = split.space[static_cast<std::size_t>(axis)];
        if (parts == 1) continue;
        if (spatial_in) {
            const std::int64_t extent = in_extent.space[d], need = d < halo.rank() ? halo[d] : 0;
            if (parts > extent) return "its input has only " + count_along(extent, axis);
            if (layer.op == OpKind::deconv) {
                if (std::string why = deconv_halo_problem(layer, d, parts, extent, axis); !why.empty()) return why;
            } else if (const std::int64_t tile = min_block(extent, parts); tile < need)
                return "tiles of " + count_along(tile, axis) + " are smaller than its halo of " +
                       count_along(need, axis);
        }
        if (spatial_out && parts > out_extent.space[d])
            return "its output has only " + count_along(out_extent.space[d], axis);
    }
    return {};
}

bool check_splits(const Network& net, const SchedFile& file, const Schedule& schedule,
                  std::optional<std::int64_t> batch, const BatchOrigin& origin, Diagnostics& diags) {
    std::map<int, std::vector<std::string>> failing;  // entry -> layers its split cannot run
    struct Problem {
        std::string why;
        const Layer* layer;
        Split split;
    };
    std::map<int, Problem> first_problem;
    std::set<int> batch_short;  // entries whose problem is the mini-batch
    for (std::size_t li = 0; li < net.layers.size(); ++li) {
        const Layer& layer = net.layers[li];
        const std::optional<Split>& split = schedule.layers[li].split;
        const int entry = schedule.source_entry[li];
        if (!schedulable(layer) || !split || entry < 0) continue;
        if (std::string why = split_problem(net, layer, *split, batch); !why.empty()) {
            failing[entry].push_back(layer.name);
            if (first_problem.emplace(entry, Problem{std::move(why), &layer, *split}).second && batch &&
                split->n > *batch)
                batch_short.insert(entry);
        }
    }
    // One error per entry: a default that cannot run deep layers would otherwise repeat for each of them.
    for (const auto& [entry, layers] : failing) {
        const auto& [why, layer, split] = first_problem.at(entry);
        const SchedEntry& e = file.entries[static_cast<std::size_t>(entry)];
        auto& d =
            diags.error(e.loc, fmt::format("split {} does not fit layer '{}': {}", split.str(), layer->name, why));
        Diagnostics::note(d, layer->loc, fmt::format("layer '{}' declared here", layer->name));
        if (layers.size() > 1) {
            const std::vector<std::string> others(layers.begin() + 1, layers.end());
            Diagnostics::note(d, e.loc,
                              fmt::format("the same split does not fit layers {} either", quoted_list(others, 4)));
        }
        if (batch_short.count(entry) && !origin.note.empty()) Diagnostics::note(d, origin.loc, origin.note);
    }
    return failing.empty();
}

std::string batch_size_problem(const Network& net, std::int64_t batch) {
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(batch, net.total_activation_bytes(), &bytes) ||
        __builtin_mul_overflow(batch, net.total_flops(), &bytes))
        return fmt::format(
            "a mini-batch of {} samples is too large: its activations ({} bytes per sample) or its FLOPs ({} per "
            "sample) overflow 64-bit integers",
            batch, net.total_activation_bytes(), net.total_flops());
    return {};
}

bool check_batch_size(const Network& net, std::int64_t batch, const BatchOrigin& origin, Diagnostics& diags) {
    const std::string why = batch_size_problem(net, batch);
    if (!why.empty()) diags.error(origin.loc, why);
    return why.empty();
}

std::optional<Schedule> apply_schedule(const Network& net, const SchedFile& file, Diagnostics& diags) {
    const std::size_t errors_before = diags.error_count();
    Schedule out;
    check_globals(file, out, diags);
    std::vector<EntryFields> fields;
    fields.reserve(file.entries.size());
    for (const SchedEntry& e : file.entries) fields.push_back(check_entry(e, diags));
    check_selectors(net, file, diags);
    check_axes(net, file, fields, diags);
    check_products(file, fields, out, diags);

    out.layers.resize(net.layers.size());
    out.source_entry.assign(net.layers.size(), -1);
    for (std::size_t li = 0; li < net.layers.size(); ++li) {
        const Layer& layer = net.layers[li];
        if (!schedulable(layer)) continue;
        std::optional<Rank> best_split, best_overlap, best_bn, best_recompute, best_precision;
        for (std::size_t ei = 0; ei < file.entries.size(); ++ei) {
            const auto r = rank(file.entries[ei], ei, layer);
            if (!r) continue;
            if (fields[ei].sets_split && (!best_split || *best_split < *r)) best_split = r;
            if (fields[ei].sets_overlap && (!best_overlap || *best_overlap < *r)) best_overlap = r;
            if (fields[ei].sets_bn && (!best_bn || *best_bn < *r)) best_bn = r;
            if (fields[ei].sets_recompute && (!best_recompute || *best_recompute < *r)) best_recompute = r;
            if (fields[ei].sets_precision && (!best_precision || *best_precision < *r)) best_precision = r;
        }
        Distribution& d = out.layers[li];
        if (best_split) {
            d.split = fields[best_split->entry].split;
            out.source_entry[li] = static_cast<int>(best_split->entry);
        }
        if (best_overlap) d.overlap = fields[best_overlap->entry].overlap;
        if (best_bn) d.bn = fields[best_bn->entry].bn;
        // Data and losses have nothing to recompute: whatever an entry says, they keep what they hold.
        if (best_recompute) d.recompute = recomputable(layer) ? fields[best_recompute->entry].recompute : false;
        // And nothing to store in fewer bits: data is read as it is, a loss's value is not kept.
        if (best_precision)
            d.precision = recomputable(layer) ? fields[best_precision->entry].precision : Precision::float32;

        // Where overlap cannot matter (no halo, or none exchanged) it is not left open: it would only hold
        // up a run that has nothing to decide.
        if (d.split && !d.overlap && !overlap_matters(net, layer, *d.split)) d.overlap = false;
    }
    place_data(net, out);
    BatchOrigin origin;
    for (const Setting& g : file.globals)
        if (g.key == "batch") origin = {g.value.loc, "the mini-batch is set here"};
    if (out.batch && !check_batch_size(net, *out.batch, origin, diags)) out.batch.reset();
    check_splits(net, file, out, out.batch, origin, diags);
    if (diags.error_count() > errors_before) return std::nullopt;
    return out;
}

bool overlap_matters(const Network& net, const Layer& layer, const Split& split) {
    return !layer.inputs.empty() && exchanges_halo(layer, net.layers[static_cast<std::size_t>(layer.inputs[0])], split);
}

void place_data(const Network& net, Schedule& schedule) {
    schedule.source_entry.resize(net.layers.size(), -1);
    for (std::size_t li = 0; li < net.layers.size(); ++li) {
        if (!net.layers[li].is_data()) continue;
        for (std::size_t reader = li + 1; reader < net.layers.size(); ++reader) {
            const auto& ins = net.layers[reader].inputs;
            if (std::find(ins.begin(), ins.end(), static_cast<int>(li)) == ins.end()) continue;
            schedule.layers[li] = schedule.layers[reader];
            schedule.source_entry[li] = schedule.source_entry[reader];
            // Its reader's split; data is kept as it is read.
            schedule.layers[li].recompute = false;
            schedule.layers[li].precision = Precision::float32;
            break;
        }
    }
}

frontend::Shape tile_shape(const Layer& layer, const Split& split, std::int64_t batch, std::int64_t* tile_batch) {
    // The first process's block, which is the largest, placed as the trainer places it: the spatial
    // dimensions are split wherever the tensor has them (a per-pixel label [N, H, W] too), never in a vector.
    const Box box = tile_box(extent_of(layer, batch), split, 0, layer.spatial(), own_channels(layer));
    if (tile_batch) *tile_batch = box.n.size();
    frontend::Shape tile = layer.shape;
    const std::size_t first = tile.dims.size() - static_cast<std::size_t>(box.space.rank());
    for (int d = 0; d < box.space.rank(); ++d) tile.dims[first + static_cast<std::size_t>(d)] = box.space[d].size();
    return tile;
}

}  // namespace dsl::scheduler

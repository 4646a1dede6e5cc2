// Writing a schedule as `.sched` text (schedule_text.hpp): each layer's fields as entry settings, the most
// common value of each in `default`, the instances that mostly differ from it in `layer PREFIX.*`, then single
// layers; the text read back to check that it says what was meant.
#include <dsl/scheduler/schedule_text.hpp>

#include <dsl/frontend/parse.hpp>
#include <dsl/scheduler/recompute.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>

namespace dsl::scheduler {

using frontend::Layer;
using frontend::Network;
using frontend::OpKind;

namespace {

// The fields an entry sets, each on its own (the precedence rule resolves them separately): the split and
// overlap, and bn, recompute and precision where the layer has them. Empty where it has none.
constexpr std::size_t fields = 5;
using Values = std::array<std::string, fields>;

// What a layer's field is where no entry sets it: what leaving it out says. A complete schedule's split and
// overlap have none (every layer's are written); a partial one's open fields are open.
Values implicit_values(bool complete) {
    if (complete) return {"", "", "bn=batch", "recompute=off", "precision=float32"};
    return {"N=?", "overlap=?", "bn=batch", "recompute=?", "precision=float32"};
}

Values values_of(const Network& net, const Schedule& s, std::size_t i, bool complete) {
    const Layer& l = net.layers[i];
    const Distribution& d = s.layers[i];
    const auto open_or = [&](const char* usual, const char* field) {
        return complete ? std::string(usual) : fmt::format("{}=?", field);
    };
    Values v;
    v[0] = d.split ? d.split->str() : "N=?";
    // Every layer's overlap, also where it cannot matter (apply_schedule binds it `off` there unless an entry
    // says otherwise), so that the text binds the same distributions, not only equivalent ones.
    v[1] = d.overlap ? (*d.overlap ? "overlap=on" : "overlap=off") : open_or("overlap=off", "overlap");
    if (l.op == OpKind::batchnorm) v[2] = d.bn ? fmt::format("bn={}", bn_name(*d.bn)) : open_or("bn=batch", "bn");
    if (recomputable(l)) {
        v[3] = d.recompute ? (*d.recompute ? "recompute=on" : "recompute=off") : open_or("recompute=off", "recompute");
        v[4] = d.precision ? fmt::format("precision={}", precision_name(*d.precision))
                           : open_or("precision=float32", "precision");
    }
    return v;
}

// The most common non-empty value, the first among equals; empty when there is none.
std::string majority(const std::vector<std::string>& keys) {
    std::map<std::string, int> count;
    std::string best;
    for (const std::string& k : keys) {
        if (k.empty()) continue;
        if (++count[k] > (best.empty() ? 0 : count[best])) best = k;
    }
    return best;
}

std::string entry_text(const Values& v) {
    std::string out;
    for (const std::string& f : v)
        if (!f.empty()) out += " " + f;
    return out;
}

}  // namespace

std::string schedule_text(const Network& net, const Schedule& schedule, const std::string& header,
                          const std::string& platform) {
    const bool complete = schedule.complete();
    const Values implicit = implicit_values(complete);
    std::vector<int> decided;
    std::vector<Values> value(net.layers.size());
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        if (net.layers[i].is_data()) continue;  // read in its first reader's distribution
        decided.push_back(static_cast<int>(i));
        value[i] = values_of(net, schedule, i, complete);
    }
    std::string text;
    for (std::size_t start = 0; start < header.size();) {
        const std::size_t end = header.find('\n', start);
        text += "# " + header.substr(start, end == std::string::npos ? std::string::npos : end - start) + "\n";
        if (end == std::string::npos) break;
        start = end + 1;
    }
    if (complete || schedule.procs) text += fmt::format("procs = {}\n", schedule.procs.value_or(1));
    if (!platform.empty()) text += fmt::format("platform = {}\n", platform);
    if (schedule.batch) text += fmt::format("batch = {}\n", *schedule.batch);
    const std::string globals = text;

    // `default` sets each field's most common value, unless that is what leaving it out says; an instance
    // whose layers mostly differ from what they inherit gets a `layer PREFIX.*` entry for those fields; a layer
    // that still differs, its own entry.
    Values inherited;
    for (std::size_t f = 0; f < fields; ++f) {
        std::vector<std::string> all;
        for (int i : decided) all.push_back(value[static_cast<std::size_t>(i)][f]);
        inherited[f] = majority(all);
        if (inherited[f] == implicit[f]) inherited[f].clear();
    }
    const auto seen = [&](const Values& here, std::size_t f) { return here[f].empty() ? implicit[f] : here[f]; };
    std::string entries = entry_text(inherited).empty() ? "\n" : "\ndefault" + entry_text(inherited) + "\n";
    std::function<void(const std::string&, std::size_t, const Values&)> visit =
        [&](const std::string& prefix, std::size_t depth, const Values& outer) {
            std::vector<std::string> children;
            std::vector<int> inside, own;
            for (int i : decided) {
                const Layer& l = net.layers[static_cast<std::size_t>(i)];
                if (depth > 0 && (l.instances.size() < depth || l.instances[depth - 1] != prefix)) continue;
                inside.push_back(i);
                if (l.instances.size() > depth) {
                    if (std::find(children.begin(), children.end(), l.instances[depth]) == children.end())
                        children.push_back(l.instances[depth]);
                } else {
                    own.push_back(i);
                }
            }
            Values here = outer, changed;
            if (depth > 0 && inside.size() > 1) {
                for (std::size_t f = 0; f < fields; ++f) {
                    std::vector<std::string> vs;
                    for (int i : inside) vs.push_back(value[static_cast<std::size_t>(i)][f]);
                    const std::string m = majority(vs);
                    if (!m.empty() && m != seen(here, f)) here[f] = changed[f] = m;
                }
                if (!entry_text(changed).empty()) entries += fmt::format("layer {}.*{}\n", prefix, entry_text(changed));
            }
            for (const std::string& child : children) visit(child, depth + 1, here);
            for (int i : own) {
                Values differ;
                for (std::size_t f = 0; f < fields; ++f) {
                    const std::string& v = value[static_cast<std::size_t>(i)][f];
                    if (!v.empty() && v != seen(here, f)) differ[f] = v;
                }
                if (!entry_text(differ).empty())
                    entries +=
                        fmt::format("layer {}{}\n", net.layers[static_cast<std::size_t>(i)].name, entry_text(differ));
            }
        };
    visit("", 0, inherited);
    text = globals + entries;

    // Check that it says what was meant (where a field matters); where the precedence rule would read it
    // otherwise, every layer by name.
    SourceManager sources;
    Diagnostics diags;
    const auto same_as = [&](const std::string& candidate) {
        auto file = frontend::parse_sched(*sources.add("<schedule>", candidate), diags);
        if (!file) return false;
        auto read = apply_schedule(net, *file, diags);
        if (!read) return false;
        for (int i : decided)
            if (values_of(net, *read, static_cast<std::size_t>(i), complete) != value[static_cast<std::size_t>(i)])
                return false;
        return true;
    };
    if (same_as(text)) return text;
    text = globals + "\n";
    for (int i : decided) {
        Values own;
        for (std::size_t f = 0; f < fields; ++f)
            if (const std::string& v = value[static_cast<std::size_t>(i)][f]; v != implicit[f]) own[f] = v;
        const std::string& name = net.layers[static_cast<std::size_t>(i)].name;
        text += entry_text(own).empty() ? fmt::format("# layer {}: open\n", name)
                                        : fmt::format("layer {}{}\n", name, entry_text(own));
    }
    return text;
}

}  // namespace dsl::scheduler

// The trainer's fast paths as commands report them (paths_report.hpp).
#include "paths_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

namespace dsl::cli {

nlohmann::json paths_json(const scheduler::LayerPaths& paths) {
    nlohmann::json out = nlohmann::json::array();
    for (const scheduler::Path& p : paths.paths)
        out.push_back(p.on ? std::string(scheduler::path_name(p.kind))
                           : fmt::format("off: {}: {}", scheduler::path_name(p.kind), p.why));
    return out;
}

std::string paths_off_text(const frontend::Network& net, const std::vector<scheduler::LayerPaths>& paths,
                           const std::string& indent) {
    // Each (path, reason) once, with its layers in order.
    std::vector<std::pair<std::pair<scheduler::PathKind, std::string>, std::vector<std::string>>> off;
    for (std::size_t i = 0; i < paths.size(); ++i)
        for (const scheduler::Path& p : paths[i].paths) {
            if (p.on) continue;
            const auto key = std::make_pair(p.kind, p.why);
            auto it = std::find_if(off.begin(), off.end(), [&](const auto& o) { return o.first == key; });
            if (it == off.end()) it = off.insert(off.end(), {key, {}});
            it->second.push_back(net.layers[i].name);
        }
    std::string out;
    for (const auto& [key, layers] : off)
        out += fmt::format("{}{} off for {} ({}): {}\n", indent, scheduler::path_name(key.first), some_names(layers),
                           layers.size() == 1 ? "1 layer" : fmt::format("{} layers", layers.size()), key.second);
    return out;
}

std::string some_names(const std::vector<std::string>& names) {
    constexpr std::size_t shown = 4;
    std::string out;
    for (std::size_t k = 0; k < names.size() && k < shown; ++k) out += (k ? ", " : "") + names[k];
    if (names.size() > shown) out += fmt::format(" and {} more", names.size() - shown);
    return out;
}

std::string paths_count_text(const std::vector<scheduler::LayerPaths>& paths) {
    std::map<scheduler::PathKind, std::pair<int, int>> counts;  // on, of
    for (const scheduler::LayerPaths& l : paths)
        for (const scheduler::Path& p : l.paths) {
            auto& [on, of] = counts[p.kind];
            on += p.on ? 1 : 0;
            ++of;
        }
    std::string out;
    for (const auto& [kind, count] : counts)
        out += fmt::format("{}{} {} of {}", out.empty() ? "" : ", ", scheduler::path_name(kind), count.first,
                           count.second);
    return out;
}

}  // namespace dsl::cli

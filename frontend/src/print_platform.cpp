// Canonical `.platform` text and JSON for a PlatformFile; the text parses back to the same tree.
#include <dsl/frontend/print.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace dsl::frontend {

// Numbers go back as they were written, so that `0.60` stays `0.60` and the tree stays the same.
std::string PlatformValue::text() const {
    if (kind == Kind::word) return word;
    return unit.empty() ? number_text : number_text + " " + unit;
}

namespace {

std::string dims_text(const std::vector<std::int64_t>& dims) {
    std::string out;
    for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? "x" : "") + std::to_string(dims[i]);
    return out;
}

void add_location(nlohmann::json& j, const Location& loc, const char* prefix = "") {
    j[std::string(prefix) + "line"] = loc.line;
    j[std::string(prefix) + "col"] = loc.col;
}

// A number with its unit ("" when none), or a tagged word, as in the `.sched` JSON.
nlohmann::json value_json(const PlatformValue& v, bool with_locations) {
    nlohmann::json j;
    if (v.kind == PlatformValue::Kind::word) {
        j = {{"word", v.word}};
    } else {
        j = {{"number", v.number}, {"unit", v.unit}};
    }
    if (with_locations) add_location(j, v.loc);
    return j;
}

}  // namespace

std::string print_platform_file(const PlatformFile& file) {
    std::string out;
    for (const auto& s : file.settings) out += s.key + " = " + s.value.text() + "\n";
    if (!file.settings.empty() && !file.times.empty()) out += "\n";
    for (const auto& t : file.times) {
        out += "time " + t.kernel;
        for (const auto& f : t.fields) out += " " + f.key + "=" + dims_text(f.dims);
        out += " = " + t.value.text() + "\n";
    }
    return out;
}

nlohmann::json platform_to_json(const PlatformFile& file, bool with_locations) {
    nlohmann::json settings = nlohmann::json::array();
    for (const auto& s : file.settings) {
        nlohmann::json j = {{"key", s.key}, {"value", value_json(s.value, with_locations)}};
        if (with_locations) add_location(j, s.loc);
        settings.push_back(std::move(j));
    }
    nlohmann::json times = nlohmann::json::array();
    for (const auto& t : file.times) {
        nlohmann::json fields = nlohmann::json::array();
        for (const auto& f : t.fields) {
            nlohmann::json j = {{"key", f.key}, {"dims", f.dims}};
            if (with_locations) add_location(j, f.loc);
            fields.push_back(std::move(j));
        }
        nlohmann::json j = {
            {"kernel", t.kernel}, {"fields", std::move(fields)}, {"value", value_json(t.value, with_locations)}};
        if (with_locations) {
            add_location(j, t.loc);
            add_location(j, t.kernel_loc, "kernel_");
        }
        times.push_back(std::move(j));
    }
    return {{"settings", settings}, {"times", times}};
}

}  // namespace dsl::frontend

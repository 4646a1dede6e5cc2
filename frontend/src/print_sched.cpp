// Canonical `.sched` text and JSON for a SchedFile; the text parses back to the same tree.
#include <dsl/frontend/print.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace dsl::frontend {
namespace {

std::string value_text(const SchedValue& v) {
    switch (v.kind) {
        case SchedValue::Kind::integer: return std::to_string(v.integer);
        case SchedValue::Kind::word: return v.text;
        // The grammar has no escapes and strings cannot hold '"', '\' or newlines, so the text goes back as is.
        case SchedValue::Kind::string: return '"' + v.text + '"';
        case SchedValue::Kind::open: return "?";
    }
    return "?";
}

const char* selector_name(SchedEntry::Selector s) {
    switch (s) {
        case SchedEntry::Selector::all: return "default";
        case SchedEntry::Selector::layer: return "layer";
        case SchedEntry::Selector::block: return "block";
    }
    return "default";
}

// A value: an integer is a JSON number, open is "?", words and strings are tagged objects so that
// `on` and `"on"` stay apart.
nlohmann::json value_json(const SchedValue& v) {
    switch (v.kind) {
        case SchedValue::Kind::integer: return v.integer;
        case SchedValue::Kind::word: return {{"word", v.text}};
        case SchedValue::Kind::string: return {{"string", v.text}};
        case SchedValue::Kind::open: return "?";
    }
    return "?";
}

void add_location(nlohmann::json& j, const Location& loc, const char* prefix = "") {
    j[std::string(prefix) + "line"] = loc.line;
    j[std::string(prefix) + "col"] = loc.col;
}

nlohmann::json setting_json(const Setting& s, bool with_locations) {
    nlohmann::json j = {{"key", s.key}, {"value", value_json(s.value)}};
    if (with_locations) {
        add_location(j, s.loc);
        add_location(j, s.value.loc, "value_");  // a value may be a bare number, which has no room for them
    }
    return j;
}

}  // namespace

std::string print_sched(const SchedFile& file) {
    std::string out;
    for (const auto& s : file.globals) out += s.key + " = " + value_text(s.value) + "\n";
    if (!file.globals.empty() && !file.entries.empty()) out += "\n";
    for (const auto& e : file.entries) {
        out += selector_name(e.selector);
        if (e.selector != SchedEntry::Selector::all) out += " " + e.pattern;
        for (const auto& s : e.settings) out += " " + s.key + "=" + value_text(s.value);
        out += "\n";
    }
    return out;
}

nlohmann::json sched_to_json(const SchedFile& file, bool with_locations) {
    nlohmann::json globals = nlohmann::json::array();
    for (const auto& s : file.globals) globals.push_back(setting_json(s, with_locations));
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : file.entries) {
        nlohmann::json settings = nlohmann::json::array();
        for (const auto& s : e.settings) settings.push_back(setting_json(s, with_locations));
        nlohmann::json j = {{"selector", selector_name(e.selector)}, {"pattern", e.pattern}, {"settings", settings}};
        if (with_locations) {
            add_location(j, e.loc);
            if (e.selector != SchedEntry::Selector::all) add_location(j, e.pattern_loc, "pattern_");
        }
        entries.push_back(std::move(j));
    }
    return {{"globals", globals}, {"entries", entries}};
}

}  // namespace dsl::frontend

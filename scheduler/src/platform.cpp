// Platforms: checking a parsed `.platform` file into a Platform, finding platform files, and printing them.
#include <dsl/scheduler/platform.hpp>

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

namespace dsl::scheduler {

using frontend::PlatformFile;
using frontend::PlatformSetting;
using frontend::PlatformTime;
using frontend::PlatformValue;

namespace {

// What a setting's value is, and so which units it takes.
enum class Kind {
    device,     // the word cpu or gpu
    count,      // a positive integer without a unit
    fraction,   // a number in (0, 1] without a unit
    bytes,      // B ... TiB
    flop_rate,  // FLOP/s ... PFLOP/s
    byte_rate,  // B/s ... GiB/s
    time,       // s, ms, us, ns
};

struct Unit {
    const char* name;
    double scale;  // to the SI base unit: bytes, FLOP/s, bytes/s or seconds
};

constexpr double Ki = 1024.0, Mi = Ki * Ki, Gi = Mi * Ki, Ti = Gi * Ki;

constexpr Unit byte_units[] = {{"B", 1.0},  {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
                               {"KiB", Ki}, {"MiB", Mi}, {"GiB", Gi}, {"TiB", Ti}};
constexpr Unit flop_units[] = {{"FLOP/s", 1.0}, {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15}};
constexpr Unit byte_rate_units[] = {{"B/s", 1.0},   {"KB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9},
                                    {"TB/s", 1e12}, {"KiB/s", Ki}, {"MiB/s", Mi}, {"GiB/s", Gi}};
constexpr Unit time_units[] = {{"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};

struct UnitTable {
    const Unit* begin;
    const Unit* end;
    const char* what;     // "'memory' takes bytes (B, KB, ...)", "'latency' takes a time (s, ...)"
    const char* unit_of;  // "'latency' needs a unit of time (s, ...)"
};

UnitTable units_of(Kind kind) {
    switch (kind) {
        case Kind::bytes: return {std::begin(byte_units), std::end(byte_units), "bytes", "bytes"};
        case Kind::flop_rate: return {std::begin(flop_units), std::end(flop_units), "FLOP/s", "FLOP/s"};
        case Kind::byte_rate:
            return {std::begin(byte_rate_units), std::end(byte_rate_units), "bytes per second", "bytes per second"};
        case Kind::time: return {std::begin(time_units), std::end(time_units), "a time", "time"};
        default: return {nullptr, nullptr, "", ""};
    }
}

constexpr Kind unit_kinds[] = {Kind::bytes, Kind::flop_rate, Kind::byte_rate, Kind::time};

std::vector<std::string> unit_names(Kind kind) {
    const UnitTable t = units_of(kind);
    std::vector<std::string> out;
    for (const Unit* u = t.begin; u != t.end; ++u) out.emplace_back(u->name);
    return out;
}

// "bytes (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"; with `unit_of`, "time (s, ms, us, ns)" for "a unit of".
std::string kind_text(Kind kind, bool unit_of = false) {
    std::string names;
    for (const std::string& n : unit_names(kind)) names += (names.empty() ? "" : ", ") + n;
    return fmt::format("{} ({})", unit_of ? units_of(kind).unit_of : units_of(kind).what, names);
}

const Unit* find_unit(Kind kind, const std::string& name) {
    const UnitTable t = units_of(kind);
    for (const Unit* u = t.begin; u != t.end; ++u)
        if (name == u->name) return u;
    return nullptr;
}

struct SettingSpec {
    const char* key;
    Kind kind;
};

// Every setting, in the order of print_platform and the documentation; which are required is checked apart.
constexpr SettingSpec setting_specs[] = {
    {"device", Kind::device},
    {"procs_per_node", Kind::count},
    {"nodes", Kind::count},
    {"memory", Kind::bytes},
    {"flops", Kind::flop_rate},
    {"bfloat16_flops", Kind::flop_rate},
    {"float16_flops", Kind::flop_rate},
    {"efficiency", Kind::fraction},
    {"memory_bandwidth", Kind::byte_rate},
    {"kernel_latency", Kind::time},
    {"compute_units", Kind::count},
    {"workspace", Kind::bytes},
    {"io_bandwidth", Kind::byte_rate},
    {"latency", Kind::time},
    {"bandwidth", Kind::byte_rate},
    {"node_latency", Kind::time},
    {"node_bandwidth", Kind::byte_rate},
};

const SettingSpec* find_spec(const std::string& key) {
    for (const SettingSpec& s : setting_specs)
        if (key == s.key) return &s;
    return nullptr;
}

// Beyond these a figure is a typo, and printing it could overflow or underflow on the way back.
constexpr double largest = 1e30, smallest = 1e-30;
// The most processes, nodes or compute units a platform may have (2^20), and the most bytes of memory or
// scratch (2^60, an exbibyte): far beyond any machine, and small enough that the model's counts and byte
// totals (a process count times a node count, bytes times processes) stay exact integers.
constexpr std::int64_t most_count = std::int64_t{1} << 20;
constexpr double most_bytes = 1152921504606846976.0;

// A value's text as an error quotes it: whole where short, else its start and its length.
std::string brief(const std::string& text) {
    if (text.size() <= 40) return text;
    return fmt::format("{}... ({} characters)", text.substr(0, 24), text.size());
}

bool in_bounds(double si) { return std::isfinite(si) && si <= largest && (si == 0.0 || si >= smallest); }

std::string lowercase(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// "Gb/s" written for bytes: the commonest unit mistake, with a figure that is off by eight.
std::string bits_hint(const PlatformValue& v, Kind kind) {
    const std::string& u = v.unit;
    const auto b = u.find('b');
    if (b == std::string::npos || (kind != Kind::bytes && kind != Kind::byte_rate)) return {};
    std::string bytes_unit = u;
    bytes_unit[b] = 'B';
    if (!find_unit(kind, bytes_unit)) return {};
    return fmt::format("'{}' is bits, and platforms take bytes: {} {} is {:.6g} {}", u, v.number_text, u,
                       v.number / 8.0, bytes_unit);
}

// A value with a unit of `kind`, in SI base units; nullopt after reporting why not. `what` names the
// setting in messages: "'memory'" or "a 'time' line".
std::optional<double> quantity(const PlatformValue& v, Kind kind, const std::string& what, Diagnostics& diags) {
    if (v.kind == PlatformValue::Kind::word) {
        diags.error(v.loc,
                    fmt::format("{} takes a number with a unit of {}, not '{}'", what, kind_text(kind, true), v.word));
        return std::nullopt;
    }
    if (v.unit.empty()) {
        diags.error(v.loc, fmt::format("{} needs a unit of {}", what, kind_text(kind, true)));
        return std::nullopt;
    }
    if (const Unit* u = find_unit(kind, v.unit)) {
        const double si = v.number * u->scale;
        if (!in_bounds(si)) {
            diags.error(v.loc, fmt::format("{} = {} is out of range", what, brief(v.text())));
            return std::nullopt;
        }
        if (kind == Kind::bytes && si > most_bytes) {
            diags.error(v.loc, fmt::format("{} = {} is more than 1 EiB (2^60 B), the most a platform may have", what,
                                           brief(v.text())));
            return std::nullopt;
        }
        return si;
    }
    for (Kind other : unit_kinds) {
        if (other != kind && find_unit(other, v.unit)) {
            diags.error(v.unit_loc, fmt::format("{} takes {}, not '{}'", what, kind_text(kind), v.unit));
            return std::nullopt;
        }
    }
    auto& d = diags.error(v.unit_loc, fmt::format("unknown unit '{}': {} takes {}", v.unit, what, kind_text(kind)));
    if (std::string hint = bits_hint(v, kind); !hint.empty()) {
        Diagnostics::note(d, v.unit_loc, std::move(hint));
        return std::nullopt;
    }
    for (const std::string& name : unit_names(kind)) {
        if (lowercase(name) == lowercase(v.unit)) {
            Diagnostics::note(d, v.unit_loc, fmt::format("did you mean '{}'? units are case-sensitive", name));
            return std::nullopt;
        }
    }
    if (auto m = diags.dropped(d) ? "" : closest_match(v.unit, unit_names(kind)); !m.empty())
        Diagnostics::note(d, v.unit_loc, fmt::format("did you mean '{}'?", m));
    return std::nullopt;
}

// A plain number: no unit may follow it.
bool plain_number(const PlatformValue& v, const std::string& what, const char* expected, Diagnostics& diags) {
    if (v.kind == PlatformValue::Kind::word) {
        diags.error(v.loc, fmt::format("{} must be {}, not '{}'", what, expected, v.word));
        return false;
    }
    if (!v.unit.empty()) {
        diags.error(v.unit_loc, fmt::format("{} takes {} without a unit, not '{}'", what, expected, v.unit));
        return false;
    }
    return true;
}

std::optional<std::int64_t> count(const PlatformValue& v, const std::string& what, Diagnostics& diags) {
    if (!plain_number(v, what, "a positive integer", diags)) return std::nullopt;
    const std::string& t = v.number_text;
    std::int64_t n = 0;
    const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
    const bool digits = !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
    if (ec == std::errc::result_out_of_range || (ec == std::errc{} && ptr == t.data() + t.size() && n > most_count) ||
        (digits && ec != std::errc{})) {
        diags.error(v.loc,
                    fmt::format("{} = {} is more than {}, the most a platform may have", what, brief(t), most_count));
        return std::nullopt;
    }
    if (ec != std::errc{} || ptr != t.data() + t.size() || n < 1) {
        diags.error(v.loc, fmt::format("{} must be a positive integer, not '{}'", what, brief(t)));
        return std::nullopt;
    }
    return n;
}

bool positive(const PlatformValue& v, double si, const std::string& what, Diagnostics& diags) {
    if (si > 0.0) return true;
    diags.error(v.loc, fmt::format("{} must be greater than 0", what));
    return false;
}

// Applies one known setting to `out`; false after reporting an error in its value.
bool apply_setting(const PlatformSetting& s, const SettingSpec& spec, Platform& out, Diagnostics& diags) {
    const PlatformValue& v = s.value;
    const std::string what = fmt::format("'{}'", s.key);
    switch (spec.kind) {
        case Kind::device:
            if (v.kind == PlatformValue::Kind::word && (v.word == "cpu" || v.word == "gpu")) {
                out.device = v.word == "gpu" ? Device::gpu : Device::cpu;
                return true;
            }
            diags.error(v.loc, fmt::format("'device' must be 'cpu' or 'gpu', not '{}'", v.text()));
            return false;
        case Kind::count: {
            const auto n = count(v, what, diags);
            if (!n) return false;
            (s.key == "nodes" ? out.nodes : s.key == "compute_units" ? out.compute_units : out.procs_per_node) = *n;
            return true;
        }
        case Kind::fraction:
            if (!plain_number(v, what, "a number in (0, 1]", diags)) return false;
            if (!(v.number > 0.0 && v.number <= 1.0) || !in_bounds(v.number)) {
                diags.error(v.loc, fmt::format("{} must be in (0, 1], not '{}'", what, brief(v.number_text)));
                return false;
            }
            out.efficiency = v.number;
            return true;
        default: break;
    }
    const auto si = quantity(v, spec.kind, what, diags);
    if (!si) return false;
    const std::string& k = s.key;
    // Latencies and the scratch space may be 0; a machine without memory, compute or bandwidth may not.
    if (k != "workspace" && spec.kind != Kind::time && !positive(v, *si, what, diags)) return false;
    if (k == "memory") out.memory = *si;
    if (k == "workspace") out.workspace = *si;
    if (k == "flops") out.flops = *si;
    if (k == "bfloat16_flops") out.bfloat16_flops = *si;
    if (k == "float16_flops") out.float16_flops = *si;
    if (k == "memory_bandwidth") out.memory_bandwidth = *si;
    if (k == "kernel_latency") out.kernel_latency = *si;
    if (k == "io_bandwidth") out.io_bandwidth = *si;
    if (k == "latency") out.node.latency = *si;
    if (k == "bandwidth") out.node.bandwidth = *si;
    if (k == "node_latency") out.network.latency = *si;
    if (k == "node_bandwidth") out.network.bandwidth = *si;
    return true;
}

std::string quoted_list(const std::vector<std::string>& names) {
    std::string out;
    for (std::size_t i = 0; i < names.size(); ++i)
        out += fmt::format("{}'{}'", i == 0 ? "" : i + 1 == names.size() ? " and " : ", ", names[i]);
    return out;
}

void check_times(const PlatformFile& file, Platform& out, Diagnostics& diags) {
    std::map<std::string, const PlatformTime*> seen;
    for (const PlatformTime& t : file.times) {
        bool ok = true;
        if (t.fields.empty()) {
            diags.error(t.kernel_loc, fmt::format("the time of '{}' names no fields: a 'time' line gives the "
                                                  "shapes it was measured at, as in 'time sendrecv bytes=65536'",
                                                  t.kernel));
            ok = false;
        }
        std::map<std::string, const frontend::PlatformField*> fields;
        std::vector<TimeField> key_fields;
        for (const auto& f : t.fields) {
            if (auto [it, fresh] = fields.emplace(f.key, &f); !fresh) {
                auto& d = diags.error(f.loc, fmt::format("field '{}' is given twice", f.key));
                Diagnostics::note(d, it->second->loc, "first given here");
                ok = false;
            }
            key_fields.emplace_back(f.key, f.dims);
        }
        const auto seconds = quantity(t.value, Kind::time, "a 'time' line", diags);
        if (seconds && !positive(t.value, *seconds, "a measured time", diags)) ok = false;
        if (!seconds || !ok) continue;
        const std::string key = time_key(t.kernel, std::move(key_fields));
        if (auto [it, fresh] = seen.emplace(key, &t); !fresh) {
            auto& d = diags.error(t.loc, fmt::format("the time of '{}' is given twice", key));
            Diagnostics::note(d, it->second->loc, "first given here");
            continue;
        }
        out.times[key] = *seconds;
    }
}

// `v` in `unit` to 6 significant digits. Where that rounding would carry it past the limits a file may hold,
// all 17 digits in the base unit instead, so that printed text always loads back.
std::string scaled(double v, double scale, const char* unit, const char* base) {
    const std::string text = fmt::format("{:.6g}", v / scale);
    double back = 0.0;
    std::from_chars(text.data(), text.data() + text.size(), back);
    if (in_bounds(back * scale) || !in_bounds(v)) return text + " " + unit;
    return fmt::format("{:.17g} {}", v, base);
}

// Readable units: the largest binary unit that leaves at least 1 (16 GiB, 64 MiB).
std::string bytes_text(double v) {
    if (v >= Ti) return scaled(v, Ti, "TiB", "B");
    if (v >= Gi) return scaled(v, Gi, "GiB", "B");
    if (v >= Mi) return scaled(v, Mi, "MiB", "B");
    if (v >= Ki) return scaled(v, Ki, "KiB", "B");
    return scaled(v, 1.0, "B", "B");
}

std::string flops_text(double v) {
    return v >= 1e12 ? scaled(v, 1e12, "TFLOP/s", "FLOP/s") : scaled(v, 1e9, "GFLOP/s", "FLOP/s");
}

std::string byte_rate_text(double v) {
    if (v >= 1e12) return scaled(v, 1e12, "TB/s", "B/s");
    if (v >= 1e9 || v == 0.0) return scaled(v, 1e9, "GB/s", "B/s");
    return scaled(v, 1e6, "MB/s", "B/s");
}

std::string time_text(double v) {
    if (v >= 1.0) return scaled(v, 1.0, "s", "s");
    if (v >= 1e-3) return scaled(v, 1e-3, "ms", "s");
    if (v >= 1e-6 || v == 0.0) return scaled(v, 1e-6, "us", "s");
    return scaled(v, 1e-9, "ns", "s");
}

}  // namespace

std::string time_key(const std::string& kernel, std::vector<TimeField> fields) {
    std::sort(fields.begin(), fields.end());
    std::string out = kernel;
    for (const auto& [name, dims] : fields) {
        out += " " + name + "=";
        for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? "x" : "") + std::to_string(dims[i]);
    }
    return out;
}

const std::vector<std::int64_t>& TimeKey::field(const std::string& name) const {
    static const std::vector<std::int64_t> none;
    auto it = fields.find(name);
    return it == fields.end() ? none : it->second;
}

std::optional<TimeKey> parse_time_key(const std::string& key) {
    TimeKey out;
    std::istringstream in(key);
    if (!(in >> out.kernel)) return std::nullopt;
    for (std::string field; in >> field;) {
        const std::size_t eq = field.find('=');
        if (eq == std::string::npos) return std::nullopt;
        std::vector<std::int64_t> dims;
        std::istringstream values(field.substr(eq + 1));
        for (std::string v; std::getline(values, v, 'x');) {
            if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
                return std::nullopt;
            dims.push_back(std::stoll(v));
        }
        out.fields[field.substr(0, eq)] = std::move(dims);
    }
    return out;
}

std::string platform_path(const std::string& name_or_path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool is_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".platform");
    // A path that names something is its loader's to refuse, saying why (a folder, a FIFO).
    if (is_path) return fs::exists(name_or_path, ec) ? name_or_path : std::string();
    if (name_or_path.empty()) return {};
    for (const std::string& dir : frontend::stdlib_dirs()) {
        const fs::path p = fs::path(dir) / "platforms" / (name_or_path + ".platform");
        if (fs::is_regular_file(p, ec)) return p.string();
    }
    return {};
}

std::vector<std::string> stdlib_platforms() {
    namespace fs = std::filesystem;
    std::set<std::string> names;  // a name in two stdlib folders is one platform: the first folder's
    std::error_code ec;
    for (const std::string& dir : frontend::stdlib_dirs())
        for (const auto& e : fs::directory_iterator(fs::path(dir) / "platforms", ec))
            if (e.path().extension() == ".platform") names.insert(e.path().stem().string());
    return {names.begin(), names.end()};
}

std::optional<Platform> platform_from_file(const PlatformFile& file, Diagnostics& diags) {
    const std::size_t errors_before = diags.error_count();
    Platform out;
    out.path = file.source ? file.source->path : "";
    std::map<std::string, const PlatformSetting*> seen;
    std::set<std::string> failed;  // set, but with an error already reported: not missing too
    for (const PlatformSetting& s : file.settings) {
        const SettingSpec* spec = find_spec(s.key);
        if (!spec) {
            auto& d = diags.error(s.loc, fmt::format("unknown setting '{}'", s.key));
            std::vector<std::string> known;
            for (const SettingSpec& k : setting_specs) known.emplace_back(k.key);
            if (auto m = diags.dropped(d) ? "" : closest_match(s.key, known); !m.empty())
                Diagnostics::note(d, s.loc, fmt::format("did you mean '{}'?", m));
            continue;
        }
        if (auto [it, fresh] = seen.emplace(s.key, &s); !fresh) {
            auto& d = diags.error(s.loc, fmt::format("'{}' is set twice", s.key));
            Diagnostics::note(d, it->second->loc, "first set here");
            continue;
        }
        if (!apply_setting(s, *spec, out, diags)) failed.insert(s.key);
    }
    check_times(file, out, diags);

    // Between nodes nothing is needed on one node; `nodes` in error counts as known, to say nothing twice.
    const bool one_node = out.nodes == 1 || failed.count("nodes");
    std::vector<std::string> missing;
    for (const char* key : {"procs_per_node", "memory", "flops", "memory_bandwidth", "latency", "bandwidth"})
        if (!seen.count(key)) missing.emplace_back(key);
    bool missing_network = false;
    for (const char* key : {"node_latency", "node_bandwidth"}) {
        if (seen.count(key) || one_node) continue;
        missing.emplace_back(key);
        missing_network = true;
    }
    if (!missing.empty()) {
        const Location top{file.source, 1, 1, 1};
        auto& d = diags.error(
            top, fmt::format("missing required setting{} {}", missing.size() > 1 ? "s" : "", quoted_list(missing)));
        if (missing_network)
            Diagnostics::note(d, {},
                              "'node_latency' and 'node_bandwidth' describe the network between nodes; they may "
                              "be left out only with 'nodes = 1'");
    }
    if (out.nodes == 1) {
        if (!seen.count("node_latency")) out.network.latency = out.node.latency;
        if (!seen.count("node_bandwidth")) out.network.bandwidth = out.node.bandwidth;
    }
    if (diags.error_count() > errors_before) return std::nullopt;
    return out;
}

std::optional<Platform> load_platform(const std::string& path, SourceManager& sources, Diagnostics& diags) {
    const SourceFile* file = sources.load(path);
    if (file == nullptr) {
        diags.error({}, fmt::format("cannot read '{}': {}", path, sources.last_error()));
        return std::nullopt;
    }
    const auto tree = frontend::parse_platform(*file, diags);
    if (!tree) return std::nullopt;
    auto platform = platform_from_file(*tree, diags);
    if (platform) platform->path = path;
    return platform;
}

std::string print_platform(const Platform& p, const std::string& comment) {
    std::string out;
    if (!comment.empty()) {
        std::size_t begin = 0;
        while (begin <= comment.size()) {
            std::size_t end = comment.find('\n', begin);
            if (end == std::string::npos) end = comment.size();
            const std::string line = comment.substr(begin, end - begin);
            if (end == comment.size() && line.empty() && begin > 0) break;  // a final newline adds no line
            out += line.empty() ? "#\n" : "# " + line + "\n";
            begin = end + 1;
        }
    }
    out += fmt::format("device = {}\n", p.device == Device::gpu ? "gpu" : "cpu");
    out += fmt::format("procs_per_node = {}\n", p.procs_per_node);
    if (p.nodes != 0) out += fmt::format("nodes = {}\n", p.nodes);
    out += fmt::format("memory = {}\n", bytes_text(p.memory));
    out += fmt::format("flops = {}\n", flops_text(p.flops));
    if (p.bfloat16_flops > 0) out += fmt::format("bfloat16_flops = {}\n", flops_text(p.bfloat16_flops));
    if (p.float16_flops > 0) out += fmt::format("float16_flops = {}\n", flops_text(p.float16_flops));
    out += fmt::format("efficiency = {:.6g}\n", p.efficiency);
    out += fmt::format("memory_bandwidth = {}\n", byte_rate_text(p.memory_bandwidth));
    out += fmt::format("kernel_latency = {}\n", time_text(p.kernel_latency));
    if (p.compute_units != 0) out += fmt::format("compute_units = {}\n", p.compute_units);
    out += fmt::format("workspace = {}\n", bytes_text(p.workspace));
    if (p.io_bandwidth > 0) out += fmt::format("io_bandwidth = {}\n", byte_rate_text(p.io_bandwidth));
    out += fmt::format("latency = {}\n", time_text(p.node.latency));
    out += fmt::format("bandwidth = {}\n", byte_rate_text(p.node.bandwidth));
    out += fmt::format("node_latency = {}\n", time_text(p.network.latency));
    out += fmt::format("node_bandwidth = {}\n", byte_rate_text(p.network.bandwidth));
    if (!p.times.empty()) out += "\n";
    for (const auto& [key, seconds] : p.times) out += fmt::format("time {} = {}\n", key, time_text(seconds));
    return out;
}

}  // namespace dsl::scheduler

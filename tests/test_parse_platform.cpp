// Tests of `.platform` files: the grammar, parser and printer (trees, round trips, syntax errors at exact
// places), the checks that make a Platform of a tree, finding platforms, and print_platform's round trip.
#include "run_dsl.hpp"
#include "support.hpp"

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/print.hpp>
#include <dsl/grammar/platform.hpp>
#include <dsl/scheduler/platform.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <tao/pegtl/contrib/analyze.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <tuple>

using namespace dsl;
using namespace dsl::frontend;
using scheduler::Platform;

namespace {

std::unique_ptr<test::Parsed<PlatformFile>> parse(const std::string& text) {
    return test::parse<PlatformFile>(text, "test.platform");
}

void check_round_trip(const std::string& text) { test::check_round_trip<PlatformFile>(text, "test.platform"); }

// A complete platform, one setting per line, so that a test can replace or drop one line.
const std::string complete =
    "device = gpu\n"
    "procs_per_node = 4\n"
    "nodes = 795\n"
    "memory = 16 GiB\n"
    "flops = 15.7 TFLOP/s\n"
    "efficiency = 0.6\n"
    "memory_bandwidth = 900 GB/s\n"
    "kernel_latency = 8 us\n"
    "workspace = 1 GiB\n"
    "latency = 1.8 us\n"
    "bandwidth = 75 GB/s\n"
    "node_latency = 1.5 us\n"
    "node_bandwidth = 12.5 GB/s\n";

// The platform of `text`, with the diagnostics of parsing and checking it.
struct Checked {
    SourceManager sources;
    Diagnostics diags;
    std::optional<Platform> platform;
};

std::unique_ptr<Checked> check(const std::string& text) {
    auto c = std::make_unique<Checked>();
    auto tree = parse_platform(*c->sources.add("test.platform", text), c->diags);
    if (tree) c->platform = scheduler::platform_from_file(*tree, c->diags);
    return c;
}

// `complete` with the line that sets `key` replaced by `line` (dropped when `line` is empty).
std::string with(const std::string& key, const std::string& line) {
    std::string out, rest = complete;
    while (!rest.empty()) {
        const auto end = rest.find('\n');
        const std::string l = rest.substr(0, end);
        rest = rest.substr(end + 1);
        out += l.rfind(key + " =", 0) == 0 ? (line.empty() ? "" : line + "\n") : l + "\n";
    }
    return out;
}

bool approx_equal(double a, double b) { return std::abs(a - b) <= 1e-5 * std::max(std::abs(a), std::abs(b)); }

void check_same(const Platform& a, const Platform& b) {
    CHECK(a.device == b.device);
    CHECK(a.procs_per_node == b.procs_per_node);
    CHECK(a.nodes == b.nodes);
    CHECK(approx_equal(a.memory, b.memory));
    CHECK(approx_equal(a.flops, b.flops));
    CHECK(approx_equal(a.efficiency, b.efficiency));
    CHECK(approx_equal(a.memory_bandwidth, b.memory_bandwidth));
    CHECK(approx_equal(a.kernel_latency, b.kernel_latency));
    CHECK(approx_equal(a.workspace, b.workspace));
    CHECK(approx_equal(a.node.latency, b.node.latency));
    CHECK(approx_equal(a.node.bandwidth, b.node.bandwidth));
    CHECK(approx_equal(a.network.latency, b.network.latency));
    CHECK(approx_equal(a.network.bandwidth, b.network.bandwidth));
    REQUIRE(a.times.size() == b.times.size());
    for (const auto& [key, seconds] : a.times) {
        INFO(key);
        REQUIRE(b.times.count(key));
        CHECK(approx_equal(seconds, b.times.at(key)));
    }
}

}  // namespace

TEST_CASE("platform grammar has no infinite loops", "[platform]") {
    CHECK(tao::pegtl::analyze<dsl::grammar::platform::grammar>() == 0);
}

TEST_CASE("platform: empty files and comments", "[platform]") {
    for (const char* text : {"", "   \n\n", "# only a comment", "# c\n  # d\n"}) {
        auto p = parse(text);
        REQUIRE(p->file);
        CHECK(p->file->settings.empty());
        CHECK(p->file->times.empty());
        CHECK(print_platform_file(*p->file).empty());
    }
}

TEST_CASE("platform: settings with numbers, units and words", "[platform]") {
    auto p = parse("device = gpu  # a GPU\nmemory = 16 GiB\nbandwidth=12.5GB/s\nefficiency = 0.60\nx = 1e3\tms\n");
    REQUIRE(p->file);
    const auto& s = p->file->settings;
    REQUIRE(s.size() == 5);
    CHECK(s[0].key == "device");
    CHECK(s[0].loc.line == 1);
    CHECK(s[0].loc.col == 1);
    CHECK(s[0].loc.length == 6);
    CHECK(s[0].value.kind == PlatformValue::Kind::word);
    CHECK(s[0].value.word == "gpu");
    CHECK(s[0].value.loc.col == 10);

    CHECK(s[1].value.kind == PlatformValue::Kind::number);
    CHECK(s[1].value.number == 16.0);
    CHECK(s[1].value.number_text == "16");
    CHECK(s[1].value.unit == "GiB");
    CHECK(s[1].value.loc.line == 2);
    CHECK(s[1].value.loc.col == 10);
    CHECK(s[1].value.loc.length == 6);  // the number and its unit
    CHECK(s[1].value.unit_loc.col == 13);
    CHECK(s[1].value.unit_loc.length == 3);

    CHECK(s[2].key == "bandwidth");
    CHECK(s[2].value.number == 12.5);
    CHECK(s[2].value.unit == "GB/s");  // no blank between the number and its unit

    CHECK(s[3].value.number == Approx(0.6));
    CHECK(s[3].value.number_text == "0.60");
    CHECK(s[3].value.unit.empty());

    CHECK(s[4].value.number == 1000.0);
    CHECK(s[4].value.unit == "ms");  // a tab is a blank
}

TEST_CASE("platform: a unit must be on its number's line", "[platform]") {
    // `latency` is the next setting's key, not the unit of 0.6.
    auto p = parse("efficiency = 0.6\nlatency = 2 us\nnodes = 2 # no unit\nworkspace = 0\n");
    REQUIRE(p->file);
    const auto& s = p->file->settings;
    REQUIRE(s.size() == 4);
    CHECK(s[0].value.unit.empty());
    CHECK(s[1].key == "latency");
    CHECK(s[1].value.unit == "us");
    CHECK(s[2].value.unit.empty());
    CHECK(s[3].value.unit.empty());
}

TEST_CASE("platform: time lines with fields", "[platform]") {
    auto p = parse(
        "procs_per_node = 4\n"
        "time conv.forward k=3x3 s=1x1 threads=1 x=1x16x34x34 y=1x16x32x32 = 0.482 ms\n"
        "time sendrecv bytes=65536 = 12.3 us\n"
        "time allreduce\n  bytes=1048576\n  procs=4\n  = 0.71 ms\n"
        "time a.b.c x=0 = 1e-3 s\n");
    REQUIRE(p->file);
    const auto& f = *p->file;
    REQUIRE(f.settings.size() == 1);
    REQUIRE(f.times.size() == 4);
    const auto& t = f.times[0];
    CHECK(t.kernel == "conv.forward");
    CHECK(t.loc.line == 2);
    CHECK(t.loc.col == 1);
    CHECK(t.kernel_loc.col == 6);
    CHECK(t.kernel_loc.length == 12);
    REQUIRE(t.fields.size() == 5);
    CHECK(t.fields[0].key == "k");
    CHECK(t.fields[0].dims == std::vector<std::int64_t>{3, 3});
    CHECK(t.fields[0].loc.col == 19);
    CHECK(t.fields[3].key == "x");
    CHECK(t.fields[3].dims == std::vector<std::int64_t>{1, 16, 34, 34});
    CHECK(t.value.number == Approx(0.482));
    CHECK(t.value.unit == "ms");
    CHECK(f.times[1].fields[0].dims == std::vector<std::int64_t>{65536});
    CHECK(f.times[2].fields.size() == 2);
    CHECK(f.times[2].value.unit == "ms");
    CHECK(f.times[3].kernel == "a.b.c");
    CHECK(f.times[3].fields[0].dims == std::vector<std::int64_t>{0});
}

TEST_CASE("platform: `time` is a keyword only as a whole word", "[platform]") {
    auto p = parse("time_scale = 2\ntimes = x\n");
    REQUIRE(p->file);
    REQUIRE(p->file->settings.size() == 2);
    CHECK(p->file->settings[0].key == "time_scale");
    CHECK(p->file->times.empty());
}

TEST_CASE("platform: the largest dimension", "[platform]") {
    auto p = parse("time k x=9223372036854775807 = 1 s");
    REQUIRE(p->file);
    CHECK(p->file->times[0].fields[0].dims[0] == 9223372036854775807);
}

TEST_CASE("platform: two settings on a line after a number: the error says why", "[platform]") {
    auto p = parse("nodes = 1 memory = 16 GiB\n");
    CHECK_FALSE(p->file);
    REQUIRE(p->diags.all().size() == 1);
    const auto& d = p->diags.all()[0];
    CHECK(d.message == "unexpected character '='");
    CHECK(d.loc.col == 18);
    REQUIRE(d.notes.size() == 1);
    CHECK(d.notes[0].message ==
          "'memory' was read as the unit of the number before it: a name after a number on its line is its unit, "
          "so start the next setting on a new line");
    CHECK(d.notes[0].loc.col == 11);
    // Elsewhere an unexpected '=' has no such note.
    auto q = parse("nodes = 1 GiB\nx = 2 = 3\n");
    REQUIRE(q->diags.all().size() == 1);
    CHECK(q->diags.all()[0].notes.empty());
}

TEST_CASE("platform: canonical text", "[platform]") {
    auto p = parse(
        "# Lassen\ndevice=gpu procs_per_node = 4\nmemory = 16GiB   flops = 15.7 TFLOP/s # peak\n"
        "time sendrecv  bytes=65536 =12.3 us time conv.forward\n k=3x3\n x=1x16x34x34 = 0.482 ms\n"
        "efficiency = 0.60\n");
    REQUIRE(p->file);
    CHECK(print_platform_file(*p->file) ==
          "device = gpu\n"
          "procs_per_node = 4\n"
          "memory = 16 GiB\n"
          "flops = 15.7 TFLOP/s\n"
          "efficiency = 0.60\n"
          "\n"
          "time sendrecv bytes=65536 = 12.3 us\n"
          "time conv.forward k=3x3 x=1x16x34x34 = 0.482 ms\n");
}

TEST_CASE("platform: json", "[platform]") {
    auto p = parse("device = gpu\nmemory = 16 GiB\nefficiency = 0.5\ntime sendrecv bytes=8 = 2 us\n");
    REQUIRE(p->file);
    CHECK(platform_to_json(*p->file, false) == nlohmann::json::parse(R"({
        "settings": [
            {"key": "device", "value": {"word": "gpu"}},
            {"key": "memory", "value": {"number": 16.0, "unit": "GiB"}},
            {"key": "efficiency", "value": {"number": 0.5, "unit": ""}}],
        "times": [{"kernel": "sendrecv", "fields": [{"key": "bytes", "dims": [8]}],
                   "value": {"number": 2.0, "unit": "us"}}]})"));
    const auto j = platform_to_json(*p->file, true);
    CHECK(j["settings"][1]["line"] == 2);
    CHECK(j["settings"][1]["value"]["col"] == 10);
    CHECK(j["times"][0]["line"] == 4);
    CHECK(j["times"][0]["kernel_col"] == 6);
    CHECK(j["times"][0]["fields"][0]["col"] == 15);
}

TEST_CASE("platform: round trips", "[platform]") {
    const std::string text =
        GENERATE(as<std::string>{}, "", "device = gpu", "memory = 16GiB", "a = 1\nb = 2\nc = x d = y",
                 "x = 1.5e-3 us\ny = 2.\nz = 007 ms", "time k x=1 = 1 s",
                 "time conv.forward k=3x3 s=1x1 x=1x16x34x34 = 0.482 ms\nflops = 1 TFLOP/s\n",
                 "time sendrecv bytes=65536 = 12.3 us time allreduce bytes=1 procs=4 = 5E2 ns");
    check_round_trip(text);
    check_round_trip(complete);
}

TEST_CASE("platform: syntax errors", "[platform]") {
    // source, line, col, length, message
    using Row = std::tuple<std::string, unsigned, unsigned, unsigned, std::string>;
    const auto [text, line, col, length, message] =
        GENERATE(table<std::string, unsigned, unsigned, unsigned, std::string>({
            Row{"memory = \n", 1, 9, 1, "expected a value after '='"},
            Row{"memory = -4 GiB", 1, 10, 1, "expected a value after '='"},
            Row{"memory 16 GiB", 1, 7, 1, "expected '=' after the setting name"},
            Row{"device = time", 1, 10, 1, "expected a value after '='"},
            Row{"bandwidth = 75 GB/\nlatency = 1 us", 1, 19, 1, "expected a unit after '/'"},
            Row{"bandwidth = 75 GB/ s", 1, 19, 1, "expected a unit after '/'"},
            Row{"memory = 16 GiB2", 1, 16, 1, "invalid unit"},
            Row{"nodes = 4_", 1, 10, 1, "invalid number"},
            Row{"efficiency = 0.5.1", 1, 17, 1, "invalid number"},
            Row{"memory = 1e999 B", 1, 10, 5, "number literal is out of range"},
            Row{"time\n", 1, 5, 1, "expected a kernel name after 'time'"},
            Row{"time = 3 ms", 1, 6, 1, "expected a kernel name after 'time'"},
            Row{"time conv. x=1 = 1 ms", 1, 11, 1, "expected a name after '.' in the kernel name"},
            Row{"time conv x 1 = 1 ms", 1, 12, 1, "expected '=' after the field name"},
            Row{"time conv x= = 1 ms", 1, 14, 1, "expected dimensions such as 1x16x32x32 after '='"},
            Row{"time conv x=1x = 1 ms", 1, 14, 1, "invalid dimensions"},
            Row{"time conv x=3a = 1 ms", 1, 14, 1, "invalid dimensions"},
            Row{"time conv x=99999999999999999999 = 1 ms", 1, 13, 20, "integer literal is too large"},
            Row{"time conv x=1\n", 1, 14, 1, "expected '=' before the measured time"},
            Row{"time conv x=1 = fast", 1, 17, 1, "expected the measured time after '='"},
            Row{"time conv x=1 =", 1, 16, 1, "expected the measured time after '='"},
            Row{"nodes = 4\n$", 2, 1, 1, "unexpected character '$'"},
            Row{"bandwidth = 75 GB / s", 1, 19, 1, "unexpected character '/'"},
            Row{"memory = 16 GiB = 3", 1, 17, 1, "unexpected character '='"},
            Row{std::string("nodes = 4\n\x01"), 2, 1, 1, "unexpected character '\\x01'"},
        }));
    test::check_syntax_error<PlatformFile>(text, "test.platform", line, col, length, message);
}

TEST_CASE("platform: a complete file in SI units", "[platform]") {
    auto c = check(complete + "time sendrecv bytes=65536 = 12.3 us\ntime conv.forward y=1x2 k=3x3 = 0.482 ms\n");
    INFO(c->diags.text());
    REQUIRE(c->platform);
    const Platform& p = *c->platform;
    CHECK(p.path == "test.platform");
    CHECK(p.device == scheduler::Device::gpu);
    CHECK(p.procs_per_node == 4);
    CHECK(p.nodes == 795);
    CHECK(p.memory == 16.0 * 1024 * 1024 * 1024);
    CHECK(p.flops == Approx(15.7e12));
    CHECK(p.efficiency == Approx(0.6));
    CHECK(p.memory_bandwidth == Approx(900e9));
    CHECK(p.kernel_latency == Approx(8e-6));
    CHECK(p.workspace == 1024.0 * 1024 * 1024);
    CHECK(p.node.latency == Approx(1.8e-6));
    CHECK(p.node.bandwidth == Approx(75e9));
    CHECK(p.network.latency == Approx(1.5e-6));
    CHECK(p.network.bandwidth == Approx(12.5e9));
    REQUIRE(p.times.size() == 2);
    CHECK(p.times.at("sendrecv bytes=65536") == Approx(12.3e-6));
    CHECK(p.times.at("conv.forward k=3x3 y=1x2") == Approx(0.482e-3));
}

TEST_CASE("platform: every unit of every kind", "[platform]") {
    using Row = std::tuple<std::string, std::string, double>;
    const auto [key, value, si] = GENERATE(table<std::string, std::string, double>({
        Row{"memory", "3 B", 3},
        Row{"memory", "3 KB", 3e3},
        Row{"memory", "3 MB", 3e6},
        Row{"memory", "3 GB", 3e9},
        Row{"memory", "3 TB", 3e12},
        Row{"memory", "3 KiB", 3 * 1024.0},
        Row{"memory", "3 MiB", 3 * 1024.0 * 1024},
        Row{"memory", "3 GiB", 3 * 1024.0 * 1024 * 1024},
        Row{"memory", "3 TiB", 3 * 1024.0 * 1024 * 1024 * 1024},
        Row{"flops", "3 FLOP/s", 3},
        Row{"flops", "3 GFLOP/s", 3e9},
        Row{"flops", "3 TFLOP/s", 3e12},
        Row{"flops", "3 PFLOP/s", 3e15},
        Row{"bandwidth", "3 B/s", 3},
        Row{"bandwidth", "3 KB/s", 3e3},
        Row{"bandwidth", "3 MB/s", 3e6},
        Row{"bandwidth", "3 GB/s", 3e9},
        Row{"bandwidth", "3 TB/s", 3e12},
        Row{"bandwidth", "3 KiB/s", 3 * 1024.0},
        Row{"bandwidth", "3 MiB/s", 3 * 1024.0 * 1024},
        Row{"bandwidth", "3 GiB/s", 3 * 1024.0 * 1024 * 1024},
        Row{"latency", "3 s", 3},
        Row{"latency", "3 ms", 3e-3},
        Row{"latency", "3 us", 3e-6},
        Row{"latency", "3 ns", 3e-9},
    }));
    auto c = check(with(key, key + " = " + value));
    INFO(c->diags.text());
    REQUIRE(c->platform);
    const Platform& p = *c->platform;
    const double got = key == "memory"      ? p.memory
                       : key == "flops"     ? p.flops
                       : key == "bandwidth" ? p.node.bandwidth
                                            : p.node.latency;
    CHECK(got == Approx(si));
}

TEST_CASE("platform: defaults, and one node needs no network", "[platform]") {
    auto c = check(
        "procs_per_node = 2\nnodes = 1\nmemory = 11 GiB\nflops = 36 GFLOP/s\nmemory_bandwidth = 8 GB/s\n"
        "latency = 1 us\nbandwidth = 5 GB/s\n");
    INFO(c->diags.text());
    REQUIRE(c->platform);
    const Platform& p = *c->platform;
    CHECK(p.device == scheduler::Device::cpu);
    CHECK(p.efficiency == 0.5);
    CHECK(p.kernel_latency == 0.0);
    CHECK(p.workspace == 0.0);
    CHECK(p.network.latency == p.node.latency);
    CHECK(p.network.bandwidth == p.node.bandwidth);
    CHECK(p.times.empty());

    auto absent = check(with("nodes", ""));
    REQUIRE(absent->platform);
    CHECK(absent->platform->nodes == 0);

    auto own = check(with("nodes", "nodes = 1"));
    REQUIRE(own->platform);
    CHECK(own->platform->network.bandwidth == Approx(12.5e9));  // given: kept even on one node
}

TEST_CASE("platform: semantic errors", "[platform]") {
    // the setting replaced, its new line (empty: dropped), the first error, its line and column
    using Row = std::tuple<std::string, std::string, std::string, unsigned, unsigned>;
    const auto [key, line_text, message, line,
                col] = GENERATE(table<std::string, std::string, std::string, unsigned, unsigned>({
        Row{"memory", "memroy = 16 GiB", "unknown setting 'memroy'", 4, 1},
        Row{"memory", "memory = 16 GB/s", "'memory' takes bytes (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), not 'GB/s'", 4,
            13},
        Row{"memory", "memory = 16", "'memory' needs a unit of bytes (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", 4, 10},
        Row{"memory", "memory = 16 Gigs",
            "unknown unit 'Gigs': 'memory' takes bytes (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", 4, 13},
        Row{"memory", "memory = 0 GiB", "'memory' must be greater than 0", 4, 10},
        Row{"memory", "memory = 1e40 GiB", "'memory' = 1e40 GiB is out of range", 4, 10},
        Row{"memory", "memory = lots",
            "'memory' takes a number with a unit of bytes (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), not 'lots'", 4, 10},
        Row{"memory", "", "missing required setting 'memory'", 1, 1},
        Row{"device", "device = tpu", "'device' must be 'cpu' or 'gpu', not 'tpu'", 1, 10},
        Row{"device", "device = 1", "'device' must be 'cpu' or 'gpu', not '1'", 1, 10},
        Row{"procs_per_node", "procs_per_node = 0", "'procs_per_node' must be a positive integer, not '0'", 2, 18},
        Row{"procs_per_node", "procs_per_node = 2.0", "'procs_per_node' must be a positive integer, not '2.0'", 2, 18},
        Row{"procs_per_node", "procs_per_node = 4 GiB",
            "'procs_per_node' takes a positive integer without a unit, not 'GiB'", 2, 20},
        Row{"procs_per_node", "procs_per_node = many", "'procs_per_node' must be a positive integer, not 'many'", 2,
            18},
        Row{"nodes", "nodes = 99999999999999999999",
            "'nodes' = 99999999999999999999 is more than 1048576, the most a platform may have", 3, 9},
        Row{"flops", "flops = 15.7 TFLOPS",
            "unknown unit 'TFLOPS': 'flops' takes FLOP/s (FLOP/s, GFLOP/s, TFLOP/s, PFLOP/s)", 5, 14},
        Row{"flops", "flops = 0 TFLOP/s", "'flops' must be greater than 0", 5, 9},
        Row{"efficiency", "efficiency = 0", "'efficiency' must be in (0, 1], not '0'", 6, 14},
        Row{"efficiency", "efficiency = 1.01", "'efficiency' must be in (0, 1], not '1.01'", 6, 14},
        Row{"efficiency", "efficiency = 60 us", "'efficiency' takes a number in (0, 1] without a unit, not 'us'", 6,
            17},
        Row{"memory_bandwidth", "memory_bandwidth = 900 GB",
            "'memory_bandwidth' takes bytes per second (B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s), "
            "not 'GB'",
            7, 24},
        Row{"kernel_latency", "kernel_latency = 8 GB/s", "'kernel_latency' takes a time (s, ms, us, ns), not 'GB/s'", 8,
            20},
        Row{"latency", "latency = 1.8", "'latency' needs a unit of time (s, ms, us, ns)", 10, 11},
        Row{"latency", "latency = 1.8 sec", "unknown unit 'sec': 'latency' takes a time (s, ms, us, ns)", 10, 15},
        Row{"bandwidth", "bandwidth = 0 GB/s", "'bandwidth' must be greater than 0", 11, 13},
        Row{"node_latency", "", "missing required setting 'node_latency'", 1, 1},
        Row{"node_bandwidth", "node_bandwidth = 100 Gb/s",
            "unknown unit 'Gb/s': 'node_bandwidth' takes bytes per second (B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, "
            "MiB/s, GiB/s)",
            13, 22},
    }));
    const std::string text = with(key, line_text);
    INFO(text);
    auto c = check(text);
    INFO(c->diags.text());
    CHECK_FALSE(c->platform);
    REQUIRE(c->diags.has_errors());
    const auto& d = c->diags.all()[0];
    CHECK(d.severity == Severity::error);
    CHECK(d.message == message);
    CHECK(d.loc.line == line);
    CHECK(d.loc.col == col);
}

TEST_CASE("platform: the notes of semantic errors", "[platform]") {
    auto unknown = check(with("memory", "memroy = 16 GiB"));
    REQUIRE(unknown->diags.all().size() == 2);  // and 'memory' is missing
    REQUIRE(unknown->diags.all()[0].notes.size() == 1);
    CHECK(unknown->diags.all()[0].notes[0].message == "did you mean 'memory'?");
    CHECK(unknown->diags.all()[1].message == "missing required setting 'memory'");

    auto bits = check(with("bandwidth", "bandwidth = 100 Gb/s"));
    REQUIRE(bits->diags.all().size() == 1);
    REQUIRE(bits->diags.all()[0].notes.size() == 1);
    CHECK(bits->diags.all()[0].notes[0].message == "'Gb/s' is bits, and platforms take bytes: 100 Gb/s is 12.5 GB/s");

    auto letter_case = check(with("memory", "memory = 16 gib"));
    REQUIRE(letter_case->diags.all().size() == 1);
    REQUIRE(letter_case->diags.all()[0].notes.size() == 1);
    CHECK(letter_case->diags.all()[0].notes[0].message == "did you mean 'GiB'? units are case-sensitive");

    auto twice = check(complete + "memory = 32 GiB\n");
    REQUIRE(twice->diags.all().size() == 1);
    CHECK(twice->diags.all()[0].message == "'memory' is set twice");
    CHECK(twice->diags.all()[0].loc.line == 14);
    REQUIRE(twice->diags.all()[0].notes.size() == 1);
    CHECK(twice->diags.all()[0].notes[0].message == "first set here");
    CHECK(twice->diags.all()[0].notes[0].loc.line == 4);
}

TEST_CASE("platform: independent errors are all reported", "[platform]") {
    auto c = check("device = tpu\nmemory = 16\nflops = 1 GB\nnodes = 2\n");
    const auto& all = c->diags.all();
    REQUIRE(all.size() == 4);
    CHECK(all[0].message == "'device' must be 'cpu' or 'gpu', not 'tpu'");
    CHECK(all[1].message == "'memory' needs a unit of bytes (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
    CHECK(all[2].message == "'flops' takes FLOP/s (FLOP/s, GFLOP/s, TFLOP/s, PFLOP/s), not 'GB'");
    // Given with an error, memory and flops are not missing too.
    CHECK(all[3].message ==
          "missing required settings 'procs_per_node', 'memory_bandwidth', 'latency', 'bandwidth', 'node_latency' "
          "and 'node_bandwidth'");
    CHECK(all[3].loc.line == 1);
    CHECK(all[3].loc.col == 1);
    REQUIRE(all[3].notes.size() == 1);
    CHECK_FALSE(c->platform);
}

TEST_CASE("platform: errors in time lines", "[platform]") {
    using Row = std::tuple<std::string, std::string, unsigned, unsigned>;
    const auto [time, message, col, notes] = GENERATE(table<std::string, std::string, unsigned, unsigned>({
        Row{"time conv.forward = 1 ms",
            "the time of 'conv.forward' names no fields: a 'time' line gives the shapes it was measured at, as in "
            "'time sendrecv bytes=65536'",
            6, 0},
        Row{"time sendrecv bytes=1 bytes=2 = 1 us", "field 'bytes' is given twice", 23, 1},
        Row{"time sendrecv bytes=1 = 0 us", "a measured time must be greater than 0", 25, 0},
        Row{"time sendrecv bytes=1 = 3 GB", "a 'time' line takes a time (s, ms, us, ns), not 'GB'", 27, 0},
        Row{"time sendrecv bytes=1 = 3", "a 'time' line needs a unit of time (s, ms, us, ns)", 25, 0},
        Row{"time sendrecv bytes=1 = 3 Ms", "unknown unit 'Ms': a 'time' line takes a time (s, ms, us, ns)", 27, 1},
    }));
    auto c = check(complete + "\n" + time + "\n");
    INFO(c->diags.text());
    CHECK_FALSE(c->platform);
    REQUIRE(c->diags.all().size() == 1);
    const auto& d = c->diags.all()[0];
    CHECK(d.message == message);
    CHECK(d.loc.line == 15);
    CHECK(d.loc.col == col);
    CHECK(d.notes.size() == notes);
}

TEST_CASE("platform: the same time twice, with its fields in another order", "[platform]") {
    auto c = check(complete +
                   "time conv.forward k=3x3 x=1x16x34x34 = 0.482 ms\ntime conv.forward x=1x16x34x34 k=3x3 = 1 ms\n");
    REQUIRE(c->diags.all().size() == 1);
    const auto& d = c->diags.all()[0];
    CHECK(d.message == "the time of 'conv.forward k=3x3 x=1x16x34x34' is given twice");
    CHECK(d.loc.line == 15);
    REQUIRE(d.notes.size() == 1);
    CHECK(d.notes[0].message == "first given here");
    CHECK(d.notes[0].loc.line == 14);
}

TEST_CASE("time_key sorts the fields by name", "[platform]") {
    CHECK(scheduler::time_key(
              "conv.forward",
              {{"y", {1, 16, 32, 32}}, {"x", {1, 18, 65, 65}}, {"threads", {1}}, {"s", {2, 2}}, {"k", {3, 3}}}) ==
          "conv.forward k=3x3 s=2x2 threads=1 x=1x18x65x65 y=1x16x32x32");
    CHECK(scheduler::time_key("sendrecv", {{"bytes", {65536}}}) == "sendrecv bytes=65536");
    CHECK(scheduler::time_key("k", {}) == "k");
}

TEST_CASE("platform_path finds stdlib names and files", "[platform]") {
    const std::string lassen = scheduler::platform_path("lassen");
    CHECK(fs::path(lassen).filename() == "lassen.platform");
    CHECK(fs::is_regular_file(lassen));
    CHECK(scheduler::platform_path("no_such_platform").empty());
    CHECK(scheduler::platform_path("").empty());
    CHECK(scheduler::platform_path(lassen) == lassen);  // a path names itself
    CHECK(scheduler::platform_path("no/such.platform").empty());
    CHECK(scheduler::platform_path("lassen.platform").empty());  // a file name is not a stdlib name
    const auto names = scheduler::stdlib_platforms();
    for (const char* name : {"dgx_h100", "lassen", "local"})
        CHECK(std::find(names.begin(), names.end(), name) != names.end());
    CHECK(std::is_sorted(names.begin(), names.end()));
}

TEST_CASE("a missing platform file is the usual error", "[platform]") {
    SourceManager sources;
    Diagnostics diags;
    CHECK_FALSE(scheduler::load_platform("no/such.platform", sources, diags));
    REQUIRE(diags.all().size() == 1);
    CHECK(diags.all()[0].message.rfind("cannot read 'no/such.platform': ", 0) == 0);
}

TEST_CASE("every stdlib platform loads, and prints to text that loads back the same", "[platform]") {
    const auto names = scheduler::stdlib_platforms();
    REQUIRE(names.size() >= 3);
    for (const std::string& name : names) {
        SECTION(name) {
            SourceManager sources;
            Diagnostics diags;
            const auto p = scheduler::load_platform(scheduler::platform_path(name), sources, diags);
            INFO(diags.text());
            REQUIRE(p);
            CHECK(diags.all().empty());
            CHECK(p->path == scheduler::platform_path(name));
            CHECK(p->flops > 0);
            const std::string text = scheduler::print_platform(*p, name + "\nprinted by a test");
            INFO(text);
            CHECK(text.rfind("# " + name + "\n# printed by a test\ndevice = ", 0) == 0);
            auto again = check(text);
            INFO(again->diags.text());
            REQUIRE(again->platform);
            check_same(*p, *again->platform);
        }
    }
}

TEST_CASE("print_platform: readable units, times sorted by key, and a round trip", "[platform]") {
    Platform p;
    p.device = scheduler::Device::gpu;
    p.procs_per_node = 8;
    p.memory = 80.0 * 1024 * 1024 * 1024;
    p.flops = 67e12;
    p.efficiency = 0.55;
    p.memory_bandwidth = 3.35e12;
    p.kernel_latency = 4.5e-6;
    p.workspace = 512.0 * 1024 * 1024;
    p.node = {2e-6, 450e9};
    p.network = {1.5e-6, 50e9};
    p.times["sendrecv bytes=65536"] = 12.345678e-6;
    p.times["conv.forward k=3x3 x=1x16x34x34"] = 0.4821234e-3;
    p.times["allreduce bytes=1048576 procs=4"] = 2.5;
    p.times["tiny x=1"] = 3e-9;
    const std::string text = scheduler::print_platform(p, "");
    CHECK(text ==
          "device = gpu\n"
          "procs_per_node = 8\n"
          "memory = 80 GiB\n"
          "flops = 67 TFLOP/s\n"
          "efficiency = 0.55\n"
          "memory_bandwidth = 3.35 TB/s\n"
          "kernel_latency = 4.5 us\n"
          "workspace = 512 MiB\n"
          "latency = 2 us\n"
          "bandwidth = 450 GB/s\n"
          "node_latency = 1.5 us\n"
          "node_bandwidth = 50 GB/s\n"
          "\n"
          "time allreduce bytes=1048576 procs=4 = 2.5 s\n"
          "time conv.forward k=3x3 x=1x16x34x34 = 482.123 us\n"
          "time sendrecv bytes=65536 = 12.3457 us\n"
          "time tiny x=1 = 3 ns\n");
    auto again = check(text);
    INFO(again->diags.text());
    REQUIRE(again->platform);
    check_same(p, *again->platform);

    p.nodes = 1;
    p.flops = 36e9;
    p.memory_bandwidth = 0.5e9;
    p.times.clear();
    const std::string cpu = scheduler::print_platform(p, "one\n\nthree\n");
    CHECK(cpu.rfind("# one\n#\n# three\ndevice = gpu\nprocs_per_node = 8\nnodes = 1\n", 0) == 0);
    CHECK(cpu.find("flops = 36 GFLOP/s\n") != std::string::npos);
    CHECK(cpu.find("memory_bandwidth = 500 MB/s\n") != std::string::npos);
    CHECK(cpu.back() == '\n');
    CHECK(cpu.find("\n\n") == std::string::npos);
}

TEST_CASE("dsl print checks and prints a platform file", "[platform][cli]") {
    const Result r = run_dsl("print stdlib/platforms/lassen.platform");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.rfind("device = gpu\nprocs_per_node = 4\n", 0) == 0);
    CHECK(nlohmann::json::parse(run_dsl("print --json --locations stdlib/platforms/local.platform").out)["settings"]
              .is_array());
    const Result bad = run_dsl("print tests/diag/fail_platform_units.platform");
    CHECK(bad.exit_code == 1);
    CHECK(bad.out.empty());
    CHECK(bad.err.find("fail_platform_units.platform:4:13: error: 'memory' takes bytes") != std::string::npos);
}

TEST_CASE("a schedule names its platform by stdlib name or by a path relative to itself", "[platform]") {
    test::NetworkFromText n("input x [N, 3, 8, 8]\nc = conv(4, kernel = 3, pad = 1)\n");
    const auto platform_of = [&](const std::string& sched_path, const std::string& text) {
        SourceManager sources;
        Diagnostics diags;
        auto tree = parse_sched(*sources.add(sched_path, text), diags);
        REQUIRE(tree);
        auto s = scheduler::apply_schedule(n.net, *tree, diags);
        return std::make_pair(s && s->platform ? *s->platform : std::string(), diags.text());
    };
    const std::string dir = std::string(DSL_SOURCE_DIR) + "/stdlib/platforms";
    CHECK(platform_of("a.sched", "platform = lassen\n").first == scheduler::platform_path("lassen"));
    CHECK(platform_of(dir + "/a.sched", "platform = \"local.platform\"\n").first == dir + "/local.platform");
    // A quoted name is a path, never a stdlib name.
    const auto [quoted, quoted_errors] = platform_of("a.sched", "platform = \"lassen\"\n");
    CHECK(quoted.empty());
    CHECK(quoted_errors.find("error: cannot find the platform file 'lassen'") != std::string::npos);
    const auto [unknown, unknown_errors] = platform_of("a.sched", "platform = lasen\n");
    CHECK(unknown.empty());
    CHECK(unknown_errors.find("note: known platforms: 'dgx_h100', 'lassen', 'local'") != std::string::npos);
}

// Every numeric setting of a platform at the edges (0, -1, 2^31, 2^32, 2^63-1, 1e308, nan, inf): refused with
// an error located in the platform file, or taken with a prediction that is a finite, non-negative number;
// never a signal. `dsl check` reads the schedule's platform as `dsl explain` does, and fails where it fails.
#include "run_dsl.hpp"
#include "temp_files.hpp"

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <regex>
#include <vector>

namespace {

using dsl::test::read_bytes;
using dsl::test::TempDir;
using dsl::test::write_bytes;

struct Setting {
    const char* key;
    const char* unit;  // "" for a plain number
};

const std::vector<Setting> settings{
    {"procs_per_node", ""},
    {"nodes", ""},
    {"memory", "GiB"},
    {"flops", "GFLOP/s"},
    {"bfloat16_flops", "GFLOP/s"},
    {"float16_flops", "GFLOP/s"},
    {"efficiency", ""},
    {"memory_bandwidth", "GB/s"},
    {"kernel_latency", "us"},
    {"workspace", "MiB"},
    {"latency", "ns"},
    {"bandwidth", "GB/s"},
    {"node_latency", "ns"},
    {"node_bandwidth", "GB/s"},
};

std::string platform(const std::string& key, const std::string& value) {
    std::string out = "device = cpu\n";
    const std::vector<std::pair<std::string, std::string>> base{{"procs_per_node", "2"},
                                                                {"nodes", "1"},
                                                                {"memory", "11 GiB"},
                                                                {"flops", "79.6 GFLOP/s"},
                                                                {"bfloat16_flops", "159 GFLOP/s"},
                                                                {"float16_flops", "159 GFLOP/s"},
                                                                {"efficiency", "0.6"},
                                                                {"memory_bandwidth", "8 GB/s"},
                                                                {"kernel_latency", "5 us"},
                                                                {"workspace", "29 MiB"},
                                                                {"latency", "941.5 ns"},
                                                                {"bandwidth", "3.6 GB/s"},
                                                                {"node_latency", "941.5 ns"},
                                                                {"node_bandwidth", "3.6 GB/s"}};
    for (const auto& [k, v] : base) out += k + " = " + (k == key ? value : v) + "\n";
    return out;
}

}  // namespace

TEST_CASE("platform settings at the edges are refused where they are, never a crash or a wrong prediction",
          "[cli][platform]") {
    TempDir dir;
    const std::string file = dir / "edge.platform", sched = dir / "edge.sched";
    write_bytes(sched, "procs = 2\nbatch = 4\nplatform = \"" + file + "\"\n\ndefault N=2 overlap=off\n");
    const std::regex located("(^|\\n)" + file + ":[0-9]+:[0-9]+: error: ");
    for (const Setting& s : settings) {
        for (const char* number :
             {"0", "-1", "2147483648", "4294967296", "9223372036854775807", "1e308", "nan", "inf"}) {
            const std::string value = std::string(number) + (*s.unit ? std::string(" ") + s.unit : "");
            INFO(s.key << " = " << value);
            write_bytes(file, platform(s.key, value));
            const Result explain = run_dsl("explain samples/mesh_tiny.net " + sched + " --json");
            INFO(explain.out << explain.err);
            REQUIRE((explain.exit_code == 0 || explain.exit_code == 1));
            CHECK(explain.err.find("internal error") == std::string::npos);
            if (explain.exit_code == 1) CHECK(std::regex_search(explain.err, located));
            if (explain.exit_code == 0) {
                const auto j = nlohmann::json::parse(explain.out);
                const auto& p = j.contains("prediction") ? j["prediction"] : j;
                REQUIRE(p.contains("seconds"));
                for (const auto& figure :
                     {p["seconds"]["step"], p["memory_bytes"]["total"], p["memory_bytes"]["limit"]})
                    CHECK((figure.is_number() && figure.get<double>() >= 0.0));
            }
            const Result check = run_dsl("check samples/mesh_tiny.net " + sched);
            INFO(check.err);
            CHECK(check.exit_code == explain.exit_code);
            if (check.exit_code == 1) CHECK(std::regex_search(check.err, located));
        }
    }
}

TEST_CASE("a platform that is no file, or not text, is an error at the schedule's platform line", "[cli][platform]") {
    TempDir dir;
    std::filesystem::create_directories(dir.path / "runs");
    write_bytes(dir / "binary.platform", std::string("device = cpu\n\0\x01\x02", 16));
    for (const auto& [name, message] : std::vector<std::pair<std::string, std::string>>{
             {"runs", "it is a directory, not a regular file"}, {"binary.platform", "it is binary, not text"}}) {
        write_bytes(dir / "s.sched", "procs = 1\nplatform = \"" + name + "\"\n\ndefault N=1 overlap=off\n");
        for (const char* verb : {"check", "explain", "run"}) {
            const Result r = run_dsl(std::string(verb) + " samples/mesh_tiny.net " + (dir / "s.sched") +
                                     (std::string(verb) == "run" ? " --steps 1" : ""));
            INFO(verb << " " << name << "\n" << r.err);
            CHECK(r.exit_code == 1);
            CHECK(r.err.find(dir / "s.sched" + ":2:12: error: platform '" + name + "'") != std::string::npos);
            CHECK(r.err.find(message) != std::string::npos);
        }
    }
}

TEST_CASE("an error echoes at most about 200 characters of its line", "[cli][platform]") {
    TempDir dir;
    write_bytes(dir / "long.platform", platform("procs_per_node", std::string(100000, '7')));
    const Result r = run_dsl("print " + (dir / "long.platform"));
    INFO(r.err.substr(0, 2000));
    CHECK(r.exit_code == 1);
    CHECK(r.err.size() < 800);
    const Result e =
        run_dsl("explain samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --platform " + (dir / "long.platform"));
    CHECK(e.exit_code == 1);
    CHECK(e.err.size() < 800);
    CHECK(e.err.find("long.platform:2:18: error: number literal is out of range") != std::string::npos);
    // A long number that parses: the message quotes its start and its length.
    write_bytes(dir / "long.platform", platform("nodes", std::string(300, '8')));
    const Result n = run_dsl("explain samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --platform " +
                             (dir / "long.platform"));
    INFO(n.err);
    CHECK(n.exit_code == 1);
    CHECK(n.err.size() < 800);
    CHECK(n.err.find("'nodes' = 888888888888888888888888... (300 characters) is more than 1048576") !=
          std::string::npos);
}

TEST_CASE("a network too big for this machine is refused before 'local' is measured, at the layer", "[cli][model]") {
    TempDir dir;
    // 2.1e9 weights, each with its gradient and two moments: 31.5 GiB, more than this machine's 24 GiB (and
    // within what a tensor can index, which a larger layer is refused for first, at the same line).
    write_bytes(dir / "wide.net",
                "input x [N, 46000, 4, 4]\nlabel y [N, 4, 4]\n\nwide = conv(46000, kernel = 1)\n"
                "pred = conv(2, kernel = 1)\nloss = pixel_cross_entropy from pred, y\n");
    write_bytes(dir / "wide.sched", "procs = 1\nbatch = 1\n\ndefault N=1 overlap=off\n");
    const std::string env = "env -u DSL_LOCAL_PLATFORM DSL_CACHE_DIR='" + (dir / "cache") + "'";
    const Result r = run_dsl("explain " + (dir / "wide.net") + " " + (dir / "wide.sched"), env);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(dir / "wide.net" + ":4:1: error: layer 'wide' cannot fit this machine's memory") !=
          std::string::npos);
    CHECK(r.err.find("measuring this machine") == std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.path / "cache"));
}
